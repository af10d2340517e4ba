//go:build unix

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/weavejobs/weave/internal/auth"
	"github.com/weavejobs/weave/internal/testwait"
	"github.com/weavejobs/weave/internal/wire"
)

// lockedBuffer is a bytes.Buffer written by a command while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestDashboardCommand runs weave dashboard as the observer user weave auth describes, beside a
// coordinator: it prints its URL (and, with --allow-actions, the generated token), serves the
// coordinator's status, and ends cleanly on its context's end.
func TestDashboardCommand(t *testing.T) {
	t.Parallel()
	names, err := wire.NewNames("dashcli")
	if err != nil {
		t.Fatal(err)
	}
	p, err := auth.For(names, auth.User{Role: auth.Observer, Name: "observer"})
	if err != nil {
		t.Fatal(err)
	}
	url := startAuthServer(t, map[string]*server.Permissions{
		"admin":    nil,
		"observer": {Publish: allow(p.Publish...), Subscribe: allow(p.Subscribe...)},
	})
	admin := []string{"--nats", url, "--namespace", "dashcli", "--log-level", "error", "--user", "admin", "--password", "admin"}
	observer := []string{"--nats", url, "--namespace", "dashcli", "--log-level", "error", "--user", "observer", "--password", "observer", "--inbox-prefix", p.InboxPrefix}
	initNamespace(t, admin)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	background := func(out *lockedBuffer, args ...string) {
		wg.Go(func() {
			var errOut lockedBuffer
			if code := run(ctx, args, strings.NewReader(""), out, &errOut); code != exitOK {
				t.Errorf("weave %q: exit %d\n%s%s", args, code, out, errOut.String())
			}
		})
	}
	background(&lockedBuffer{}, append([]string{"coordinator"}, admin...)...)

	for _, tc := range []struct {
		flags []string
		token bool
	}{
		{nil, false},
		{[]string{"--allow-actions"}, true},
	} {
		var out lockedBuffer
		background(&out, append(append([]string{"dashboard", "--listen", "127.0.0.1:0"}, observer...), tc.flags...)...)
		urlLine := regexp.MustCompile(`Weave dashboard of namespace dashcli: (http://127\.0\.0\.1:\d+/)\n`)
		var base string
		testwait.For(t, 30*time.Second, "the dashboard's URL", func() bool {
			m := urlLine.FindStringSubmatch(out.String())
			if m != nil {
				base = m[1]
			}
			return m != nil
		})
		tokenLine := regexp.MustCompile(`Token: ([0-9a-f]{32})\nOpen with the token filled in: ` + regexp.QuoteMeta(base) + `#token=([0-9a-f]{32})\n`)
		if m := tokenLine.FindStringSubmatch(out.String()); (m != nil) != tc.token || (m != nil && m[1] != m[2]) {
			t.Errorf("dashboard %v printed:\n%s", tc.flags, out.String())
		}
		testwait.For(t, 30*time.Second, "the coordinator's status on the dashboard", func() bool {
			resp, err := http.Get(base + "api/snapshot")
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			var snap struct {
				Status *struct{ Namespace string } `json:"status"`
			}
			return json.NewDecoder(resp.Body).Decode(&snap) == nil && snap.Status != nil && snap.Status.Namespace == "dashcli"
		})
	}

	// Flags checked before connecting.
	if code, _, errOut := runCLI(t, "", append([]string{"dashboard", "--action-token", "x"}, observer...)...); code != exitUsage || !strings.Contains(errOut, "--action-token needs --allow-actions") {
		t.Errorf("--action-token without --allow-actions: exit %d, %s", code, errOut)
	}
	if code, _, errOut := runCLI(t, "", append([]string{"dashboard", "--listen", "127.0.0.1:notaport"}, observer...)...); code != exitUsage || !strings.Contains(errOut, "--listen") {
		t.Errorf("bad --listen: exit %d, %s", code, errOut)
	}
	// Beyond loopback, reads need a token and requests a known Host: without them it does not
	// start, and says what to give.
	for _, args := range [][]string{{"--listen", "0.0.0.0:0"}, {"--listen", ":0", "--read-token", "r"}, {"--listen", "0.0.0.0:0", "--host-name", "dash.example"}} {
		code, _, errOut := runCLI(t, "", append(append([]string{"dashboard"}, args...), observer...)...)
		if code != exitUsage || !strings.Contains(errOut, "not a loopback address") || !strings.Contains(errOut, "reverse proxy") {
			t.Errorf("dashboard %v: exit %d, %s", args, code, errOut)
		}
	}
}
