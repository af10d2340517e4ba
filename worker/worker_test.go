package worker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/weavejobs/weave/integration/jstest"
	"github.com/weavejobs/weave/internal/config"
	"github.com/weavejobs/weave/internal/testwait"
	"github.com/weavejobs/weave/internal/topology"
	"github.com/weavejobs/weave/internal/wire"
	"github.com/weavejobs/weave/worker"
)

type ctxKey struct{}

// One batch of several jobs: the handler sees each job as released, every job gets an ok report
// with its result on the worker's report subject, and the batch is acked afterwards.
func TestRunReportsResults(t *testing.T) {
	t.Parallel()
	f := setup(t)
	rr := f.reports()

	var mu sync.Mutex
	seen := map[uint64]worker.Job{}
	h := worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
		if ctx.Value(ctxKey{}) != "run value" {
			return nil, errors.New("handler context lost Run's values")
		}
		if _, ok := ctx.Deadline(); ok {
			return nil, errors.New("deadline without a timeout")
		}
		mu.Lock()
		seen[j.ID] = *j
		mu.Unlock()
		if len(j.Payload) == 0 {
			return nil, nil
		}
		return bytes.ToUpper(j.Payload), nil
	})
	cfg := worker.Config{ID: "w-results", Concurrency: 4}
	nc := jstest.NewConn(t, f.srv.ClientURL())
	w, err := worker.New(nc, cfg, h)
	must(t, err)
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "run value"))
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()

	jobs := []wire.WorkJob{
		job(1, "alpha"),
		{ID: 2, Attempt: 3, Group: "other group", Key: "", Payload: nil},
		job(3, "gamma"),
	}
	f.publish(w.Pool(), jobs...)

	m := rr.nextMsg()
	if m.worker != "w-results" || m.subject != f.names.ReportSubject("any", "w-results") {
		t.Errorf("report batch from %q on %q, want w-results on %q", m.worker, m.subject, f.names.ReportSubject("any", "w-results"))
	}
	rr.buf = m.reports
	got := rr.collect(3)
	want := map[uint64]string{1: "ALPHA", 2: "", 3: "GAMMA"}
	for id, data := range want {
		r := got[id]
		if r.Status != wire.StatusOK || string(r.Data) != data {
			t.Errorf("job %d: %v %q, want ok %q", id, r.Status, r.Data, data)
		}
	}
	if got[2].Attempt != 3 || got[1].Attempt != 1 {
		t.Errorf("attempts %d, %d; want 3, 1", got[2].Attempt, got[1].Attempt)
	}
	mu.Lock()
	if j := seen[2]; j.Group != "other group" || j.Attempt != 3 || j.Key != "" || j.Timeout != 0 {
		t.Errorf("handler saw %+v", j)
	}
	if j := seen[1]; j.Group != "g" || j.Key != "k1" || string(j.Payload) != "alpha" || j.Attempt != 1 {
		t.Errorf("handler saw %+v", j)
	}
	mu.Unlock()

	f.waitWorkEmpty()
	cancel()
	if err := recv(t, "Run", done); err != nil {
		t.Fatalf("Run: %v", err)
	}
	st := w.Stats()
	if st.JobsRun != 3 || st.JobsOK != 3 || st.Batches != 1 || st.ReportBatches < 1 {
		t.Errorf("stats %+v", st)
	}
	if st.Wakeups != 3 || st.SpuriousWakeups != 0 {
		t.Errorf("wakeups %d spurious %d, want 3 and 0", st.Wakeups, st.SpuriousWakeups)
	}
}

// More jobs than slots, in batches of more jobs than slots: never more than Concurrency handlers
// run at once, the extra jobs wait in the worker's queue, and the worker does not pull while
// jobs are queued.
func TestConcurrencyBound(t *testing.T) {
	t.Parallel()
	f := setup(t)
	rr := f.reports()

	const slots, batches, perBatch = 3, 5, 4
	var cur, peak atomic.Int64
	g := make(gate)
	w := f.start(worker.Config{Concurrency: slots}, worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
		n := cur.Add(1)
		defer cur.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		<-g
		return nil, nil
	})).w

	id := uint64(0)
	for range batches {
		f.publish(w.Pool(), jobsFrom(&id, perBatch)...)
	}
	testwait.For(t, waitTimeout, "all slots busy and jobs queued", func() bool {
		st := w.Stats()
		return cur.Load() == slots && st.Busy == slots && st.Queued > 0
	})
	if st := w.Stats(); st.Pulls != 1 || st.Sleeping != 0 {
		t.Errorf("pulls %d sleeping %d with every slot busy, want 1 and 0", st.Pulls, st.Sleeping)
	}
	g.open()
	got := rr.collect(batches * perBatch)
	for id, r := range got {
		if r.Status != wire.StatusOK {
			t.Errorf("job %d: %v", id, r.Status)
		}
	}
	if p := peak.Load(); p != slots {
		t.Errorf("peak concurrency %d, want %d", p, slots)
	}
	f.waitWorkEmpty()
	st := w.Stats()
	if st.SpuriousWakeups != 0 || st.Wakeups > st.JobsRun {
		t.Errorf("wakeups %d spurious %d for %d jobs", st.Wakeups, st.SpuriousWakeups, st.JobsRun)
	}
}

// One batch with more jobs than slots: the two sleeping slots are woken once each; every other
// job is taken by a slot that just finished one, without a wakeup.
func TestBatchLargerThanSlots(t *testing.T) {
	t.Parallel()
	f := setup(t)
	rr := f.reports()
	var cur, peak atomic.Int64
	r := f.start(worker.Config{Concurrency: 2}, worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
		n := cur.Add(1)
		defer cur.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		return j.Payload, nil
	}))
	var jobs []wire.WorkJob
	for id := uint64(1); id <= 10; id++ {
		jobs = append(jobs, job(id, fmt.Sprint("result ", id)))
	}
	f.publish(r.w.Pool(), jobs...)
	got := rr.collect(10)
	for id := uint64(1); id <= 10; id++ {
		if r := got[id]; r.Status != wire.StatusOK || string(r.Data) != fmt.Sprint("result ", id) {
			t.Errorf("job %d: %v %q", id, r.Status, r.Data)
		}
	}
	f.waitWorkEmpty()
	st := r.w.Stats()
	if st.JobsRun != 10 || st.Wakeups != 2 || st.SpuriousWakeups != 0 {
		t.Errorf("jobs %d wakeups %d spurious %d, want 10, 2, 0", st.JobsRun, st.Wakeups, st.SpuriousWakeups)
	}
	if peak.Load() > 2 {
		t.Errorf("peak concurrency %d > 2", peak.Load())
	}
	must(t, r.stop())
}

// A panic fails the attempt with the panic value in the error text, and the slot goes on to
// the next job. So does runtime.Goexit.
func TestPanicAndGoexit(t *testing.T) {
	t.Parallel()
	f := setup(t)
	rr := f.reports()
	r := f.start(worker.Config{Concurrency: 1}, worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
		switch string(j.Payload) {
		case "panic":
			panic("boom")
		case "goexit":
			runtime.Goexit()
		}
		return []byte("fine"), nil
	}))
	f.publish(r.w.Pool(), job(1, "panic"), job(2, "ok"), job(3, "goexit"), job(4, "ok"))
	got := rr.collect(4)
	if r := got[1]; r.Status != wire.StatusError || string(r.Data) != "panic: boom" {
		t.Errorf("panic: %v %q", r.Status, r.Data)
	}
	if r := got[3]; r.Status != wire.StatusError || !strings.Contains(string(r.Data), "runtime.Goexit") {
		t.Errorf("goexit: %v %q", r.Status, r.Data)
	}
	for _, id := range []uint64{2, 4} {
		if r := got[id]; r.Status != wire.StatusOK || string(r.Data) != "fine" {
			t.Errorf("job %d after a failure: %v %q", id, r.Status, r.Data)
		}
	}
	st := r.w.Stats()
	if st.Panics != 1 || st.JobsFailed != 2 || st.JobsOK != 2 {
		t.Errorf("stats %+v", st)
	}
	must(t, r.stop())
}

// Handler errors map to report statuses: plain errors are retryable, Permanent is permanent
// (also wrapped), RetryAfter carries its delay, and results and error texts respect
// MaxResultSize.
func TestErrorMapping(t *testing.T) {
	t.Parallel()
	const maxResult = 64
	cases := []struct {
		payload string
		result  []byte
		err     error
		status  wire.Status
		data    string // prefix of the report's data
		retry   time.Duration
	}{
		{payload: "plain", err: errors.New("plain failure"), status: wire.StatusError, data: "plain failure"},
		{payload: "permanent", err: worker.Permanent(errors.New("bad input")), status: wire.StatusPermanent, data: "bad input"},
		{payload: "wrapped-permanent", err: fmt.Errorf("step 2: %w", worker.Permanent(io.ErrUnexpectedEOF)),
			status: wire.StatusPermanent, data: "step 2: unexpected EOF"},
		{payload: "permanent-nil", err: worker.Permanent(nil), status: wire.StatusPermanent, data: "permanent failure"},
		{payload: "retry", err: worker.RetryAfter(1500*time.Millisecond, errors.New("busy")), status: wire.StatusError,
			data: "busy", retry: 1500 * time.Millisecond},
		{payload: "retry-sub-ms", err: worker.RetryAfter(100*time.Microsecond, errors.New("soon")), status: wire.StatusError,
			data: "soon", retry: time.Millisecond},
		{payload: "retry-negative", err: worker.RetryAfter(-time.Second, errors.New("policy")), status: wire.StatusError, data: "policy"},
		{payload: "max-result", result: bytes.Repeat([]byte("r"), maxResult), status: wire.StatusOK, data: strings.Repeat("r", maxResult)},
		{payload: "too-large", result: bytes.Repeat([]byte("r"), maxResult+1), status: wire.StatusPermanent,
			data: "result of 65 bytes exceeds MaxResultSize (64 bytes)"},
		{payload: "long-error", err: errors.New(strings.Repeat("e", 1000)), status: wire.StatusError, data: "eeee"},
	}
	f := setup(t)
	rr := f.reports()
	r := f.start(worker.Config{Concurrency: 3, MaxResultSize: maxResult},
		worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
			c := cases[j.ID-1]
			return c.result, c.err
		}))
	var jobs []wire.WorkJob
	for i, c := range cases {
		jobs = append(jobs, job(uint64(i+1), c.payload))
	}
	f.publish(r.w.Pool(), jobs...)
	got := rr.collect(len(cases))
	for i, c := range cases {
		rep := got[uint64(i+1)]
		if rep.Status != c.status || !strings.HasPrefix(string(rep.Data), c.data) || rep.RetryAfter != c.retry {
			t.Errorf("%s: got %v %q retry %v; want %v %q retry %v", c.payload, rep.Status, rep.Data, rep.RetryAfter, c.status, c.data, c.retry)
		}
		if len(rep.Data) > maxResult {
			t.Errorf("%s: %d bytes of data > MaxResultSize", c.payload, len(rep.Data))
		}
	}
	must(t, r.stop())
}

// An attempt that runs past its deadline fails with "timeout after X"; the handler's context
// carries the deadline (the job's timeout, else DefaultTimeout). End to end only: when the
// deadline and the report come, exactly, is TestAttemptDeadline's (synctest).
func TestTimeout(t *testing.T) {
	t.Parallel()
	f := setup(t)
	rr := f.reports()
	r := f.start(worker.Config{Concurrency: 2, DefaultTimeout: 150 * time.Millisecond, TimeoutGrace: 10 * time.Second},
		worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
			if _, ok := ctx.Deadline(); !ok {
				return nil, errors.New("no deadline")
			}
			<-ctx.Done()
			return nil, ctx.Err()
		}))
	own := job(1, "own timeout")
	own.Timeout = 100 * time.Millisecond
	f.publish(r.w.Pool(), own, job(2, "default timeout"))
	got := rr.collect(2)
	for id, timeout := range map[uint64]time.Duration{1: 100 * time.Millisecond, 2: 150 * time.Millisecond} {
		rep := got[id]
		want := fmt.Sprintf("timeout after %v: context deadline exceeded", timeout)
		if rep.Status != wire.StatusError || string(rep.Data) != want {
			t.Errorf("job %d: %v %q, want error %q", id, rep.Status, rep.Data, want)
		}
		if rep.Duration < timeout {
			t.Errorf("job %d: duration %v < timeout %v", id, rep.Duration, timeout)
		}
	}
	st := r.w.Stats()
	if st.Timeouts != 2 || st.Abandoned != 0 || st.JobsFailed != 2 {
		t.Errorf("stats %+v", st)
	}
	must(t, r.stop())
}

// A handler that ignores its deadline is reported TimeoutGrace after it without being waited
// for; it keeps its slot (no more than Concurrency handlers ever run) until it returns, and its
// late outcome is discarded.
func TestTimeoutAbandonsStuckHandler(t *testing.T) {
	t.Parallel()
	f := setup(t)
	rr := f.reports()
	release := make(gate)
	var calls atomic.Int64
	r := f.start(worker.Config{Concurrency: 1, TimeoutGrace: 50 * time.Millisecond},
		worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
			calls.Add(1)
			if j.ID == 1 {
				<-release // ignores ctx
				return []byte("too late"), nil
			}
			return []byte("ok"), nil
		}))
	stuck := job(1, "stuck")
	stuck.Timeout = 50 * time.Millisecond
	f.publish(r.w.Pool(), stuck, job(2, "next"))

	rep := rr.next()
	if rep.ID != 1 || rep.Status != wire.StatusError || !strings.HasPrefix(string(rep.Data), "timeout after 50ms: the handler ignored its context") {
		t.Fatalf("first report %+v %q", rep, rep.Data)
	}
	// The report can reach the test before the shepherd publishes its gauges (Stuck): wait for
	// them (under -race in CI the test once read Stuck 0 here).
	var st worker.Stats
	testwait.For(t, waitTimeout, "the abandoned handler counted stuck", func() bool {
		st = r.w.Stats()
		return st.Stuck == 1
	})
	if st.Abandoned != 1 || st.Timeouts != 1 || st.Busy != 1 || calls.Load() != 1 {
		t.Errorf("while stuck: stats %+v, calls %d", st, calls.Load())
	}
	release.open()
	rep = rr.next()
	if rep.ID != 2 || rep.Status != wire.StatusOK {
		t.Fatalf("second report %+v, want job 2 ok (no second report for job 1)", rep)
	}
	testwait.For(t, waitTimeout, "slot back in use", func() bool { return r.w.Stats().Stuck == 0 })
	f.waitWorkEmpty()
	must(t, r.stop())
}

// Reports are batched up to MaxReportBatch per message; a report left lingering is flushed by
// the drain. The work batch is acked only once the last of its reports is persisted.
func TestReportBatching(t *testing.T) {
	t.Parallel()
	f := setup(t)
	rr := f.reports()
	// A minute of linger: if any report waited for it, the test would time out.
	r := f.start(worker.Config{Concurrency: 9, MaxReportBatch: 4, ReportLinger: time.Minute},
		worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) { return nil, nil }))
	var jobs []wire.WorkJob
	for id := uint64(1); id <= 9; id++ {
		jobs = append(jobs, job(id, "x"))
	}
	f.publish(r.w.Pool(), jobs...)
	seen, msgs := 0, 0
	for seen < 9 {
		m := rr.nextMsg()
		if len(m.reports) > 4 {
			t.Fatalf("report message with %d reports, above MaxReportBatch 4", len(m.reports))
		}
		seen += len(m.reports)
		msgs++
	}
	if seen != 9 || msgs >= 9 {
		t.Errorf("%d reports in %d messages: want 9 reports gathered into fewer messages", seen, msgs)
	}
	f.waitWorkEmpty() // every batch acked once its reports were stored
	must(t, r.stop())
	if st := r.w.Stats(); st.ReportBatches != uint64(msgs) {
		t.Errorf("%d report messages counted, %d received", st.ReportBatches, msgs)
	}
}

// Malformed batches (not a batch, no jobs) are terminated and counted; good batches still run.
func TestMalformedBatch(t *testing.T) {
	t.Parallel()
	f := setup(t)
	rr := f.reports()
	r := f.start(worker.Config{Concurrency: 2}, worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
		return j.Payload, nil
	}))
	f.publishRaw(r.w.Pool(), []byte("not a work batch"))
	f.publishRaw(r.w.Pool(), wire.AppendWork(nil, nil))
	f.publish(r.w.Pool(), job(7, "good"))
	if rep := rr.next(); rep.ID != 7 || rep.Status != wire.StatusOK || string(rep.Data) != "good" {
		t.Errorf("report %+v", rep)
	}
	testwait.For(t, waitTimeout, "2 malformed batches", func() bool { return r.w.Stats().MalformedBatches == 2 })
	f.waitWorkEmpty() // terminated batches are removed from the work queue
	// Each is recorded, with its reason, in the REJECTED stream.
	testwait.For(t, waitTimeout, "2 rejection records", func() bool {
		s, err := f.js.Stream(context.Background(), f.names.RejectedStream())
		if err != nil {
			return false
		}
		info, err := s.Info(context.Background())
		return err == nil && info.State.Msgs == 2
	})
	if st := r.w.Stats(); st.Batches != 3 || st.JobsRun != 1 {
		t.Errorf("stats %+v", st)
	}
	must(t, r.stop())
}

// Heartbeats carry the pool, resources, busy and sleeping slots and the draining flag; the last
// one says the worker stopped. Their schedule is TestHeartbeatLoopSchedule's.
func TestHeartbeats(t *testing.T) {
	t.Parallel()
	f := setup(t)
	hbs := f.heartbeats()
	g := make(gate)
	started := make(chan struct{}, 1)
	cfg := worker.Config{ID: "w-hb", Concurrency: 3, HeartbeatInterval: 20 * time.Millisecond, Resources: []string{"shard-7", "db"}}
	r := f.start(cfg, worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
		started <- struct{}{}
		<-g
		return nil, nil
	}))
	hb := waitHeartbeat(t, hbs, "idle", func(hb wire.Heartbeat) bool { return hb.Worker == "w-hb" })
	if hb.Pool != r.w.Pool() || hb.Pool != wire.PoolKey([]string{"db", "shard-7"}) ||
		strings.Join(hb.Resources, ",") != "db,shard-7" || hb.Concurrency != 3 || hb.IntervalMS != 100 {
		t.Errorf("heartbeat %+v; want an idle one, saying the next comes in 100ms (5 × HeartbeatInterval)", hb)
	}
	if hb.Busy != 0 || hb.Sleeping != 3 || hb.Draining || hb.Stopped {
		t.Errorf("idle heartbeat %+v", hb)
	}
	f.publish(r.w.Pool(), job(1, "x"))
	recv(t, "handler start", started)
	hb = waitHeartbeat(t, hbs, "busy 1 sleeping 2", func(hb wire.Heartbeat) bool { return hb.Busy == 1 && hb.Sleeping == 2 })
	if hb.IntervalMS != 20 {
		t.Errorf("busy heartbeat %+v; want the next in 20ms", hb)
	}
	r.cancel()
	hb = waitHeartbeat(t, hbs, "draining", func(hb wire.Heartbeat) bool { return hb.Draining })
	if hb.Busy != 1 || hb.Stopped {
		t.Errorf("draining heartbeat %+v", hb)
	}
	g.open()
	must(t, r.wait())
	hb = waitHeartbeat(t, hbs, "stopped", func(hb wire.Heartbeat) bool { return hb.Stopped })
	if hb.Busy != 0 || hb.Sleeping != 3 || !hb.Draining {
		t.Errorf("last heartbeat %+v", hb)
	}
}

// Graceful drain: the running job finishes within DrainTimeout with its context intact and is
// reported ok; jobs not started are returned at once (status released on the wire); the batch
// is acked; Run returns nil.
func TestGracefulDrain(t *testing.T) {
	t.Parallel()
	f := setup(t)
	rr := f.reports()
	g := make(gate)
	started := make(chan struct{}, 1)
	ctxErr := make(chan error, 1)
	r := f.start(worker.Config{Concurrency: 1}, worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
		started <- struct{}{}
		<-g
		ctxErr <- ctx.Err()
		return []byte("finished"), nil
	}))
	second := job(2, "b")
	second.Attempt = 4
	f.publish(r.w.Pool(), job(1, "a"), second, job(3, "c"))
	recv(t, "handler start", started)
	r.cancel()

	returned := rr.collect(2)
	for _, id := range []uint64{2, 3} {
		if rep := returned[id]; rep.Status != wire.StatusReturned {
			t.Errorf("job %d: %v, want returned (wire status \"released\")", id, rep.Status)
		}
	}
	if returned[2].Attempt != 4 {
		t.Errorf("returned attempt %d, want 4", returned[2].Attempt)
	}
	select {
	case err := <-r.done:
		t.Fatalf("Run returned %v with a job running", err)
	default:
	}
	g.open()
	if rep := rr.next(); rep.ID != 1 || rep.Status != wire.StatusOK || string(rep.Data) != "finished" {
		t.Errorf("running job: %+v", rep)
	}
	if err := recv(t, "handler ctx", ctxErr); err != nil {
		t.Errorf("handler context canceled during the drain: %v", err)
	}
	must(t, r.wait())
	f.waitWorkEmpty() // acks are fire and forget: the server applies them a moment later
	if st := r.w.Stats(); st.Returned != 2 || st.JobsRun != 1 || st.JobsOK != 1 || !st.Draining {
		t.Errorf("stats %+v", st)
	}
}

// After DrainTimeout the running jobs' contexts are canceled; their attempts are reported failed
// and Run returns nil.
func TestDrainTimeoutCancelsJobs(t *testing.T) {
	t.Parallel()
	f := setup(t)
	rr := f.reports()
	started := make(chan struct{}, 2)
	r := f.start(worker.Config{Concurrency: 2, DrainTimeout: 50 * time.Millisecond},
		worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
			started <- struct{}{}
			<-ctx.Done()
			return nil, ctx.Err()
		}))
	f.publish(r.w.Pool(), job(1, "a"), job(2, "b"))
	recv(t, "handler start", started)
	recv(t, "handler start", started)
	must(t, r.stop()) // when, exactly, is TestDrainSchedule's (synctest)
	got := rr.collect(2)
	for id, rep := range got {
		if rep.Status != wire.StatusError || string(rep.Data) != "canceled at worker shutdown: context canceled" {
			t.Errorf("job %d: %v %q", id, rep.Status, rep.Data)
		}
	}
	f.waitWorkEmpty()
}

// A handler that ignores cancellation at shutdown is reported TimeoutGrace later and left
// behind: Run does not wait for it.
func TestShutdownAbandonsStuckHandler(t *testing.T) {
	t.Parallel()
	f := setup(t)
	rr := f.reports()
	release := make(gate)
	defer release.open()
	started := make(chan struct{}, 1)
	r := f.start(worker.Config{Concurrency: 1, DrainTimeout: 20 * time.Millisecond, TimeoutGrace: 30 * time.Millisecond},
		worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
			started <- struct{}{}
			<-release
			return nil, nil
		}))
	f.publish(r.w.Pool(), job(1, "a"))
	recv(t, "handler start", started)
	must(t, r.stop())
	rep := rr.next()
	if rep.Status != wire.StatusError || !strings.HasPrefix(string(rep.Data), "canceled at worker shutdown: the handler had not returned") {
		t.Errorf("report %v %q", rep.Status, rep.Data)
	}
	if st := r.w.Stats(); st.Stuck != 1 || st.Abandoned != 1 {
		t.Errorf("stats %+v", st)
	}
	f.waitWorkEmpty()
}

// A work batch is acked only after its reports are persisted: while the EVENTS stream is
// missing, the worker retries its report and the batch stays leased; once the stream is back,
// the report lands and the batch is acked.
func TestAckOnlyAfterReportsPersisted(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ran := make(chan struct{}, 1)
	r := f.start(worker.Config{Concurrency: 1}, worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
		ran <- struct{}{}
		return []byte("kept"), nil
	}))
	testwait.For(t, waitTimeout, "the pool's consumer", func() bool {
		_, err := f.js.Consumer(f.ctx(), f.names.WorkStream(), f.names.WorkConsumer(r.w.Pool()))
		return err == nil
	})
	must(t, f.js.DeleteStream(f.ctx(), f.names.EventsStream()))

	f.publish(r.w.Pool(), job(1, "a"))
	recv(t, "handler run", ran)
	testwait.For(t, waitTimeout, "a report retry", func() bool { return r.w.Stats().ReportRetries >= 1 })
	cons, err := f.js.Consumer(f.ctx(), f.names.WorkStream(), f.names.WorkConsumer(r.w.Pool()))
	must(t, err)
	info, err := cons.Info(f.ctx())
	must(t, err)
	if info.NumAckPending != 1 || f.workMsgs() != 1 {
		t.Fatalf("batch acked before its report was persisted: ack pending %d, work msgs %d", info.NumAckPending, f.workMsgs())
	}

	_, err = topology.Init(f.ctx(), f.js, f.names, streams)
	must(t, err)
	rr := f.reports()
	if rep := rr.next(); rep.ID != 1 || rep.Status != wire.StatusOK || string(rep.Data) != "kept" {
		t.Errorf("report %+v", rep)
	}
	f.waitWorkEmpty()
	must(t, r.stop())
}

// A job running longer than the lease keeps its batch: the worker extends the lease with
// InProgress while the job runs, so the batch is not redelivered, and acks it after the report.
// End to end against the server; the exact schedule of extensions is TestLeaseKeeperSchedule's.
func TestLongJobKeepsLease(t *testing.T) {
	t.Parallel()
	f := setup(t)
	rr := f.reports()
	// Watch the acks the worker sends for the pool's consumer.
	acks := make(chan *nats.Msg, 1024)
	sub, err := f.nc.ChanSubscribe("$JS.ACK."+f.names.WorkStream()+".>", acks)
	must(t, err)
	defer sub.Unsubscribe()
	must(t, f.nc.Flush())

	const lease = 2 * time.Second // margin for a loaded machine: extensions come every Lease/3 to Lease/2
	g := make(gate)
	started := make(chan struct{}, 4)
	var calls atomic.Int64
	r := f.start(worker.Config{Concurrency: 2, Lease: lease},
		worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
			calls.Add(1)
			started <- struct{}{}
			<-g
			return nil, nil
		}))
	f.publish(r.w.Pool(), job(1, "long"))
	recv(t, "handler start", started)
	begin := time.Now()
	// Three lease extensions span over a lease. A free slot keeps a pull open, so a batch whose
	// lease ran out would come straight back to this worker.
	var gaps []time.Duration
	last := begin
	for len(gaps) < 3 {
		m := recv(t, "InProgress", acks)
		if string(m.Data) != "+WPI" {
			t.Fatalf("ack %q while the job runs", m.Data)
		}
		gaps = append(gaps, time.Since(last))
		last = time.Now()
	}
	t.Logf("lease (%v) extended after %v", lease, gaps)
	cons, err := f.js.Consumer(f.ctx(), f.names.WorkStream(), f.names.WorkConsumer(r.w.Pool()))
	must(t, err)
	info, err := cons.Info(f.ctx())
	must(t, err)
	if info.NumRedelivered != 0 || info.Delivered.Consumer != 1 || calls.Load() != 1 || r.w.Stats().Batches != 1 {
		t.Errorf("after %v: redelivered %d, delivered %d, handler calls %d, batches %d; want 0, 1, 1, 1",
			time.Since(begin), info.NumRedelivered, info.Delivered.Consumer, calls.Load(), r.w.Stats().Batches)
	}
	g.open()
	if rep := rr.next(); rep.ID != 1 || rep.Status != wire.StatusOK {
		t.Errorf("report %+v", rep)
	}
	if m := recv(t, "ack", acks); string(m.Data) != "+ACK" {
		t.Errorf("ack %q after the report, want +ACK", m.Data)
	}
	f.waitWorkEmpty()
	must(t, r.stop())
}

// An idle worker sends few pull requests (long polls), yet picks up new work at once.
func TestIdleWorkerPullsRarely(t *testing.T) {
	t.Parallel()
	f := setup(t)
	rr := f.reports()
	hbs := f.heartbeats()
	r := f.start(worker.Config{Concurrency: 8, HeartbeatInterval: 50 * time.Millisecond},
		worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) { return nil, nil }))
	begin := time.Now()
	for range 20 { // about a second, counted in heartbeats
		recv(t, "heartbeat", hbs)
	}
	idle := time.Since(begin)
	st := r.w.Stats()
	if limit := 1 + uint64(2*idle.Seconds()); st.Pulls > limit || st.Pulls == 0 {
		t.Errorf("%d pulls in %v idle, want 1..%d", st.Pulls, idle, limit)
	}
	if st.JobsRun != 0 || st.Wakeups != 0 || st.SpuriousWakeups != 0 || st.Sleeping != 8 {
		t.Errorf("idle stats %+v", st)
	}
	t.Logf("idle for %v: %d pull requests", idle.Round(time.Millisecond), st.Pulls)

	sent := time.Now()
	f.publish(r.w.Pool(), job(1, "wake up"))
	if rep := rr.next(); rep.ID != 1 || rep.Status != wire.StatusOK {
		t.Errorf("report %+v", rep)
	}
	if lat := time.Since(sent); lat > 5*time.Second { // a pull expires after 30s
		t.Errorf("an idle worker took %v to run a job", lat)
	}
	must(t, r.stop())
}

// A pool's consumer holds the pulls of thousands of workers (the server's default holds 512);
// a worker starts on a consumer an earlier release created with the default, which the server
// cannot change, and runs its jobs.
func TestConsumerHoldsAFleetsPulls(t *testing.T) {
	t.Parallel()
	f := setup(t)
	rr := f.reports()
	r := f.start(worker.Config{Concurrency: 2}, worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
		return j.Payload, nil
	}))
	testwait.For(t, waitTimeout, "a pull", func() bool { return r.w.Stats().Pulls >= 1 })
	cons, err := f.js.Consumer(f.ctx(), f.names.WorkStream(), f.names.WorkConsumer(r.w.Pool()))
	must(t, err)
	if got := cons.CachedInfo().Config.MaxWaiting; got != topology.MaxWaitingPulls {
		t.Fatalf("a new pool consumer holds %d waiting pulls, want %d", got, topology.MaxWaitingPulls)
	}
	must(t, r.stop())

	old := topology.WorkConsumer(f.names, wire.PoolKey([]string{"old"}), topology.DefaultLease)
	old.MaxWaiting = 0 // the server's default
	_, err = f.js.CreateConsumer(f.ctx(), f.names.WorkStream(), old)
	must(t, err)
	r = f.start(worker.Config{Concurrency: 2, Resources: []string{"old"}}, worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
		return j.Payload, nil
	}))
	f.publish(r.w.Pool(), job(1, "on the old consumer"))
	if rep := rr.next(); rep.ID != 1 || rep.Status != wire.StatusOK {
		t.Errorf("report %+v", rep)
	}
	must(t, r.stop())
}

// If the pool's consumer is deleted under a running worker, the worker re-creates it and goes
// on pulling.
func TestConsumerRecreated(t *testing.T) {
	t.Parallel()
	f := setup(t)
	rr := f.reports()
	r := f.start(worker.Config{Concurrency: 2}, worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
		return j.Payload, nil
	}))
	testwait.For(t, waitTimeout, "a pull", func() bool { return r.w.Stats().Pulls >= 1 })
	must(t, f.js.DeleteConsumer(f.ctx(), f.names.WorkStream(), f.names.WorkConsumer(r.w.Pool())))
	testwait.For(t, waitTimeout, "the consumer re-created", func() bool {
		_, err := f.js.Consumer(f.ctx(), f.names.WorkStream(), f.names.WorkConsumer(r.w.Pool()))
		return err == nil
	})
	f.publish(r.w.Pool(), job(1, "after"))
	if rep := rr.next(); rep.ID != 1 || rep.Status != wire.StatusOK {
		t.Errorf("report %+v", rep)
	}
	must(t, r.stop())
}

// After a server restart the worker renews its pull requests at once (the server forgot them)
// and runs new work without waiting for a missed heartbeat.
func TestServerRestart(t *testing.T) {
	t.Parallel()
	f := setupWith(t, config.StreamOptions{}) // file storage: streams and consumer survive the restart
	rr := f.reports()
	r := f.start(worker.Config{Concurrency: 2}, worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
		return j.Payload, nil
	}))
	f.publish(r.w.Pool(), job(1, "before"))
	if rep := rr.next(); rep.ID != 1 || rep.Status != wire.StatusOK {
		t.Fatalf("report %+v", rep)
	}
	pulls := r.w.Stats().Pulls
	must(t, f.srv.Restart(t.Context()))
	testwait.For(t, waitTimeout, "pulls renewed", func() bool { return r.w.Stats().Pulls > pulls })
	testwait.For(t, waitTimeout, "the test connection back", f.nc.IsConnected)
	// The streams may still be loading: publish until stored, deduplicated by message ID.
	data := wire.AppendWork(nil, []wire.WorkJob{job(2, "after")})
	testwait.For(t, waitTimeout, "a publish after the restart", func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_, err := f.js.Publish(ctx, f.names.WorkSubject(r.w.Pool()), data, jetstream.WithMsgID("job-2"))
		return err == nil
	})
	sent := time.Now()
	if rep := rr.next(); rep.ID != 2 || rep.Status != wire.StatusOK || string(rep.Data) != "after" {
		t.Errorf("report %+v", rep)
	}
	if lat := time.Since(sent); lat > 10*time.Second { // not the 30s of an expired pull
		t.Errorf("first job after the restart took %v", lat)
	}
	must(t, r.stop())
}

// Closing the worker's connection ends Run with an error wrapping nats.ErrConnectionClosed.
func TestConnectionClosed(t *testing.T) {
	t.Parallel()
	f := setup(t)
	r := f.start(worker.Config{Concurrency: 1}, worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) { return nil, nil }))
	testwait.For(t, waitTimeout, "a pull", func() bool { return r.w.Stats().Pulls >= 1 })
	r.nc.Close()
	if err := r.wait(); !errors.Is(err, nats.ErrConnectionClosed) {
		t.Errorf("Run: %v, want ErrConnectionClosed", err)
	}
}

func TestNewValidation(t *testing.T) {
	t.Parallel()
	f := setup(t)
	h := worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) { return nil, nil })
	cases := map[string]worker.Config{
		"namespace":        {Namespace: "a.b"},
		"ID":               {ID: "has space"},
		"resource":         {Resources: []string{"a,b"}},
		"concurrency":      {Concurrency: -1},
		"huge concurrency": {Concurrency: worker.MaxConcurrency + 1},
		"lease":            {Lease: time.Millisecond},
		"negative drain":   {DrainTimeout: -time.Second},
		"negative timeout": {DefaultTimeout: -time.Second},
		"timeout too long": {DefaultTimeout: wire.MaxTimeout + time.Hour},
		"heartbeat":        {HeartbeatInterval: 2 * time.Hour},
		"idle heartbeat":   {HeartbeatInterval: time.Second, IdleHeartbeatInterval: time.Millisecond},
		"report batch":     {MaxReportBatch: worker.MaxReportBatchLimit + 1},
		"negative result":  {MaxResultSize: -1},
		"result > payload": {MaxResultSize: 64 << 20},
		"negative linger":  {ReportLinger: -time.Millisecond},
		"negative wait":    {NamespaceWait: -time.Second},
	}
	for name, cfg := range cases {
		if _, err := worker.New(f.nc, cfg, h); !errors.Is(err, worker.ErrInvalidConfig) {
			t.Errorf("%s: New returned %v, want ErrInvalidConfig", name, err)
		}
		// Validate, without a connection, says the same, except for the server's max payload.
		if err := cfg.Validate(); name != "result > payload" && !errors.Is(err, worker.ErrInvalidConfig) {
			t.Errorf("%s: Validate returned %v, want ErrInvalidConfig", name, err)
		}
	}
	if err := (worker.Config{}).Validate(); err != nil {
		t.Errorf("Validate of the zero Config: %v", err)
	}
	if _, err := worker.New(f.nc, worker.Config{}, nil); !errors.Is(err, worker.ErrInvalidConfig) {
		t.Errorf("nil handler: %v", err)
	}
	if _, err := worker.New(f.nc, worker.Config{}, worker.HandlerFunc(nil)); !errors.Is(err, worker.ErrInvalidConfig) {
		t.Errorf("nil HandlerFunc: %v", err)
	}
	if _, err := worker.New(nil, worker.Config{}, h); !errors.Is(err, worker.ErrInvalidConfig) {
		t.Errorf("nil conn: %v", err)
	}

	w, err := worker.New(f.nc, worker.Config{}, h)
	must(t, err)
	if !strings.HasPrefix(w.ID(), "w-") || wire.ValidateWorkerID(w.ID()) != nil || w.Pool() != "any" {
		t.Errorf("defaults: ID %q pool %q", w.ID(), w.Pool())
	}
	if st := w.Stats(); st.Sleeping != runtime.GOMAXPROCS(0) || st.Busy != 0 {
		t.Errorf("default concurrency: %+v", st)
	}
}

func TestRunTwice(t *testing.T) {
	t.Parallel()
	f := setup(t)
	r := f.start(worker.Config{Concurrency: 1}, worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) { return nil, nil }))
	testwait.For(t, waitTimeout, "the first Run pulling", func() bool { return r.w.Stats().Pulls >= 1 })
	if err := r.w.Run(t.Context()); !errors.Is(err, worker.ErrAlreadyStarted) {
		t.Errorf("second Run: %v", err)
	}
	must(t, r.stop())
}

func TestPermanentAndRetryAfterWrap(t *testing.T) {
	t.Parallel()
	base := io.ErrUnexpectedEOF
	for _, err := range []error{worker.Permanent(base), worker.RetryAfter(time.Second, base)} {
		if !errors.Is(err, base) || err.Error() != base.Error() {
			t.Errorf("%T: Is %v, text %q", err, errors.Is(err, base), err.Error())
		}
	}
	var pe *jetstream.APIError
	if errors.As(worker.Permanent(base), &pe) {
		t.Error("Permanent matched an unrelated type")
	}
}

// A batch delivered again after its lease ran out was held by a worker that died or stalled:
// its jobs are reported lost (a failed attempt, for the coordinator to retry), not run again,
// and the batch is acked once the reports are stored.
func TestRedeliveredBatchReportedLost(t *testing.T) {
	t.Parallel()
	f := setup(t)
	rr := f.reports()
	const lease = 300 * time.Millisecond
	pool := wire.PoolKey(nil)
	cons, err := f.js.CreateOrUpdateConsumer(f.ctx(), f.names.WorkStream(), topology.WorkConsumer(f.names, pool, lease))
	must(t, err)
	f.publish(pool, job(1, "a"), job(2, "b"))
	// A worker that takes the batch and dies: it never acks.
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	must(t, err)
	n := 0
	for range batch.Messages() {
		n++
	}
	if n != 1 {
		t.Fatalf("the dead worker fetched %d batches, want 1", n)
	}

	var ran atomic.Int64
	r := f.start(worker.Config{Concurrency: 2, Lease: lease}, worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
		ran.Add(1)
		return nil, nil
	}))
	got := rr.collect(2)
	for id := uint64(1); id <= 2; id++ {
		rep := got[id]
		if rep.Status != wire.StatusLapsed || rep.Attempt != 1 || !strings.Contains(string(rep.Data), "delivery 2") {
			t.Errorf("job %d: %+v, want lost on delivery 2, attempt 1", id, rep)
		}
	}
	f.waitWorkEmpty()
	must(t, r.stop())
	if st := r.w.Stats(); ran.Load() != 0 || st.Lost != 2 || st.JobsRun != 0 {
		t.Errorf("%d handler calls, stats %+v; want none run and 2 lost", ran.Load(), st)
	}
}

// A worker does not create the namespace's streams: on a namespace nobody initialised (a typo, say)
// Run fails at once with an error naming the namespace and what to do, and creates no stream.
func TestRunOnUninitialisedNamespace(t *testing.T) {
	t.Parallel()
	f := setup(t)
	nc := jstest.NewConn(t, f.srv.ClientURL())
	w, err := worker.New(nc, worker.Config{Namespace: "acme"}, worker.HandlerFunc(func(context.Context, *worker.Job) ([]byte, error) {
		return nil, nil
	}))
	must(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	err = w.Run(ctx)
	if !errors.Is(err, worker.ErrNamespaceNotFound) {
		t.Fatalf("Run returned %v, want ErrNamespaceNotFound", err)
	}
	if want := `namespace "acme" is not initialised (stream acme_WORK not found): run 'weave init --namespace acme'`; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not say %q", err, want)
	}
	names := f.js.StreamNames(f.ctx())
	for name := range names.Name() {
		if strings.HasPrefix(name, "acme") {
			t.Errorf("stream %s created", name)
		}
	}
	must(t, names.Err())
}

// TestRunWaitsForNamespace: with NamespaceWait, a worker started before its namespace exists
// (beside a coordinator that is starting too) waits for the streams, says so once, and runs once
// they appear; without them it gives up with ErrNamespaceNotFound when the wait is over.
func TestRunWaitsForNamespace(t *testing.T) {
	t.Parallel()
	f := setup(t)
	logs := make(chan string, 256)
	logger := zerolog.New(zerolog.ConsoleWriter{Out: lineWriter(logs), NoColor: true})
	nc := jstest.NewConn(t, f.srv.ClientURL())
	w, err := worker.New(nc, worker.Config{Namespace: "late", NamespaceWait: time.Minute, Logger: logger},
		worker.HandlerFunc(func(context.Context, *worker.Job) ([]byte, error) { return nil, nil }))
	must(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	for line := recv(t, "a log line", logs); !strings.Contains(line, "waiting for the namespace's streams"); line = recv(t, "a log line", logs) {
	}
	names, err := wire.NewNames("late")
	must(t, err)
	_, err = topology.Init(f.ctx(), f.js, names, streams)
	must(t, err)
	// Running: its consumer made (the consumer's existence alone is not it: the worker may not
	// have had the server's answer yet), its goroutines started.
	for line := recv(t, "a log line", logs); !strings.Contains(line, "worker: running"); line = recv(t, "a log line", logs) {
	}
	if _, err := f.js.Consumer(f.ctx(), names.WorkStream(), names.WorkConsumer(w.Pool())); err != nil {
		t.Fatalf("the worker's consumer on the namespace created late: %v", err)
	}
	cancel()
	if err := recv(t, "Run's end", done); err != nil {
		t.Fatalf("Run: %v", err)
	}

	// Never created: the wait ends with the error.
	nc2 := jstest.NewConn(t, f.srv.ClientURL())
	w2, err := worker.New(nc2, worker.Config{Namespace: "never", NamespaceWait: 300 * time.Millisecond},
		worker.HandlerFunc(func(context.Context, *worker.Job) ([]byte, error) { return nil, nil }))
	must(t, err)
	start := time.Now()
	if err := w2.Run(t.Context()); !errors.Is(err, worker.ErrNamespaceNotFound) || time.Since(start) < 300*time.Millisecond {
		t.Fatalf("Run on a namespace never created: %v after %v, want ErrNamespaceNotFound after the wait", err, time.Since(start))
	}
}

// lineWriter sends each write (a log line) to ch, dropping it if ch is full.
type lineWriter chan<- string

func (w lineWriter) Write(p []byte) (int, error) {
	select {
	case w <- string(p):
	default:
	}
	return len(p), nil
}

// TestLapsedLeaseDropsQueuedJobs: a worker that finds its batch's lease lapsed since it last
// extended it (as after a SIGSTOP longer than the lease; here its clock jumps instead) does
// not start the batch's queued jobs: the server redelivers the batch, and whoever receives it
// (this worker, here) reports them lost. Before, the woken worker ran them too.
func TestLapsedLeaseDropsQueuedJobs(t *testing.T) {
	t.Parallel()
	f := setup(t)
	rr := f.reports()
	const lease = time.Second
	var skew atomic.Int64 // added to the worker's clock
	clock := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	started := make(chan uint64, 8)
	hold := make(gate)
	r := f.start(worker.WithClock(worker.Config{Concurrency: 1, Lease: lease}, clock),
		worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
			started <- j.ID
			if j.ID == 1 {
				<-hold
			}
			return []byte("ran"), nil
		}))
	f.publish(r.w.Pool(), job(1, "a"), job(2, "b")) // one slot: job 2 waits in the queue
	if id := recv(t, "handler start", started); id != 1 {
		t.Fatalf("job %d started first", id)
	}
	skew.Store(int64(2 * lease)) // the process "wakes up" two leases later
	hold.open()
	for {
		rep := rr.next()
		if rep.ID != 2 {
			continue
		}
		if rep.Status != wire.StatusLapsed {
			t.Fatalf("job 2 reported %v, want lost: it ran after its batch's lease lapsed", rep.Status)
		}
		break
	}
	select {
	case id := <-started:
		t.Fatalf("job %d started after its batch's lease lapsed", id)
	default:
	}
	if st := r.w.Stats(); st.Dropped != 1 {
		t.Errorf("Stats.Dropped = %d, want 1", st.Dropped)
	}
}

// TestCutOffWorkerLetsItsBatchGo: a worker cut off from the server for longer than its lease
// (its connection silently passes nothing, as in a partition or while its node dies) cannot know
// that the server kept its batch: its lease extensions wait in a buffer, unconfirmed. The server
// redelivers the batch to another worker, which reports its jobs lost, so the cut-off worker
// must not start the batch's queued job when its running one returns. Before, an extension
// counted once sent, and the cut-off worker ran that job after the other had reported it lost
// (the chaos test's "no stale attempt run" caught it when a node's loss cut a worker off).
func TestCutOffWorkerLetsItsBatchGo(t *testing.T) {
	t.Parallel()
	f := setup(t)
	rr := f.reports()
	proxy, err := jstest.StartProxy(f.srv.ClientURL())
	must(t, err)
	t.Cleanup(proxy.Close)
	const lease = time.Second
	started := make(chan string, 8)
	hold := make(gate)
	handler := func(name string) worker.Handler {
		return worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
			started <- fmt.Sprintf("job %d on %s", j.ID, name)
			if name == "cut" && j.ID == 1 {
				<-hold
			}
			return nil, nil
		})
	}
	cut := f.startVia(proxy.URL(), worker.Config{ID: "cut", Concurrency: 1, Lease: lease}, handler("cut"))
	f.publish(cut.w.Pool(), job(1, "a"), job(2, "b")) // one slot: job 2 waits in the queue
	if s := recv(t, "handler start", started); s != "job 1 on cut" {
		t.Fatalf("%s started first, want job 1 on cut", s)
	}
	proxy.Freeze()
	defer proxy.Thaw()
	f.start(worker.Config{ID: "other", Concurrency: 4, Lease: lease}, handler("other"))
	// A lease after the last extension the server had, it redelivers the batch: the other worker
	// gets it and reports both jobs lost.
	got := rr.collect(2)
	for id := uint64(1); id <= 2; id++ {
		if got[id].Status != wire.StatusLapsed {
			t.Fatalf("job %d reported %v, want lost (its batch redelivered)", id, got[id].Status)
		}
	}
	hold.open() // job 1 returns on the cut-off worker: job 2 is next in its queue
	testwait.For(t, waitTimeout, "the cut-off worker to drop job 2", func() bool { return cut.w.Stats().Dropped == 1 || len(started) > 0 })
	select {
	case s := <-started:
		t.Fatalf("%s started after the server had redelivered its batch and its job was reported lost", s)
	default:
	}
}

// TestReportsOfABatchTravelTogether: the jobs of one work batch that end together report in one
// message (the first report, which would go at once, waits for the others), and a report waits
// for a sibling still running no longer than the sibling wait. The linger and the sibling wait
// are long here, so that the jobs' spread under any load stays well within them.
func TestReportsOfABatchTravelTogether(t *testing.T) {
	t.Parallel()
	const wait = time.Second
	f := setup(t)
	rr := f.reports()
	var (
		started  atomic.Int32
		allIn    = make(gate)
		slowHold = make(gate)
	)
	h := worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
		switch string(j.Payload) {
		case "slow":
			<-slowHold
		case "together":
			if started.Add(1) == 4 {
				allIn.open()
			}
			<-allIn // the four end together
		}
		return nil, nil
	})
	f.start(worker.WithSiblingWait(worker.Config{Concurrency: 4, ReportLinger: wait}, wait), h)
	f.publish("any", job(1, "together"), job(2, "together"), job(3, "together"), job(4, "together"))
	if m := rr.nextMsg(); len(m.reports) != 4 {
		t.Fatalf("a batch of four jobs ending together reported %d of them in its first message, want 4", len(m.reports))
	}

	// A fresh worker (its own pool), so that its first report would go at once: it waits for
	// the sibling wait, then goes without the job still running.
	f.start(worker.WithSiblingWait(worker.Config{Concurrency: 4, ReportLinger: wait, Resources: []string{"r"}}, wait), h)
	start := time.Now()
	f.publish(wire.PoolKey([]string{"r"}), job(5, ""), job(6, "slow"))
	m := rr.nextMsg()
	if len(m.reports) != 1 || m.reports[0].ID != 5 {
		t.Fatalf("first report message of a batch with a running job: %+v, want job 5 alone", m.reports)
	}
	if waited := time.Since(start); waited < wait {
		t.Fatalf("job 5's report came %v after its batch was published, before the sibling wait (%v) ran out", waited, wait)
	}
	slowHold.open()
	if m := rr.nextMsg(); len(m.reports) != 1 || m.reports[0].ID != 6 {
		t.Fatalf("the slow job's report: %+v, want job 6", m.reports)
	}
}

// TestAcksGoWithPulls: a worker that gets its batches one at a time sends each batch's ack as
// a later pull request (+NXT) rather than as a message of its own; every batch is acked all
// the same, once, none redelivered.
func TestAcksGoWithPulls(t *testing.T) {
	t.Parallel()
	f := setup(t)
	rr := f.reports()
	const slots, batches = 4, 30
	w := f.start(worker.Config{Concurrency: slots}, worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
		return nil, nil
	})).w
	id := uint64(0)
	for range batches {
		f.publish(w.Pool(), jobsFrom(&id, slots)...)
		rr.collect(slots) // one batch at a time: the next comes once this one reported
	}
	f.waitWorkEmpty()
	st := w.Stats()
	if st.AcksWithPulls == 0 || st.AcksWithPulls > st.Pulls || st.Batches != batches || st.Lost != 0 {
		t.Fatalf("%d acks sent with %d pulls for %d batches received (want some), %d lost", st.AcksWithPulls, st.Pulls, st.Batches, st.Lost)
	}
}
