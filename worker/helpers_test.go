package worker_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/integration/jstest"
	"github.com/weavejobs/weave/internal/config"
	"github.com/weavejobs/weave/internal/leakcheck"
	"github.com/weavejobs/weave/internal/testwait"
	"github.com/weavejobs/weave/internal/topology"
	"github.com/weavejobs/weave/internal/wire"
	"github.com/weavejobs/weave/worker"
)

func TestMain(m *testing.M) {
	leakcheck.Main(m)
}

// waitTimeout bounds every wait for a condition.
const waitTimeout = 15 * time.Second

// streams keeps test streams in memory.
var streams = config.StreamOptions{MemoryStorage: true}

// fixture is one test's JetStream server and a connection that plays the coordinator: it
// publishes work batches and reads report batches.
type fixture struct {
	t     testing.TB
	srv   *jstest.Server
	nc    *nats.Conn
	js    jetstream.JetStream
	names wire.Names
}

// connOpts reconnect fast, for tests that restart the server.
var connOpts = []nats.Option{nats.ReconnectWait(20 * time.Millisecond), nats.MaxReconnects(-1)}

func setup(t testing.TB) *fixture { return setupWith(t, streams) }

// setupWith starts a server and creates the streams with opts, as the coordinator would: a
// worker only checks that they exist.
func setupWith(t testing.TB, opts config.StreamOptions) *fixture {
	t.Helper()
	srv := jstest.New(t)
	nc := jstest.NewConn(t, srv.ClientURL(), connOpts...)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	names, err := wire.NewNames("")
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, srv: srv, nc: nc, js: js, names: names}
	if _, err := topology.Init(f.ctx(), js, names, opts); err != nil {
		t.Fatal(err)
	}
	return f
}

// ctx returns a context for one JetStream call.
func (f *fixture) ctx() context.Context {
	ctx, cancel := context.WithTimeout(f.t.Context(), 5*time.Second)
	f.t.Cleanup(cancel)
	return ctx
}

// running is a worker whose Run is in progress.
type running struct {
	t      testing.TB
	w      *worker.Worker
	nc     *nats.Conn // the worker's connection
	cancel context.CancelFunc
	done   chan error // receives Run's result
}

// start runs a worker on its own connection until the test ends or stop is called.
func (f *fixture) start(cfg worker.Config, h worker.Handler) *running {
	f.t.Helper()
	return f.startVia(f.srv.ClientURL(), cfg, h)
}

// startVia is start with the worker's connection to url (a jstest.Proxy in front of the server).
func (f *fixture) startVia(url string, cfg worker.Config, h worker.Handler) *running {
	f.t.Helper()
	nc := jstest.NewConn(f.t, url, connOpts...)
	w, err := worker.New(nc, cfg, h)
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{t: f.t, w: w, nc: nc, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- w.Run(ctx) }()
	f.t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(waitTimeout):
			f.t.Error("Run did not return")
		}
	})
	return r
}

// stop cancels Run's context and returns Run's result.
func (r *running) stop() error {
	r.t.Helper()
	r.cancel()
	return r.wait()
}

// wait returns Run's result.
func (r *running) wait() error {
	r.t.Helper()
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup
		return err
	case <-time.After(waitTimeout):
		r.t.Fatal("Run did not return")
		return nil
	}
}

// job returns a first attempt of job id with a payload.
func job(id uint64, payload string) wire.WorkJob {
	return wire.WorkJob{ID: id, Attempt: 1, Group: "g", Key: "k" + strconv.FormatUint(id, 10), Payload: []byte(payload)}
}

// jobsFrom returns n first attempts numbered from *next on, and moves *next past them.
func jobsFrom(next *uint64, n int) []wire.WorkJob {
	jobs := make([]wire.WorkJob, 0, n)
	for range n {
		*next++
		jobs = append(jobs, job(*next, "x"))
	}
	return jobs
}

// publish releases one work batch to a pool, as the coordinator does.
func (f *fixture) publish(pool string, jobs ...wire.WorkJob) {
	f.t.Helper()
	f.publishRaw(pool, wire.AppendWork(nil, jobs))
}

func (f *fixture) publishRaw(pool string, data []byte) {
	f.t.Helper()
	if _, err := f.js.Publish(f.ctx(), f.names.WorkSubject(pool), data); err != nil {
		f.t.Fatal(err)
	}
}

// workMsgs returns the number of messages in the WORK stream: acked batches are removed.
func (f *fixture) workMsgs() uint64 {
	f.t.Helper()
	s, err := f.js.Stream(f.ctx(), f.names.WorkStream())
	if err != nil {
		f.t.Fatal(err)
	}
	info, err := s.Info(f.ctx())
	if err != nil {
		f.t.Fatal(err)
	}
	return info.State.Msgs
}

// waitWorkEmpty waits until every work batch has been acked (or terminated).
func (f *fixture) waitWorkEmpty() {
	f.t.Helper()
	testwait.For(f.t, waitTimeout, "WORK stream empty", func() bool { return f.workMsgs() == 0 })
}

// recv receives from ch, failing the test after waitTimeout.
func recv[T any](t testing.TB, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitTimeout):
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}

// reportMsg is one report batch as read from the EVENTS stream.
type reportMsg struct {
	subject string
	worker  string
	reports []wire.Report
}

// reportReader follows the worker reports in the EVENTS stream with an ordered consumer.
type reportReader struct {
	t    testing.TB
	msgs chan reportMsg
	buf  []wire.Report // reports received but not yet returned by next
}

func (f *fixture) reports() *reportReader {
	f.t.Helper()
	cons, err := f.js.OrderedConsumer(f.ctx(), f.names.EventsStream(), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{f.names.AllReports()},
	})
	if err != nil {
		f.t.Fatal(err)
	}
	rr := &reportReader{t: f.t, msgs: make(chan reportMsg, 4096)}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		w, reps, err := wire.DecodeReports(m.Data())
		if err != nil {
			f.t.Errorf("report batch on %s: %v", m.Subject(), err)
			return
		}
		rr.msgs <- reportMsg{subject: m.Subject(), worker: w, reports: reps}
	})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(cc.Stop)
	return rr
}

// nextMsg returns the next report batch.
func (rr *reportReader) nextMsg() reportMsg {
	rr.t.Helper()
	return recv(rr.t, "a report batch", rr.msgs)
}

// next returns the next report, in stream order.
func (rr *reportReader) next() wire.Report {
	rr.t.Helper()
	for len(rr.buf) == 0 {
		rr.buf = rr.nextMsg().reports
	}
	r := rr.buf[0]
	rr.buf = rr.buf[1:]
	return r
}

// collect returns the next n reports by job ID, failing on a second report for a job.
func (rr *reportReader) collect(n int) map[uint64]wire.Report {
	rr.t.Helper()
	got := make(map[uint64]wire.Report, n)
	for range n {
		r := rr.next()
		if prev, ok := got[r.ID]; ok {
			rr.t.Fatalf("two reports for job %d: %+v and %+v", r.ID, prev, r)
		}
		got[r.ID] = r
	}
	return got
}

// heartbeats subscribes to every worker's heartbeats.
func (f *fixture) heartbeats() <-chan wire.Heartbeat {
	f.t.Helper()
	raw := make(chan *nats.Msg, 4096)
	sub, err := f.nc.ChanSubscribe(f.names.AllHeartbeats(), raw)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := f.nc.Flush(); err != nil {
		f.t.Fatal(err)
	}
	out := make(chan wire.Heartbeat, 4096)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case m := <-raw:
				hb, err := wire.ParseHeartbeat(m.Data)
				if err != nil {
					f.t.Errorf("heartbeat %s: %v", m.Data, err)
					continue
				}
				out <- hb
			case <-stop:
				return
			}
		}
	}()
	f.t.Cleanup(func() {
		sub.Unsubscribe()
		close(stop)
		<-done
	})
	return out
}

// waitHeartbeat returns the first heartbeat that satisfies cond.
func waitHeartbeat(t testing.TB, hbs <-chan wire.Heartbeat, what string, cond func(wire.Heartbeat) bool) wire.Heartbeat {
	t.Helper()
	for {
		if hb := recv(t, "heartbeat: "+what, hbs); cond(hb) {
			return hb
		}
	}
}

// gate is a handler helper: handlers block on it until the test opens it.
type gate chan struct{}

func (g gate) open() { close(g) }

// must fails the test on an error.
func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
