package integration_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"iter"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/integration/jstest"
	"github.com/weavejobs/weave/internal/leakcheck"
	"github.com/weavejobs/weave/internal/testwait"
	"github.com/weavejobs/weave/internal/topology"
	"github.com/weavejobs/weave/internal/wire"
	"github.com/weavejobs/weave/worker"
)

func TestMain(m *testing.M) {
	zerolog.TimeFieldFormat = time.RFC3339Nano // the logs' times show milliseconds
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild())
	}
	leakcheck.Main(m)
}

// env is one test's isolated Weave deployment: its own namespace on a shared or own server.
type env struct {
	t   *testing.T
	srv *jstest.Server
	nc  *nats.Conn
	ns  string
	d   *dispatcher.Dispatcher
	ctx context.Context
}

// setup starts an embedded JetStream server and a namespace for one test, initialised as an
// operator does with 'weave init' before starting workers and producers (they do not create
// streams), so components may start in any order.
func setup(t *testing.T) *env {
	t.Helper()
	srv := jstest.New(t)
	nc := jstest.NewConn(t, srv.ClientURL())
	ns := "t" + randomHex(4)
	d, err := dispatcher.New(nc, dispatcher.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	initNamespace(ctx, t, nc, ns, coordinator.StreamOptions{})
	return &env{t: t, srv: srv, nc: nc, ns: ns, d: d, ctx: ctx}
}

// jsClusterNoPeers is the server's error code for "no suitable peers for placement" (nats.go has
// no constant for it).
const jsClusterNoPeers = 10005

// initNamespace creates the namespace's streams, as 'weave init' does. A cluster that has just
// formed may not place replicated streams yet (its peers' state is still spreading), or not
// answer at all (no meta leader yet): those are waited out, within ctx, each try with its own
// deadline so that a request lost while the cluster forms does not wait for ctx's.
func initNamespace(ctx context.Context, t *testing.T, nc *nats.Conn, ns string, opts coordinator.StreamOptions) {
	t.Helper()
	err := testwait.Until(ctx, 50*time.Millisecond, func() (string, error) {
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := coordinator.InitNamespace(tctx, nc, ns, opts)
		cancel()
		var apiErr *jetstream.APIError
		if err == nil || ctx.Err() != nil || !(errors.As(err, &apiErr) && apiErr.ErrorCode == jsClusterNoPeers || topology.Transient(err)) {
			return "", err
		}
		return fmt.Sprintf("the cluster to place the streams (%v)", err), nil
	})
	if err != nil {
		t.Fatalf("init namespace %s: %v", ns, err)
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// background runs fn until the test ends, then cancels it and waits, failing on an error.
func (e *env) background(name string, fn func(ctx context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	e.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			e.t.Errorf("%s: %v", name, err)
		}
	})
}

// failureLogger is testLogger for a component that ends before the test does: without
// WEAVE_TEST_LOG it keeps its Info lines and above in t's log, which go test shows only if the
// test fails, so a failure in CI says what the component went through.
func failureLogger(t *testing.T, component string) zerolog.Logger {
	if os.Getenv("WEAVE_TEST_LOG") != "" {
		return testLogger(component)
	}
	w := zerolog.ConsoleWriter{Out: tLogWriter{t}, NoColor: true, TimeFormat: "15:04:05.000"}
	return zerolog.New(w).Level(zerolog.InfoLevel).With().Timestamp().Str("c", component).Logger()
}

// tLogWriter writes each log line to t.Log.
type tLogWriter struct{ t *testing.T }

func (w tLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// testLogger logs to stderr when WEAVE_TEST_LOG is set (debugging), else nowhere.
func testLogger(component string) zerolog.Logger {
	if os.Getenv("WEAVE_TEST_LOG") == "" {
		return zerolog.Nop()
	}
	w := zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: "15:04:05.000"}
	return zerolog.New(w).Level(zerolog.DebugLevel).With().Timestamp().Str("c", component).Logger()
}

func (e *env) coordinator(cfg coordinator.Config) {
	cfg.Namespace = e.ns
	cfg.Logger = testLogger("coordinator")
	c, err := coordinator.New(e.nc, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.background("coordinator", c.Run)
}

func (e *env) worker(cfg worker.Config, h worker.HandlerFunc) {
	cfg.Namespace = e.ns
	cfg.HeartbeatInterval = 250 * time.Millisecond
	cfg.Logger = testLogger("worker")
	w, err := worker.New(e.nc, cfg, h)
	if err != nil {
		e.t.Fatal(err)
	}
	e.background("worker", w.Run)
}

func (e *env) publish(group string, jobs iter.Seq[dispatcher.Job]) *dispatcher.Handle {
	e.t.Helper()
	h, err := e.d.Publish(e.ctx, group, jobs)
	if err != nil {
		e.t.Fatalf("publish %s: %v", group, err)
	}
	return h
}

func (e *env) wait(h *dispatcher.Handle) *dispatcher.Result {
	e.t.Helper()
	res, err := h.Wait(e.ctx)
	if err != nil {
		e.t.Fatalf("wait %s: %v", h.GroupID(), err)
	}
	return res
}

// releaseKey reads the namespace's release key, which a coordinator created, to store what only
// a coordinator can (a test standing in for one that died).
func (e *env) releaseKey() *wire.ReleaseKey {
	e.t.Helper()
	names, _ := wire.NewNames(e.ns)
	js, err := jetstream.New(e.nc)
	if err != nil {
		e.t.Fatal(err)
	}
	kv, err := js.KeyValue(e.ctx, names.KeyBucket())
	if err != nil {
		e.t.Fatalf("the release key's bucket: %v", err)
	}
	entry, err := kv.Get(e.ctx, "release")
	if err != nil || len(entry.Value()) != wire.ReleaseKeySize {
		e.t.Fatalf("the release key: %v", err)
	}
	var key wire.ReleaseKey
	copy(key[:], entry.Value())
	return &key
}

// waitWorkers waits until the coordinator knows n live workers.
func (e *env) waitWorkers(n int) {
	e.t.Helper()
	testwait.For(e.t, 30*time.Second, fmt.Sprintf("%d workers to join", n), func() bool {
		st, err := coordinator.QueryStatus(e.ctx, e.nc, e.ns)
		return err == nil && len(st.Workers) == n
	})
}

// jobs yields n jobs with keys prefix-0, prefix-1, ...
func jobs(n int, mod func(i int, j *dispatcher.Job)) iter.Seq[dispatcher.Job] {
	return func(yield func(dispatcher.Job) bool) {
		for i := range n {
			j := dispatcher.Job{Key: fmt.Sprint("k", i), Payload: []byte(fmt.Sprint(i))}
			if mod != nil {
				mod(i, &j)
			}
			if !yield(j) {
				return
			}
		}
	}
}

// jobsStream returns a handle on the namespace's JOBS stream, for tests that look at what it holds.
func (e *env) jobsStream() jetstream.Stream {
	e.t.Helper()
	names, _ := wire.NewNames(e.ns)
	return e.stream(names.JobsStream())
}

// jobsState returns the state of the namespace's JOBS stream (messages held, last sequence...).
func (e *env) jobsState() jetstream.StreamState {
	e.t.Helper()
	info, err := e.jobsStream().Info(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return info.State
}

// resultsStream returns a handle on the namespace's RESULTS stream.
func (e *env) resultsStream() jetstream.Stream {
	e.t.Helper()
	names, _ := wire.NewNames(e.ns)
	return e.stream(names.ResultsStream())
}

// stream returns a handle on the stream called name.
func (e *env) stream(name string) jetstream.Stream {
	e.t.Helper()
	js, err := jetstream.New(e.nc)
	if err != nil {
		e.t.Fatal(err)
	}
	s, err := js.Stream(e.ctx, name)
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// tracker records, from the handlers' side, which jobs of which groups run when.
type tracker struct {
	mu       sync.Mutex
	running  map[string]int
	peak     map[string]int
	runs     map[uint64]int
	workerOf map[uint64]string
	area     map[string]time.Duration // ∫ running dt per group
	last     time.Time
	started  map[string]int // jobs started per group
	onStart  func(group string, running, started map[string]int)
}

func newTracker() *tracker {
	return &tracker{started: map[string]int{}, running: map[string]int{}, peak: map[string]int{}, runs: map[uint64]int{}, workerOf: map[uint64]string{}, area: map[string]time.Duration{}}
}

func (tr *tracker) advance(now time.Time) {
	if !tr.last.IsZero() {
		dt := now.Sub(tr.last)
		for g, n := range tr.running {
			tr.area[g] += time.Duration(n) * dt
		}
	}
	tr.last = now
}

func (tr *tracker) start(who string, j *worker.Job) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.advance(time.Now())
	tr.running[j.Group]++
	tr.started[j.Group]++
	tr.peak[j.Group] = max(tr.peak[j.Group], tr.running[j.Group])
	tr.runs[j.ID]++
	tr.workerOf[j.ID] = who
	if tr.onStart != nil {
		tr.onStart(j.Group, tr.running, tr.started)
	}
}

func (tr *tracker) end(j *worker.Job) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.advance(time.Now())
	tr.running[j.Group]--
}

// handler returns a handler that tracks runs and spends d per job (simulated work).
func (tr *tracker) handler(who string, d func(j *worker.Job) time.Duration) worker.HandlerFunc {
	return func(ctx context.Context, j *worker.Job) ([]byte, error) {
		tr.start(who, j)
		defer tr.end(j)
		if d != nil {
			select {
			case <-time.After(d(j)):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return []byte("ok:" + string(j.Payload)), nil
	}
}
