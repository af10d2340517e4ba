package dashboard_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/weavejobs/weave/cmd/weave/internal/dashboard"
)

// serveOn serves a dashboard of cfg (over nopBackend) on addr until the test ends and returns
// the URL to reach it by (through loopback, whatever the address) and a channel closed when Serve
// has returned, with what it returned.
func serveOn(t *testing.T, addr string, cfg dashboard.Config) (string, *served) {
	t.Helper()
	cfg.Backend = nopBackend{}
	srv, err := dashboard.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := &served{done: make(chan struct{})}
	go func() {
		defer close(done.done)
		done.err = srv.Serve(ctx, ln)
	}()
	t.Cleanup(func() {
		cancel()
		<-done.done
	})
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return "http://127.0.0.1:" + port, done
}

type served struct {
	done chan struct{} // closed when Serve returned
	err  error         // what it returned
}

// request sends a GET with the given Host and Authorization and returns the response and its body.
func request(t *testing.T, url, host, authorization string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// securityHeaders reports which of the headers every answer carries resp lacks.
func securityHeaders(resp *http.Response) []string {
	var missing []string
	for _, h := range []string{"Content-Security-Policy", "X-Content-Type-Options", "Referrer-Policy"} {
		if resp.Header.Get(h) == "" {
			missing = append(missing, h)
		}
	}
	return missing
}

// TestExposedNeedsReadTokenAndHostNames: beyond loopback the dashboard does not start without a
// read token and host names; with them it refuses unauthenticated reads (with the basic
// authentication challenge a browser answers) and requests naming another Host, without echoing
// it, and serves the token as a bearer token or a basic password. The action token guards reads
// when there is no read token.
func TestExposedNeedsReadTokenAndHostNames(t *testing.T) {
	t.Parallel()
	for _, cfg := range []dashboard.Config{{}, {ReadToken: "r3ad"}, {HostNames: []string{"dash.example"}}} {
		_, done := serveOn(t, "0.0.0.0:0", cfg)
		<-done.done
		if err := done.err; !errors.Is(err, dashboard.ErrExposed) {
			t.Errorf("Serve beyond loopback with %+v: %v, want ErrExposed", cfg, err)
		}
	}

	base, _ := serveOn(t, "0.0.0.0:0", dashboard.Config{ReadToken: "r3ad", HostNames: []string{"dash.example", "10.1.2.3"}})
	basic := func(user, pass string) string {
		req, _ := http.NewRequest(http.MethodGet, "/", nil)
		req.SetBasicAuth(user, pass)
		return req.Header.Get("Authorization")
	}
	for _, tc := range []struct {
		path, host, auth string
		want             int
	}{
		{"/", "dash.example", "", http.StatusUnauthorized},
		{"/api/snapshot", "dash.example", "", http.StatusUnauthorized},
		{"/api/failed", "dash.example:8081", "", http.StatusUnauthorized},
		{"/api/snapshot", "dash.example", "Bearer wrong", http.StatusUnauthorized},
		{"/api/snapshot", "dash.example", basic("x", "wrong"), http.StatusUnauthorized},
		{"/api/snapshot", "dash.example", "Bearer r3ad", http.StatusOK},
		{"/api/snapshot", "DASH.example.:8081", basic("anyone", "r3ad"), http.StatusOK},
		{"/", "10.1.2.3:8081", "Bearer r3ad", http.StatusOK},
		{"/api/snapshot", "evil.example", "Bearer r3ad", http.StatusMisdirectedRequest},
		{"/api/snapshot", "127.0.0.1", "Bearer r3ad", http.StatusMisdirectedRequest}, // not a name it was given
		{"/api/snapshot", "evil.example", "", http.StatusMisdirectedRequest},
	} {
		resp, body := request(t, base+tc.path, tc.host, tc.auth)
		if resp.StatusCode != tc.want {
			t.Errorf("GET %s Host %s auth %q: %s, want %d", tc.path, tc.host, tc.auth, resp.Status, tc.want)
		}
		if m := securityHeaders(resp); len(m) > 0 {
			t.Errorf("GET %s Host %s: %s without %v", tc.path, tc.host, resp.Status, m)
		}
		if tc.want != http.StatusOK && (strings.Contains(body, "evil") || strings.Contains(body, "waiting for the first status")) {
			t.Errorf("GET %s Host %s: refusal %q echoes the Host or shows data", tc.path, tc.host, body)
		}
		if tc.want == http.StatusUnauthorized && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic ") {
			t.Errorf("GET %s: 401 without a basic challenge: %v", tc.path, resp.Header)
		}
	}

	// With actions on and no read token, the action token guards reads too.
	abase, _ := serveOn(t, "0.0.0.0:0", dashboard.Config{AllowActions: true, Token: "act", HostNames: []string{"dash.example"}})
	if resp, _ := request(t, abase+"/api/config", "dash.example", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("read without the action token: %s", resp.Status)
	}
	if resp, _ := request(t, abase+"/api/config", "dash.example", "Bearer act"); resp.StatusCode != http.StatusOK {
		t.Errorf("read with the action token: %s", resp.Status)
	}
}

// TestLoopbackRefusesOtherHosts: on loopback the dashboard answers only for loopback names, with
// the security headers and without echoing the Host it refuses.
func TestLoopbackRefusesOtherHosts(t *testing.T) {
	t.Parallel()
	base, _ := serveOn(t, "127.0.0.1:0", dashboard.Config{})
	for host, want := range map[string]int{"evil.example:80": http.StatusMisdirectedRequest, "\x1b[2Jevil": http.StatusMisdirectedRequest, "localhost:1": http.StatusOK, "[::1]:9": http.StatusOK} {
		resp, body := request(t, base+"/api/config", host, "")
		if resp.StatusCode != want {
			t.Errorf("Host %q: %s, want %d", host, resp.Status, want)
		}
		if m := securityHeaders(resp); len(m) > 0 {
			t.Errorf("Host %q: %s without %v", host, resp.Status, m)
		}
		if want != http.StatusOK && strings.Contains(body, "evil") {
			t.Errorf("Host %q: refusal %q echoes the Host", host, body)
		}
	}
}
