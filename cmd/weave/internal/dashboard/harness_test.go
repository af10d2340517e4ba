package dashboard_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/weavejobs/weave/cmd/weave/internal/dashboard"
	"github.com/weavejobs/weave/cmd/weave/internal/inproc"
	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/internal/auth"
	"github.com/weavejobs/weave/internal/wire"
	"github.com/weavejobs/weave/worker"
)

const ns = "dash"

// env is a namespace on an embedded nats-server whose users are an admin (the coordinator, the
// workers and the test's own producer), and an observer and a producer with exactly the
// permissions weave auth gives those roles; a coordinator; two workers; and groups published by
// the test. The handler fails every attempt of a job whose payload is "fail", and holds each job
// of group gated until the test lets it go (Release). It is also a hostile worker: a job whose
// payload is "hostile" fails with hostileText, one whose payload is "huge" with hugeText (1 MiB),
// and one whose payload is "hostile-result" returns hostileText as its result.
type env struct {
	t    testing.TB
	url  string
	dep  *inproc.Deployment
	d    *dispatcher.Dispatcher // the admin's
	gate chan struct{}          // one value lets one job of gated end
}

// hostileText is what a hostile worker writes: terminal escape sequences (colour, window title,
// a hyperlink, clear screen), C1 controls, a bidi override and zero-width characters.
const hostileText = "\x1b[31mRED\x1b[0m \x1b]0;PWNED-TITLE\x07 \x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\ \x1b[2J\x1b[H" +
	" \u0085\u009b31m invoice\u202efdp.exe\u202c zw\u200b\u200d\ufeffend \xff"

// hugeText is a 1 MiB error of escape sequences.
var hugeText = strings.Repeat("\x1b[2J", 1<<20/4)

// gated is the group whose jobs end one at a time, when the test says so.
const gated = "site-slow"

// users are the NATS users of the env's server.
var users = []auth.User{
	{Role: auth.Observer, Name: "observer"},
	{Role: auth.Producer, Name: "producer"},
}

func newEnv(t *testing.T) *env { return newEnvSlots(t, 2) }

// newEnvSlots is newEnv with the given slots per worker.
func newEnvSlots(t testing.TB, slots int) *env {
	t.Helper()
	names, err := wire.NewNames(ns)
	if err != nil {
		t.Fatal(err)
	}
	// A max payload above 1 MiB, so that a worker may store 1 MiB errors.
	o := &server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true, MaxPayload: 4 << 20}
	o.Users = append(o.Users, &server.User{Username: "admin", Password: "admin"})
	for _, u := range users {
		p, err := auth.For(names, u)
		if err != nil {
			t.Fatal(err)
		}
		sp := &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: p.Publish},
			Subscribe: &server.SubjectPermission{Allow: p.Subscribe},
		}
		if p.AllowResponses {
			sp.Response = &server.ResponsePermission{MaxMsgs: 1, Expires: time.Minute}
		}
		o.Users = append(o.Users, &server.User{Username: u.Name, Password: u.Name, Permissions: sp})
	}
	srv, err := server.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	if !srv.ReadyForConnections(30 * time.Second) {
		t.Fatal("server not ready")
	}
	e := &env{t: t, url: srv.ClientURL(), gate: make(chan struct{})}
	e.dep, err = inproc.New(t.Context(), inproc.Options{
		Namespace: ns,
		Name:      "dashboard-test",
		Dial: func(_ context.Context, name string) (*nats.Conn, error) {
			return nats.Connect(e.url, nats.UserInfo("admin", "admin"), nats.Name(name))
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		close(e.gate) // lets every held job end, so that the workers stop
		if err := e.dep.Close(); err != nil {
			t.Error(err)
		}
	})
	// Retries at once: the failing job's attempts take milliseconds, not seconds.
	if err := e.dep.Coordinator(coordinator.Config{RetryBase: time.Millisecond, RetryMax: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	handler := func(ctx context.Context, j *worker.Job) ([]byte, error) {
		switch {
		case string(j.Payload) == "hostile":
			return nil, errors.New(hostileText)
		case string(j.Payload) == "huge":
			return nil, errors.New(hugeText)
		case string(j.Payload) == "hostile-result":
			return []byte(hostileText), nil
		case string(j.Payload) == "fail":
			return nil, fmt.Errorf("fetch %s: 503 Service Unavailable (attempt %d)", j.Key, j.Attempt)
		case strings.HasPrefix(string(j.Payload), "work:"): // work:<ms>, for the screenshots
			ms, _ := strconv.Atoi(strings.TrimPrefix(string(j.Payload), "work:"))
			select {
			case <-time.After(time.Duration(ms) * time.Millisecond):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		case j.Group == gated:
			select {
			case <-e.gate:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return []byte("fetched " + j.Key), nil
	}
	for _, w := range []worker.Config{
		{ID: "worker-eu", Resources: []string{"eu"}, Concurrency: slots, MaxResultSize: 2 << 20},
		{ID: "worker-any", Concurrency: slots, MaxResultSize: 2 << 20},
	} {
		if _, _, err := e.dep.Worker(w, handler); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.dep.WaitStatus(inproc.FleetReady(2, 2*slots)); err != nil {
		t.Fatal(err)
	}
	if e.d, err = e.dep.Dispatcher(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.d.Close)
	return e
}

// publish publishes a group of jobs with keys page-0… and the given payloads, and returns its
// Handle. Jobs of groups site-eu… require resource eu, of site-gpu… resource gpu (which no
// worker holds), and the gated group's prefer eu.
func (e *env) publish(group string, payloads ...string) *dispatcher.Handle {
	e.t.Helper()
	h, err := e.d.Publish(e.t.Context(), group, slices.Values(jobsOf(group, payloads)))
	if err != nil {
		e.t.Fatal(err)
	}
	return h
}

// jobsOf returns the jobs publish publishes.
func jobsOf(group string, payloads []string) []dispatcher.Job {
	var jobs []dispatcher.Job
	for i, p := range payloads {
		j := dispatcher.Job{Key: fmt.Sprintf("page-%d", i), Payload: []byte(p), MaxAttempts: 3}
		switch {
		case strings.HasPrefix(group, "site-eu"):
			j.Require = []string{"eu"}
		case strings.HasPrefix(group, "site-gpu"):
			j.Require = []string{"gpu"}
		case group == gated:
			j.Prefer = []string{"eu"}
		}
		jobs = append(jobs, j)
	}
	return jobs
}

// standardGroups publishes the groups the tests use: two that end done, one with a job that
// fails every attempt (site-bad, key page-1), one whose job waits for a worker holding gpu, and
// the gated group with n jobs, its first ones started and held. It waits for the first three to end and returns the failed job's outcome.
func (e *env) standardGroups(n int) dispatcher.JobOutcome {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.t.Context(), 30*time.Second)
	defer cancel()
	var hs []*dispatcher.Handle
	hs = append(hs, e.publish("site-eu-news", "ok", "ok", "ok", "ok", "ok"))
	hs = append(hs, e.publish("site-blog", "ok", "ok", "ok"))
	hs = append(hs, e.publish("site-bad", "ok", "fail", "ok"))
	for _, h := range hs {
		if _, err := h.WaitSummary(ctx); err != nil {
			e.t.Fatal(err)
		}
	}
	payloads := make([]string, n)
	for i := range payloads {
		payloads[i] = "ok"
	}
	e.publish(gated, payloads...)
	e.publish("site-gpu-render", "ok")
	out, err := e.d.Attach("site-bad").WaitKey(ctx, "page-1")
	if err != nil {
		e.t.Fatal(err)
	}
	if out.State != dispatcher.StateFailed || len(out.History) != 3 {
		e.t.Fatalf("site-bad page-1: %+v, want failed after 3 attempts", out)
	}
	return out
}

// release lets one held job of the gated group end.
func (e *env) release() {
	e.t.Helper()
	select {
	case e.gate <- struct{}{}:
	case <-time.After(30 * time.Second):
		e.t.Fatal("no job of the gated group waits at the gate")
	}
}

// dashboardAs runs a dashboard with the given user's credentials and returns its URL, its
// server, and the permission errors its connection met.
func (e *env) dashboardAs(user string, cfg dashboard.Config) (string, *dashboard.Server, *asyncErrors) {
	e.t.Helper()
	errs := &asyncErrors{}
	nc, err := nats.Connect(e.url, nats.UserInfo(user, user), nats.CustomInboxPrefix(auth.InboxPrefix(user)),
		nats.ErrorHandler(errs.handler), nats.Name("dashboard "+user))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(nc.Close)
	d, err := dispatcher.New(nc, dispatcher.Config{Namespace: ns})
	if err != nil {
		e.t.Fatal(err)
	}
	b, err := dashboard.NewBackend(nc, ns, d)
	if err != nil {
		e.t.Fatal(err)
	}
	cfg.Backend, cfg.Namespace = b, ns
	cfg.Interval = 250 * time.Millisecond // the test waits less; the page reads the same
	if testing.Verbose() {
		cfg.Log = zerolog.New(zerolog.NewTestWriter(e.t))
	}
	srv, err := dashboard.New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	e.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			e.t.Errorf("dashboard: %v", err)
		}
		d.Close()
	})
	return "http://" + ln.Addr().String() + "/", srv, errs
}

// handlerOnly returns an httptest server for a dashboard whose poller the test does not run.
func handlerOnly(t *testing.T, srv *dashboard.Server) *httptest.Server {
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return ts
}

// asyncErrors records the asynchronous errors of a connection (permission violations).
type asyncErrors struct {
	mu   sync.Mutex
	errs []error
}

func (a *asyncErrors) handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.errs = append(a.errs, err)
}

func (a *asyncErrors) check(t *testing.T) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := errors.Join(a.errs...); err != nil {
		t.Errorf("the dashboard's connection met errors: %v", err)
	}
}

// heldKey returns the key of a job of the gated group that has not ended. Until the test
// releases another, such a job cannot end.
func (e *env) heldKey() string {
	e.t.Helper()
	for i := range 6 {
		key := fmt.Sprintf("page-%d", i)
		info, err := e.d.JobByKey(e.t.Context(), gated, key)
		if err != nil {
			e.t.Fatalf("look up %s %s: %v", gated, key, err)
		}
		if info.State == dispatcher.StateRunning || info.State == dispatcher.StatePending {
			return key
		}
	}
	e.t.Fatalf("every job of %s has ended", gated)
	return ""
}
