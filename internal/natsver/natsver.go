// Package natsver checks that the NATS server a component is connected to is recent enough for
// Weave, so that an old server gets one sentence naming the version needed instead of a failure
// deep in a JetStream call.
package natsver

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
)

// Minimum is the oldest nats-server Weave runs on. 2.11.0 brought what Weave needs: limit marker
// TTLs on key-value buckets (the coordinator lease expires by itself when its holder dies) and
// batch direct get (the coordinator scans NS_WORK without a consumer when it starts).
const Minimum = "2.11.0"

var minimum = [3]int{2, 11, 0}

// ErrServerTooOld reports a nats-server older than Minimum.
var ErrServerTooOld = errors.New("weave: nats-server too old")

// tooOld is ErrServerTooOld with the server's version.
type tooOld struct{ version string }

func (e *tooOld) Error() string {
	return fmt.Sprintf("weave: nats-server %s is too old: Weave needs %s or later", e.version, Minimum)
}

func (e *tooOld) Is(target error) bool { return target == ErrServerTooOld }

// Check returns an error wrapping ErrServerTooOld if version, a server version as the server
// announces it ("2.10.22", "2.12.0-RC.1"), is below Minimum. A pre-release counts as its release.
// An empty or unparsable version passes: it is not known to be too old (a connection that has
// not completed its handshake has no version yet), and the server's own errors remain.
func Check(version string) error {
	v, ok := parse(version)
	if !ok {
		return nil
	}
	for i := range v {
		if v[i] != minimum[i] {
			if v[i] < minimum[i] {
				return &tooOld{version: version}
			}
			return nil
		}
	}
	return nil
}

// CheckConn checks the version of the server nc is connected to (see Check).
func CheckConn(nc *nats.Conn) error { return Check(nc.ConnectedServerVersion()) }

// parse reads major.minor.patch, ignoring a "v" prefix and any pre-release or build suffix.
func parse(version string) ([3]int, bool) {
	s := strings.TrimPrefix(version, "v")
	if i := strings.IndexAny(s, "-+"); i >= 0 {
		s = s[:i]
	}
	parts := strings.Split(s, ".")
	var v [3]int
	if len(parts) != 3 {
		return v, false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return v, false
		}
		v[i] = n
	}
	return v, true
}
