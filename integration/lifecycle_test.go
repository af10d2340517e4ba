package integration_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/integration/jstest"
	"github.com/weavejobs/weave/internal/testwait"
	"github.com/weavejobs/weave/internal/wire"
	"github.com/weavejobs/weave/worker"
)

// Lifecycle tests: each proves one rule of a job's life (retries, backoff, poison jobs,
// permanent failures, timeouts, a worker killed mid-job, a submitter restarting, a worker
// draining) end to end, on a real embedded JetStream server.

// attemptLog records, from the handlers' side, when each attempt of each job started and ended.
type attemptLog struct {
	mu     sync.Mutex
	starts map[uint64][]time.Time
	ends   map[uint64][]time.Time
	seen   map[uint64][]int // j.Attempt as the handler saw it, per call
}

func newAttemptLog() *attemptLog {
	return &attemptLog{starts: map[uint64][]time.Time{}, ends: map[uint64][]time.Time{}, seen: map[uint64][]int{}}
}

// start records a handler call and returns its number for this job, 1 for the first.
func (l *attemptLog) start(j *worker.Job) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.starts[j.ID] = append(l.starts[j.ID], time.Now())
	l.seen[j.ID] = append(l.seen[j.ID], j.Attempt)
	return len(l.starts[j.ID])
}

func (l *attemptLog) end(j *worker.Job) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ends[j.ID] = append(l.ends[j.ID], time.Now())
}

func (l *attemptLog) calls(id uint64) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.starts[id])
}

// outcomeOf returns the outcome of the job with the given key.
func outcomeOf(t *testing.T, res *dispatcher.Result, key string) dispatcher.JobOutcome {
	t.Helper()
	for _, o := range res.Jobs {
		if o.Key == key {
			return o
		}
	}
	t.Fatalf("no outcome for key %q", key)
	return dispatcher.JobOutcome{}
}

// waitFor waits for a group's outcome for at most 30s, so that a lost job fails the test soon.
func (e *env) waitFor(h *dispatcher.Handle) *dispatcher.Result {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	res, err := h.Wait(ctx)
	if err != nil {
		e.t.Fatalf("wait %s: %v", h.GroupID(), err)
	}
	return res
}

func mean(ds []time.Duration) time.Duration {
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}

// TestRetryFailsTwiceThenSucceeds: a job that fails on attempts 1 and 2 and succeeds on 3 runs
// exactly 3 times and ends done with 3 attempts, and the waits between its attempts follow
// exponential backoff with full jitter: the retry after attempt n waits a random time in
// [0, RetryBase·2^(n-1)].
//
// With RetryBase 200ms across 40 such jobs: every first gap (attempt 1 start → attempt 2 start)
// is within RetryBase plus slack, every second gap within 2·RetryBase plus slack (the ceilings);
// some first gap is below 0.75·RetryBase (without jitter every first gap would be at least
// RetryBase) and the first gaps spread over at least RetryBase/4 (without jitter they would all be
// RetryBase plus the round trip); some second gap is above 1.5·RetryBase (the ceiling grew
// beyond RetryBase: P(none of 40) = 0.75^40 ≈ 1e-5) and the second gaps are longer on average
// than the first. Not parallel: it measures time.
func TestRetryFailsTwiceThenSucceeds(t *testing.T) {
	const (
		n     = 40
		base  = 200 * time.Millisecond
		slack = 250 * time.Millisecond // handler → report → coordinator → release → handler, loaded machine
	)
	e := setup(t)
	e.coordinator(coordinator.Config{RetryBase: base, RetryMax: time.Hour})
	log := newAttemptLog()
	e.worker(worker.Config{Concurrency: n + 2}, func(ctx context.Context, j *worker.Job) ([]byte, error) {
		call := log.start(j)
		defer log.end(j)
		if call < 3 {
			return nil, fmt.Errorf("transient failure on call %d", call)
		}
		return []byte("ok:" + string(j.Payload)), nil
	})
	res := e.waitFor(e.publish("flaky", jobs(n, nil)))
	if res.Summary.Done != n || len(res.Jobs) != n {
		t.Fatalf("summary %+v, %d outcomes; want %d done", res.Summary, len(res.Jobs), n)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	var gap1, gap2 []time.Duration
	for _, o := range res.Jobs {
		if o.State != dispatcher.StateDone || o.Attempts != 3 || string(o.Result) != "ok:"+strings.TrimPrefix(o.Key, "k") {
			t.Errorf("job %s: %+v, want done after 3 attempts", o.Key, o)
		}
		starts := log.starts[o.ID]
		if len(starts) != 3 {
			t.Errorf("job %s: handler called %d times, want 3", o.Key, len(starts))
			continue
		}
		if !slices.Equal(log.seen[o.ID], []int{1, 2, 3}) {
			t.Errorf("job %s: handler saw attempts %v, want [1 2 3]", o.Key, log.seen[o.ID])
		}
		gap1 = append(gap1, starts[1].Sub(starts[0]))
		gap2 = append(gap2, starts[2].Sub(starts[1]))
	}
	if t.Failed() {
		return
	}
	slices.Sort(gap1)
	slices.Sort(gap2)
	t.Logf("gap 1→2: min %v  median %v  mean %v  max %v", gap1[0], gap1[n/2], mean(gap1), gap1[n-1])
	t.Logf("gap 2→3: min %v  median %v  mean %v  max %v", gap2[0], gap2[n/2], mean(gap2), gap2[n-1])
	if gap1[n-1] > base+slack {
		t.Errorf("a first retry came %v after its attempt: more than RetryBase %v + %v", gap1[n-1], base, slack)
	}
	if gap2[n-1] > 2*base+slack {
		t.Errorf("a second retry came %v after its attempt: more than 2·RetryBase %v + %v", gap2[n-1], 2*base, slack)
	}
	if gap1[0] >= base*3/4 {
		t.Errorf("every first retry waited at least %v (shortest gap): no jitter below RetryBase %v", gap1[0], base)
	}
	if spread := gap1[n-1] - gap1[0]; spread < base/4 {
		t.Errorf("the first retries' gaps spread over only %v: not jittered", spread)
	}
	if gap2[n-1] <= base*3/2 {
		t.Errorf("every second retry came within %v (longest gap): the ceiling did not grow beyond RetryBase %v", gap2[n-1], base)
	}
	if mean(gap2) <= mean(gap1) {
		t.Errorf("second gaps average %v, first gaps %v: the backoff does not grow", mean(gap2), mean(gap1))
	}
}

// TestPoisonJobDoesNotStallHealthyJobs: a job that always fails, with MaxAttempts 3, among 1,000
// healthy jobs of its group that need the same resource and the same single worker pool: the
// healthy jobs all finish done, the poison job ends failed after exactly 3 attempts with its last
// error in the outcome, and healthy jobs keep completing while it waits for its retries.
func TestPoisonJobDoesNotStallHealthyJobs(t *testing.T) {
	t.Parallel()
	const healthy = 1000
	e := setup(t)
	e.coordinator(coordinator.Config{RetryBase: 100 * time.Millisecond, RetryMax: time.Minute})
	var (
		completed atomic.Int64 // healthy jobs whose handler returned
		mu        sync.Mutex
		poisonAt  []int64 // completed healthy jobs at each poison attempt
	)
	e.worker(worker.Config{Resources: []string{"r"}, Concurrency: 4}, func(ctx context.Context, j *worker.Job) ([]byte, error) {
		if j.Key == "poison" {
			mu.Lock()
			poisonAt = append(poisonAt, completed.Load())
			call := len(poisonAt)
			mu.Unlock()
			return nil, fmt.Errorf("poison attempt %d", call)
		}
		select {
		case <-time.After(5 * time.Millisecond): // simulated work
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		completed.Add(1)
		return nil, nil
	})
	h := e.publish("mixed", jobs(healthy+1, func(i int, j *dispatcher.Job) {
		j.Require = []string{"r"}
		if i == 0 {
			j.Key, j.MaxAttempts = "poison", 3
		}
	}))
	res := e.waitFor(h)
	if res.Summary.Done != healthy || res.Summary.Failed != 1 || len(res.Jobs) != healthy+1 {
		t.Fatalf("summary %+v, %d outcomes; want %d done and 1 failed", res.Summary, len(res.Jobs), healthy)
	}
	for _, o := range res.Jobs {
		if o.Key != "poison" && (o.State != dispatcher.StateDone || o.Attempts != 1) {
			t.Errorf("healthy job %s: %+v", o.Key, o)
		}
	}
	p := outcomeOf(t, res, "poison")
	if p.State != dispatcher.StateFailed || p.Attempts != 3 || p.Err != "poison attempt 3" {
		t.Errorf("poison job outcome %+v, want failed after 3 attempts with error %q", p, "poison attempt 3")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(poisonAt) != 3 {
		t.Fatalf("poison handler called %d times, want 3", len(poisonAt))
	}
	// Healthy completions while the poison job waited for each retry (its handler returns at once).
	during := []int64{poisonAt[1] - poisonAt[0], poisonAt[2] - poisonAt[1]}
	t.Logf("healthy jobs done at the poison attempts' starts: %v; during its retry waits: %v", poisonAt, during)
	if during[0]+during[1] == 0 {
		t.Errorf("no healthy job completed while the poison job waited for its retries")
	}
	if poisonAt[2] >= healthy {
		t.Errorf("the poison job's last attempt came after every healthy job: retries were not interleaved")
	}
}

// TestPermanentAndRetryAfter: worker.Permanent fails a job at once (1 attempt, failed, although it
// had attempts left); worker.RetryAfter(300ms) delays the next attempt by at least 300ms, where
// the coordinator's own policy (RetryBase 1ms, RetryMax 5ms) would have retried at once.
func TestPermanentAndRetryAfter(t *testing.T) {
	t.Parallel()
	const after = 300 * time.Millisecond
	e := setup(t)
	e.coordinator(coordinator.Config{MaxAttempts: 5, RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond})
	log := newAttemptLog()
	e.worker(worker.Config{Concurrency: 2}, func(ctx context.Context, j *worker.Job) ([]byte, error) {
		call := log.start(j)
		defer log.end(j)
		switch {
		case j.Key == "permanent":
			return nil, worker.Permanent(errors.New("invalid input"))
		case j.Key == "later" && call == 1:
			return nil, worker.RetryAfter(after, errors.New("rate limited"))
		}
		return []byte("ok"), nil
	})
	res := e.waitFor(e.publish("perm", jobs(2, func(i int, j *dispatcher.Job) { j.Key = []string{"permanent", "later"}[i] })))
	p := outcomeOf(t, res, "permanent")
	if p.State != dispatcher.StateFailed || p.Attempts != 1 || p.Err != "invalid input" {
		t.Errorf("permanent job: %+v, want failed after 1 attempt with error %q", p, "invalid input")
	}
	if n := log.calls(p.ID); n != 1 {
		t.Errorf("permanent job's handler called %d times, want 1", n)
	}
	l := outcomeOf(t, res, "later")
	if l.State != dispatcher.StateDone || l.Attempts != 2 {
		t.Errorf("retry-after job: %+v, want done after 2 attempts", l)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.starts[l.ID]) != 2 || len(log.ends[l.ID]) != 2 {
		t.Fatalf("retry-after job's handler called %d times, want 2", len(log.starts[l.ID]))
	}
	// The delay runs from the report, which follows the handler's return.
	wait := log.starts[l.ID][1].Sub(log.ends[l.ID][0])
	t.Logf("RetryAfter(%v): the next attempt started %v after the failed one returned", after, wait)
	if wait < after {
		t.Errorf("the next attempt started %v after the failure, before the requested %v", wait, after)
	}
	if wait > after+5*time.Second {
		t.Errorf("the next attempt started %v after the failure, far beyond the requested %v", wait, after)
	}
}

// TestTimeoutIsAFailedAttempt: a job with Timeout 100ms whose handler waits for its context sees
// the deadline; the attempt counts as failed and is retried; with MaxAttempts 2 the job ends
// failed after 2 attempts with an error that mentions the timeout.
func TestTimeoutIsAFailedAttempt(t *testing.T) {
	t.Parallel()
	const timeout = 100 * time.Millisecond
	e := setup(t)
	e.coordinator(coordinator.Config{RetryBase: 10 * time.Millisecond})
	log := newAttemptLog()
	var sawDeadline atomic.Int64
	e.worker(worker.Config{Concurrency: 2}, func(ctx context.Context, j *worker.Job) ([]byte, error) {
		log.start(j)
		defer log.end(j)
		start := time.Now()
		dl, ok := ctx.Deadline()
		<-ctx.Done()
		if ok && dl.Sub(start) <= timeout && errors.Is(ctx.Err(), context.DeadlineExceeded) && time.Since(start) >= timeout*9/10 {
			sawDeadline.Add(1)
		}
		return nil, ctx.Err()
	})
	res := e.waitFor(e.publish("slow", jobs(1, func(_ int, j *dispatcher.Job) { j.Timeout, j.MaxAttempts = timeout, 2 })))
	o := res.Jobs[0]
	if o.State != dispatcher.StateFailed || o.Attempts != 2 || !strings.Contains(o.Err, "timeout") {
		t.Errorf("outcome %+v, want failed after 2 attempts with a timeout error", o)
	}
	if n := log.calls(o.ID); n != 2 {
		t.Errorf("handler called %d times, want 2", n)
	}
	if n := sawDeadline.Load(); n != 2 {
		t.Errorf("%d of 2 attempts saw a %v deadline end their context", n, timeout)
	}
	t.Logf("outcome: %+v", o)
}

// TestWorkerKill9: a worker process killed with SIGKILL while it holds jobs loses none: with a
// 2s lease, the jobs it held go to the other worker of its pool (in this process) after the
// lease, and every job of the group ends done.
func TestWorkerKill9(t *testing.T) {
	t.Parallel()
	const n = 40
	e := setup(t)
	e.coordinator(coordinator.Config{})
	child, held := e.startChildWorker(childWorkerSlots)
	e.waitWorkers(1)
	h := e.publish("survivor", jobs(n, nil))
	testwait.For(t, 30*time.Second, "the child worker to run a job in each of its slots", func() bool {
		return len(held()) == childWorkerSlots
	})

	tr := newTracker()
	var startedAt sync.Map // job ID → time.Time of its run here
	e.worker(worker.Config{ID: "parent", Concurrency: 4, Lease: childWorkerLease}, func(ctx context.Context, j *worker.Job) ([]byte, error) {
		startedAt.LoadOrStore(j.ID, time.Now())
		return tr.handler("parent", func(*worker.Job) time.Duration { return 5 * time.Millisecond })(ctx, j)
	})
	e.waitWorkers(2)
	killedAt := time.Now()
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	res := e.waitFor(h)
	heldIDs := held()
	if res.Summary.Done != n || len(res.Jobs) != n {
		t.Fatalf("summary %+v, %d outcomes; want %d done", res.Summary, len(res.Jobs), n)
	}
	ids := map[uint64]bool{}
	wasHeld := map[uint64]bool{}
	for _, id := range heldIDs {
		wasHeld[id] = true
	}
	for _, o := range res.Jobs {
		if o.State != dispatcher.StateDone || o.ID < h.FirstID() || o.ID > h.LastID() {
			t.Errorf("job %s: %+v", o.Key, o)
		}
		ids[o.ID] = true
		// A job in a batch the killed worker had taken (running, or queued behind the running
		// ones) lost its attempt with it: that attempt counts, so a job that kills its workers
		// ends failed after MaxAttempts, and is in its history. The others ran once.
		if !lostOnce(o) || (wasHeld[o.ID] && o.Attempts != 2) {
			t.Errorf("job %s (running on the killed worker: %v): %d attempts, history %+v", o.Key, wasHeld[o.ID], o.Attempts, o.History)
		}
	}
	if len(ids) != n {
		t.Errorf("%d distinct jobs have outcomes, want %d", len(ids), n)
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for id, runs := range tr.runs {
		if runs != 1 {
			t.Errorf("job %d ran %d times on the surviving worker", id, runs)
		}
	}
	for _, id := range heldIDs {
		if tr.workerOf[id] != "parent" {
			t.Errorf("job %d, held by the killed worker, never ran on the survivor", id)
			continue
		}
		v, _ := startedAt.Load(id)
		after := v.(time.Time).Sub(killedAt)
		t.Logf("job %d, held by the killed worker, started on the survivor %v after the kill", id, after)
		// The killed worker extended its lease every Lease/3, so the redelivery comes between
		// 2/3 of the lease and the lease after the kill, and the retry at most RetryBase (1s)
		// later: not before, not much after.
		if after < childWorkerLease/2 || after > childWorkerLease+10*time.Second {
			t.Errorf("job %d was redelivered %v after the kill; the lease is %v", id, after, childWorkerLease)
		}
	}
}

// TestOrphanedPoolRescued: the only worker holding "gpu" (one slot) is killed with -9 while it
// runs a job preferring gpu and four more wait in WORK for its pool. Nobody else reads that
// pool's work subject: the coordinator takes the jobs back (the waiting ones at once, as their
// first attempt; the running one when its lease runs out, its first attempt lost) and a worker
// without gpu runs every one of them once.
func TestOrphanedPoolRescued(t *testing.T) {
	t.Parallel()
	const n, prefetch = 8, 4
	e := setup(t)
	e.coordinator(coordinator.Config{Prefetch: prefetch, RescueAfter: 500 * time.Millisecond})
	h := e.publish("orphan", jobs(n, func(_ int, j *dispatcher.Job) { j.Prefer = []string{"gpu"} }))
	testwait.For(t, 30*time.Second, "the jobs to be admitted", func() bool {
		st, err := coordinator.QueryStatus(e.ctx, e.nc, e.ns)
		return err == nil && st.Jobs["pending"] == n
	})
	// One slot: the worker pulls one batch (of one job) and runs it; the prefetched batches stay
	// in WORK, undelivered.
	child, held := e.startChildWorker(1, "gpu")
	gpu := wire.PoolKey([]string{"gpu"})
	testwait.For(t, 30*time.Second, "the gpu worker to run one job, four more released to its pool", func() bool {
		st, err := coordinator.QueryStatus(e.ctx, e.nc, e.ns)
		if err != nil || len(held()) != 1 {
			return false
		}
		for _, p := range st.Pools {
			if p.Key == gpu {
				return p.Outstanding == 1+prefetch
			}
		}
		return false
	})
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}

	tr := newTracker()
	e.worker(worker.Config{ID: "plain", Concurrency: 4}, tr.handler("plain", nil))
	res := e.waitFor(h)
	if res.Summary.Done != n || len(res.Jobs) != n {
		t.Fatalf("summary %+v, %d outcomes; want %d done", res.Summary, len(res.Jobs), n)
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	running := held()[0]
	for _, o := range res.Jobs {
		if o.State != dispatcher.StateDone || tr.runs[o.ID] != 1 || tr.workerOf[o.ID] != "plain" {
			t.Errorf("job %s: %+v, ran %d times, last on %q; want done by plain, run once", o.Key, o, tr.runs[o.ID], tr.workerOf[o.ID])
		}
		if want := 1 + btoi(o.ID == running); !lostOnce(o) || o.Attempts != want {
			t.Errorf("job %s (running on the killed worker: %v): %d attempts, history %+v; want %d", o.Key, o.ID == running, o.Attempts, o.History, want)
		}
	}
	st, err := coordinator.QueryStatus(e.ctx, e.nc, e.ns)
	if err != nil {
		t.Fatal(err)
	}
	if st.Totals.Rescued != 1+prefetch || st.Totals.LostAttempts != 1 {
		t.Errorf("status totals %+v: want %d rescued, 1 lost attempt", st.Totals, 1+prefetch)
	}
}

// lostOnce reports whether o's attempts are its run plus at most one lost with a killed worker.
func lostOnce(o dispatcher.JobOutcome) bool {
	switch len(o.History) {
	case 0:
		return o.Attempts == 1
	case 1:
		return o.Attempts == 2 && o.History[0].Worker == "" && strings.Contains(o.History[0].Err, "worker lost")
	}
	return false
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// startChildWorker runs a worker in a subprocess (this test binary, see runChild) and returns a
// function listing the IDs of the jobs its handlers have started (they never finish).
func (e *env) startChildWorker(slots int, resources ...string) (*exec.Cmd, func() []uint64) {
	e.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=worker", "WEAVE_TEST_URL="+e.srv.ClientURL(), "WEAVE_TEST_NS="+e.ns,
		"WEAVE_TEST_SLOTS="+strconv.Itoa(slots), "WEAVE_TEST_RESOURCES="+strings.Join(resources, ","))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		e.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		started []uint64
	)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "started "); ok {
				if id, err := strconv.ParseUint(v, 10, 64); err == nil {
					mu.Lock()
					started = append(started, id)
					mu.Unlock()
				}
			}
		}
	}()
	e.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-readDone // the pipe ends with the process
		_ = cmd.Wait()
	})
	return cmd, func() []uint64 {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(started)
	}
}

// TestReattachAfterSubmitterRestart: a group published by one submitter can be waited for by
// another, after the first one's connection is gone: Attach(groupID).Wait returns every outcome,
// those recorded before it attached and those recorded after.
func TestReattachAfterSubmitterRestart(t *testing.T) {
	t.Parallel()
	const n = 50
	e := setup(t)
	e.coordinator(coordinator.Config{})
	gate := make(chan struct{})
	var started, finished atomic.Int64
	e.worker(worker.Config{Concurrency: 4}, func(ctx context.Context, j *worker.Job) ([]byte, error) {
		// Whichever jobs start after the first half wait: batches may reach the worker in any
		// order, so the gate cannot go by job index.
		if started.Add(1) > n/2 {
			select {
			case <-gate: // the second half waits until the new submitter is attached
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		finished.Add(1)
		return []byte("r" + string(j.Payload)), nil
	})

	nc1 := jstest.NewConn(t, e.srv.ClientURL())
	d1, err := dispatcher.New(nc1, dispatcher.Config{Namespace: e.ns})
	if err != nil {
		t.Fatal(err)
	}
	h1, err := d1.Publish(e.ctx, "reattach", jobs(n, nil))
	if err != nil {
		t.Fatal(err)
	}
	first, last := h1.FirstID(), h1.LastID()
	testwait.For(t, 30*time.Second, "half the jobs to finish", func() bool { return finished.Load() == n/2 })
	nc1.Close() // the submitter goes away

	nc2 := jstest.NewConn(t, e.srv.ClientURL())
	d2, err := dispatcher.New(nc2, dispatcher.Config{Namespace: e.ns})
	if err != nil {
		t.Fatal(err)
	}
	type waited struct {
		res *dispatcher.Result
		err error
	}
	got := make(chan waited, 1)
	go func() {
		ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
		defer cancel()
		res, err := d2.Attach("reattach").Wait(ctx)
		got <- waited{res, err}
	}()
	close(gate)
	w := <-got
	if w.err != nil {
		t.Fatal(w.err)
	}
	res := w.res
	if res.Summary.Done != n || len(res.Jobs) != n {
		t.Fatalf("summary %+v, %d outcomes; want %d done", res.Summary, len(res.Jobs), n)
	}
	ids := map[uint64]bool{}
	for _, o := range res.Jobs {
		want := "r" + strings.TrimPrefix(o.Key, "k")
		if o.State != dispatcher.StateDone || string(o.Result) != want || o.ID < first || o.ID > last {
			t.Errorf("outcome %+v, want done with result %q and an ID in [%d, %d]", o, want, first, last)
		}
		ids[o.ID] = true
	}
	if len(ids) != n {
		t.Errorf("%d distinct jobs in the outcomes, want %d", len(ids), n)
	}
}

// TestGracefulWorkerDrain: a worker stopped (its context canceled) while it runs jobs and holds
// others queued lets the running ones finish (done, 1 attempt, context not canceled) and gives
// back the queued ones without counting an attempt (neither in the outcome nor in the j.Attempt
// their handler sees next); they run on another worker of the pool, and every job ends done
// after exactly 1 attempt.
func TestGracefulWorkerDrain(t *testing.T) {
	t.Parallel()
	const n, slots, prefetch = 10, 2, 3
	e := setup(t)
	// Prefetch 3: the pool is given its 2 slots' jobs plus 3 more, which wait in the worker's queue.
	e.coordinator(coordinator.Config{Prefetch: prefetch})
	// Publish first, so the coordinator releases the first jobs in one batch when the worker
	// joins: 2 to run and 3 to queue.
	h := e.publish("drain", jobs(n, nil))
	testwait.For(t, 30*time.Second, "the jobs to be admitted", func() bool {
		st, err := coordinator.QueryStatus(e.ctx, e.nc, e.ns)
		return err == nil && st.Jobs["pending"] == n
	})

	tr := newTracker()
	gate := make(chan struct{})
	var canceledA atomic.Int64
	a, stopA := e.startWorker(worker.Config{ID: "a", Concurrency: slots, DrainTimeout: 30 * time.Second},
		func(ctx context.Context, j *worker.Job) ([]byte, error) {
			tr.start("a", j)
			defer tr.end(j)
			select {
			case <-gate:
			case <-ctx.Done(): // the drain ran out of time: must not happen here
				canceledA.Add(1)
				return nil, ctx.Err()
			}
			return []byte("a"), nil
		})
	var openGate sync.Once
	t.Cleanup(func() { openGate.Do(func() { close(gate) }) }) // before stopping a, should the test stop early
	testwait.For(t, 30*time.Second, "worker a to run 2 jobs and queue more", func() bool {
		st := a.Stats()
		return st.Busy == slots && st.Queued > 0
	})
	queued := a.Stats().Queued
	stopped := make(chan error, 1)
	go func() { stopped <- stopA() }()
	testwait.For(t, 30*time.Second, "worker a to release its queued jobs", func() bool {
		st := a.Stats()
		return st.Draining && st.Returned == uint64(queued)
	})

	// Another worker of the same pool takes the released jobs and the rest while a's running jobs
	// are still running.
	var seenOnB sync.Map // job ID → j.Attempt as b's handler saw it
	e.worker(worker.Config{ID: "b", Concurrency: 4}, func(ctx context.Context, j *worker.Job) ([]byte, error) {
		seenOnB.Store(j.ID, j.Attempt)
		return tr.handler("b", nil)(ctx, j)
	})
	testwait.For(t, 30*time.Second, "worker b to run every job but a's running ones", func() bool {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		return tr.started["drain"] == n
	})
	openGate.Do(func() { close(gate) })
	if err := <-stopped; err != nil {
		t.Errorf("worker a's Run: %v", err)
	}

	res := e.waitFor(h)
	if res.Summary.Done != n || len(res.Jobs) != n {
		t.Fatalf("summary %+v, %d outcomes; want %d done", res.Summary, len(res.Jobs), n)
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	onA := 0
	for _, o := range res.Jobs {
		if o.State != dispatcher.StateDone || o.Attempts != 1 {
			t.Errorf("job %s: %+v, want done after 1 attempt", o.Key, o)
		}
		if tr.runs[o.ID] != 1 {
			t.Errorf("job %s ran %d times", o.Key, tr.runs[o.ID])
		}
		if w := tr.workerOf[o.ID]; w == "a" {
			onA++
			if string(o.Result) != "a" {
				t.Errorf("job %s ran on a but its result is %q", o.Key, o.Result)
			}
		} else if v, _ := seenOnB.Load(o.ID); v != 1 {
			// worker.Job.Attempt "counts the attempts of this job, 1 for the first": a job given
			// back unrun by a drain has had no attempt yet.
			t.Errorf("job %s: its first attempt, on b, saw j.Attempt %v, want 1 (its outcome says %d attempt)", o.Key, v, o.Attempts)
		}
	}
	if onA != slots {
		t.Errorf("%d jobs ran on the drained worker, want the %d it was running", onA, slots)
	}
	if c := canceledA.Load(); c != 0 {
		t.Errorf("%d running jobs had their context canceled during the drain", c)
	}
	st := a.Stats()
	t.Logf("worker a: %d queued jobs returned at its drain, %d run, %d ok", st.Returned, st.JobsRun, st.JobsOK)
	if st.JobsRun != slots || st.JobsOK != slots || st.Returned != uint64(queued) {
		t.Errorf("worker a stats %+v: want %d run and ok, %d released", st, slots, queued)
	}
}

// startWorker runs a worker until stop is called (or the test ends) and returns it with stop,
// which cancels its context (a graceful drain) and returns Run's error.
func (e *env) startWorker(cfg worker.Config, h worker.HandlerFunc) (*worker.Worker, func() error) {
	e.t.Helper()
	cfg.Namespace = e.ns
	cfg.HeartbeatInterval = 250 * time.Millisecond
	cfg.Logger = testLogger("worker")
	w, err := worker.New(e.nc, cfg, h)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var (
		once sync.Once
		err2 error
	)
	stop := func() error {
		once.Do(func() {
			cancel()
			err2 = <-done
		})
		return err2
	}
	e.t.Cleanup(func() { _ = stop() })
	return w, stop
}
