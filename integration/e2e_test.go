package integration_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/internal/testwait"
	"github.com/weavejobs/weave/spreader"
	"github.com/weavejobs/weave/worker"
)

func TestEndToEnd(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.coordinator(coordinator.Config{})
	tr := newTracker()
	e.worker(worker.Config{ID: "w1", Concurrency: 4}, tr.handler("w1", nil))
	e.worker(worker.Config{ID: "w2", Concurrency: 4}, tr.handler("w2", nil))
	var hs []*dispatcher.Handle
	for g := range 3 {
		hs = append(hs, e.publish(fmt.Sprint("group-", g), jobs(10*(g+1), nil)))
	}
	for g, h := range hs {
		res := e.wait(h)
		if res.Summary.Done != 10*(g+1) || len(res.Jobs) != 10*(g+1) {
			t.Fatalf("group %d: summary %+v, %d outcomes", g, res.Summary, len(res.Jobs))
		}
		for _, o := range res.Jobs {
			want := "ok:" + strings.TrimPrefix(o.Key, "k")
			if o.State != dispatcher.StateDone || string(o.Result) != want || o.Attempts != 1 {
				t.Fatalf("outcome %+v, want done with result %q", o, want)
			}
		}
	}
	e.waitWorkers(2) // a heartbeat may be late on a busy machine
	st, err := coordinator.QueryStatus(e.ctx, e.nc, e.ns)
	if err != nil {
		t.Fatal(err)
	}
	if st.Totals.Admitted != 60 || st.Totals.Done != 60 {
		t.Fatalf("status: %d admitted, %d done", st.Totals.Admitted, st.Totals.Done)
	}
}

// TestSpread: 50 groups of 20 jobs, 4 worker slots, F = 5: no group has more than one job
// running at a time while 5 or more groups remain (have jobs not yet started).
func TestSpread(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.coordinator(coordinator.Config{Feeders: 5})
	const groups, perGroup = 50, 20
	tr := newTracker()
	var violations atomic.Int64
	tr.onStart = func(group string, running, started map[string]int) {
		remaining := groups
		for _, n := range started {
			if n == perGroup {
				remaining--
			}
		}
		if started[group] == perGroup {
			remaining++ // this start took the group's last job: it still remained a moment ago
		}
		if running[group] > 1 && remaining >= 5 {
			violations.Add(1)
			t.Logf("group %s has %d jobs running with %d groups remaining", group, running[group], remaining)
		}
	}
	// Every group is published before the worker starts: "groups remain" counts published ones.
	var hs []*dispatcher.Handle
	for g := range groups {
		hs = append(hs, e.publish(fmt.Sprint("g", g), jobs(perGroup, nil)))
	}
	e.worker(worker.Config{Concurrency: 4}, tr.handler("w", func(*worker.Job) time.Duration { return time.Millisecond }))
	for _, h := range hs {
		if sum, err := h.WaitSummary(e.ctx); err != nil || sum.Done != perGroup {
			t.Fatalf("group %s: %+v, %v", h.GroupID(), sum, err)
		}
	}
	if v := violations.Load(); v > 0 {
		t.Fatalf("%d job starts found their group already running while 5 or more groups remained", v)
	}
}

// TestFairness is the reference case end to end: 6 slots, groups with 10/5/1 ms tasks. Least
// in-flight gives each group an equal share of the running slots, measured from the handlers'
// side: about 2 of the 6 each. The test asserts each group's share of the busy slots (scaled to
// 6 slots) is 2 ± 15%. The absolute averages also depend on how fast this machine turns a
// completion into the next release (a speed, measured by the benchmarks, not asserted here);
// they are logged, and the test only checks the slots were mostly busy (at least half).
func TestFairness(t *testing.T) {
	share, busy := fairnessRun(t, spreader.LeastInFlight)
	if busy < 6*0.5 {
		t.Errorf("only %.2f of 6 slots busy on average", busy)
	}
	for g, v := range share {
		if v < 2*0.85 || v > 2*1.15 {
			t.Errorf("group %s held %.2f of 6 busy slots, want 2 ± 15%%", g, v)
		}
	}
}

// TestFairnessRoundRobin is the control: round robin gives the group with long tasks most of the
// slots (3.75 / 1.875 / 0.375 in theory), so the measure above does tell the policies apart.
func TestFairnessRoundRobin(t *testing.T) {
	share, _ := fairnessRun(t, spreader.RoundRobin)
	if share["A"] < 1.5*share["B"] || share["B"] < 1.5*share["C"] {
		t.Errorf("round robin shares A %.2f B %.2f C %.2f: want A > B > C by far", share["A"], share["B"], share["C"])
	}
}

// fairnessRun runs the reference case under a policy and returns each group's share of the busy
// slots, scaled to 6, and the average number of busy slots. It is not parallel: it measures time.
func fairnessRun(t *testing.T, policy spreader.Policy) (share map[string]float64, busy float64) {
	e := setup(t)
	e.coordinator(coordinator.Config{Policy: policy})
	tr := newTracker()
	dur := map[string]time.Duration{"A": 10 * time.Millisecond, "B": 5 * time.Millisecond, "C": time.Millisecond}
	e.worker(worker.Config{Concurrency: 6}, tr.handler("w", func(j *worker.Job) time.Duration { return dur[j.Group] }))
	// Enough jobs that all three groups stay active for the whole window.
	counts := map[string]int{"A": 1000, "B": 2000, "C": 10000}
	var hs []*dispatcher.Handle
	for _, g := range []string{"A", "B", "C"} {
		hs = append(hs, e.publish(g, jobs(counts[g], nil)))
	}
	testwait.For(t, time.Minute, "all groups running", func() bool {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		return tr.runsOf("A") > 0 && tr.runsOf("B") > 0 && tr.runsOf("C") > 0
	})
	tr.mu.Lock()
	tr.advance(time.Now())
	start, base := time.Now(), cloneArea(tr.area)
	tr.mu.Unlock()
	testwait.For(t, time.Minute, "measurement window", func() bool { return time.Since(start) >= time.Second })
	tr.mu.Lock()
	tr.advance(time.Now())
	elapsed := time.Since(start)
	avg := map[string]float64{}
	for _, g := range []string{"A", "B", "C"} {
		avg[g] = float64(tr.area[g]-base[g]) / float64(elapsed)
		busy += avg[g]
	}
	tr.mu.Unlock()
	share = map[string]float64{}
	for g, v := range avg {
		share[g] = 6 * v / busy
	}
	t.Logf("%v: average in flight A %.2f  B %.2f  C %.2f (%.0f%% of the 6 slots busy); shares of the busy slots A %.2f  B %.2f  C %.2f",
		policy, avg["A"], avg["B"], avg["C"], 100*busy/6, share["A"], share["B"], share["C"])
	if st, err := coordinator.QueryStatus(e.ctx, e.nc, e.ns); err == nil {
		for _, g := range st.Groups {
			t.Logf("group %s: busy share %.2f, in flight %d", g.ID, g.Busy, g.InFlight)
		}
	}
	for _, h := range hs {
		if err := h.Cancel(e.ctx); err != nil {
			t.Fatal(err)
		}
	}
	return share, busy
}

func (tr *tracker) runsOf(group string) int { return tr.peak[group] }

func cloneArea(m map[string]time.Duration) map[string]time.Duration {
	c := make(map[string]time.Duration, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// TestAffinityRequired: a job requiring r waits, counted, until a worker holding r joins, and
// runs only there.
func TestAffinityRequired(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.coordinator(coordinator.Config{})
	tr := newTracker()
	e.worker(worker.Config{ID: "plain", Concurrency: 4}, tr.handler("plain", nil))
	h := e.publish("needs-gpu", jobs(5, func(i int, j *dispatcher.Job) {
		if i%2 == 0 {
			j.Require = []string{"gpu"}
		}
	}))
	testwait.For(t, 30*time.Second, "the jobs without requirement to run and the others to wait", func() bool {
		st, err := coordinator.QueryStatus(e.ctx, e.nc, e.ns)
		if err != nil {
			return false
		}
		for _, r := range st.Resources {
			if r.Name == "gpu" && r.Required["pending"] == 3 && r.Holders == 0 && st.Jobs["done"] == 2 {
				return true
			}
		}
		return false
	})
	e.worker(worker.Config{ID: "gpu", Concurrency: 1, Resources: []string{"gpu"}}, tr.handler("gpu", nil))
	res := e.wait(h)
	if res.Summary.Done != 5 {
		t.Fatalf("summary %+v", res.Summary)
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, o := range res.Jobs {
		i := strings.TrimPrefix(o.Key, "k")
		needsGPU := i == "0" || i == "2" || i == "4"
		if got := tr.workerOf[o.ID]; needsGPU && got != "gpu" {
			t.Errorf("job %s requiring gpu ran on %q", o.Key, got)
		}
	}
}

// TestAffinityPreferred: a job preferring r runs on a free holder of r, and elsewhere when the
// holder is busy rather than waiting.
func TestAffinityPreferred(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.coordinator(coordinator.Config{Feeders: 8})
	tr := newTracker()
	release := make(chan struct{})
	e.worker(worker.Config{ID: "cache", Concurrency: 1, Resources: []string{"cache"}}, func(ctx context.Context, j *worker.Job) ([]byte, error) {
		tr.start("cache", j)
		defer tr.end(j)
		if j.Key == "k0" {
			<-release // keep the holder busy
		}
		return nil, nil
	})
	e.worker(worker.Config{ID: "plain", Concurrency: 4}, tr.handler("plain", nil))
	e.waitWorkers(2)
	first := e.publish("first", jobs(1, func(_ int, j *dispatcher.Job) { j.Prefer = []string{"cache"} }))
	testwait.For(t, 30*time.Second, "the first preferring job to reach the cache holder", func() bool {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		return tr.running["first"] == 1
	})
	busy := e.publish("while-busy", jobs(4, func(_ int, j *dispatcher.Job) { j.Prefer = []string{"cache"} }))
	res := e.wait(busy)
	close(release)
	e.wait(first)
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, o := range res.Jobs {
		if tr.workerOf[o.ID] != "plain" {
			t.Errorf("job %s ran on %q while the holder was busy", o.Key, tr.workerOf[o.ID])
		}
	}
	firstRes := e.wait(first)
	if w := tr.workerOf[firstRes.Jobs[0].ID]; w != "cache" {
		t.Errorf("preferring job ran on %q while the holder was free", w)
	}
}

// TestLargeGroupDoesNotBlockSmall: a million-job group published first does not hold back a
// small group published after it (100,000 jobs under the race detector).
func TestLargeGroupDoesNotBlockSmall(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.coordinator(coordinator.Config{})
	tr := newTracker()
	e.worker(worker.Config{Concurrency: 4}, tr.handler("w", func(*worker.Job) time.Duration { return time.Millisecond }))
	big := e.publish("big", jobs(bigGroup, nil))
	small := e.publish("small", jobs(10, nil))
	res := e.wait(small)
	if res.Summary.Done != 10 {
		t.Fatalf("small group: %+v", res.Summary)
	}
	st, err := coordinator.QueryStatus(e.ctx, e.nc, e.ns)
	if err != nil {
		t.Fatal(err)
	}
	if st.Jobs["pending"] < bigGroup*9/10 {
		t.Fatalf("the big group was mostly done (%d pending) before the small one finished: not a fair test", st.Jobs["pending"])
	}
	if err := big.Cancel(e.ctx); err != nil {
		t.Fatal(err)
	}
}

// TestLazyPublishing: jobs start running before a large group has finished publishing. The
// generator refuses to yield job 1,000 until a job has run: a publisher that buffered the group,
// or a coordinator that waited for the seal, would deadlock.
func TestLazyPublishing(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.coordinator(coordinator.Config{})
	firstRun := make(chan struct{})
	var once sync.Once
	e.worker(worker.Config{Concurrency: 2}, func(ctx context.Context, j *worker.Job) ([]byte, error) {
		once.Do(func() { close(firstRun) })
		return nil, nil
	})
	gen := func(yield func(dispatcher.Job) bool) {
		for i := range 2000 {
			if i == 1000 {
				select {
				case <-firstRun:
				case <-time.After(30 * time.Second):
					t.Error("no job ran while the group was still being published")
					return
				}
			}
			if !yield(dispatcher.Job{Key: fmt.Sprint(i)}) {
				return
			}
		}
	}
	res := e.wait(e.publish("lazy", gen))
	if res.Summary.Done != 2000 {
		t.Fatalf("summary %+v", res.Summary)
	}
}

// TestGroupIDReused: a group ID published again after its group finished is a new group; each
// Handle waits for its own incarnation.
func TestGroupIDReused(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.coordinator(coordinator.Config{})
	e.worker(worker.Config{Concurrency: 2}, func(ctx context.Context, j *worker.Job) ([]byte, error) {
		return j.Payload, nil
	})
	first := e.wait(e.publish("again", jobs(2, nil)))
	second := e.wait(e.publish("again", jobs(3, func(i int, j *dispatcher.Job) { j.Key = fmt.Sprint("second-", i) })))
	if first.Summary.Jobs != 2 || second.Summary.Jobs != 3 {
		t.Fatalf("first %+v, second %+v", first.Summary, second.Summary)
	}
	for _, o := range second.Jobs {
		if !strings.HasPrefix(o.Key, "second-") {
			t.Fatalf("the second incarnation's outcomes include %+v", o)
		}
	}
}

// TestCancelRunningGroup: canceling a group cancels its running jobs' contexts within a second,
// its pending jobs never start, and every job ends canceled.
func TestCancelRunningGroup(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.coordinator(coordinator.Config{})
	var started, sawCancel atomic.Int64
	canceledAt := make(chan time.Time, 16)
	e.worker(worker.Config{Concurrency: 2}, func(ctx context.Context, j *worker.Job) ([]byte, error) {
		started.Add(1)
		<-ctx.Done() // runs until canceled
		if errors.Is(context.Cause(ctx), worker.ErrJobCanceled) {
			sawCancel.Add(1)
		}
		canceledAt <- time.Now()
		return nil, ctx.Err()
	})
	h := e.publish("doomed", jobs(10, nil))
	testwait.For(t, 30*time.Second, "two jobs running", func() bool { return started.Load() == 2 })
	asked := time.Now()
	if err := h.Cancel(e.ctx); err != nil {
		t.Fatal(err)
	}
	res := e.wait(h)
	if res.Summary.Canceled != 10 {
		t.Fatalf("summary %+v, want 10 canceled", res.Summary)
	}
	for range 2 {
		if at := <-canceledAt; at.Sub(asked) > time.Second {
			t.Errorf("a running job saw its cancellation %v after the request", at.Sub(asked))
		}
	}
	if n := started.Load(); n != 2 {
		t.Errorf("%d jobs started; the 8 pending ones must never start", n)
	}
	if sawCancel.Load() != 2 {
		t.Errorf("%d handlers saw worker.ErrJobCanceled as the cause", sawCancel.Load())
	}
}

// TestCancelJobsAndHistory: cancelling single jobs ends the pending one at once (it never runs)
// and the running one through its context; a failing job's outcome lists its attempts.
func TestCancelJobsAndHistory(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.coordinator(coordinator.Config{MaxAttempts: 3, RetryBase: time.Millisecond, Feeders: 1, Prefetch: -1})
	runs := map[string]int{}
	var mu sync.Mutex
	hold := make(chan struct{})
	e.worker(worker.Config{ID: "w-hist", Concurrency: 1}, func(ctx context.Context, j *worker.Job) ([]byte, error) {
		mu.Lock()
		runs[j.Key]++
		mu.Unlock()
		switch j.Key {
		case "k0":
			return nil, fmt.Errorf("attempt %d failed", j.Attempt)
		case "k1":
			close(hold)
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return nil, nil
	})
	h := e.publish("mixed", jobs(3, nil))
	select {
	case <-hold:
	case <-e.ctx.Done():
		t.Fatal("k1 never started")
	}
	// k0 has failed (3 attempts), k1 runs, k2 waits behind it (one slot, no prefetch).
	if _, err := h.CancelJobs(e.ctx, h.FirstID()+1, h.FirstID()+2); err != nil {
		t.Fatal(err)
	}
	res := e.wait(h)
	byKey := map[string]dispatcher.JobOutcome{}
	for _, o := range res.Jobs {
		byKey[o.Key] = o
	}
	if o := byKey["k0"]; o.State != dispatcher.StateFailed || o.Attempts != 3 || len(o.History) != 3 || o.History[2].Err != "attempt 3 failed" || o.History[0].Worker != "w-hist" {
		t.Fatalf("k0 outcome %+v", o)
	}
	if byKey["k1"].State != dispatcher.StateCanceled || byKey["k2"].State != dispatcher.StateCanceled {
		t.Fatalf("k1 %+v, k2 %+v: want both canceled", byKey["k1"], byKey["k2"])
	}
	mu.Lock()
	defer mu.Unlock()
	if runs["k2"] != 0 || runs["k1"] != 1 {
		t.Fatalf("runs %v: the canceled pending job must never run, the running one once", runs)
	}
}
