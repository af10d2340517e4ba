// Package leakcheck is the goroutine-leak check run after the tests of every package that starts
// goroutines, or whose tests start servers, coordinators or workers: a package's TestMain calls
// Main. It uses goleak, and ignores only goroutines the embedded NATS server can leave running
// after its Shutdown (jstest.ServerGoroutineLeaks, which says why); a goroutine of Weave's own
// that outlives a test fails it.
package leakcheck

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/weavejobs/weave/integration/jstest"
)

// Main runs the tests of m, then fails the test binary if goroutines other than the ignored ones
// are still running (goleak retries for a while, so goroutines that are ending get to end).
// opts adds a package's own ignores; each should say why it is not a leak of Weave's.
func Main(m *testing.M, opts ...goleak.Option) {
	for _, fn := range jstest.ServerGoroutineLeaks {
		opts = append(opts, goleak.IgnoreTopFunction(fn))
	}
	goleak.VerifyTestMain(m, opts...)
}
