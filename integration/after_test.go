package integration_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/internal/wire"
	"github.com/weavejobs/weave/worker"
)

// runLog records, per group, when each job started and when the last one ended.
type runLog struct {
	mu     sync.Mutex
	starts map[string][]time.Time
	ends   map[string]time.Time
	after  map[string][]worker.AfterResult
}

func newRunLog() *runLog {
	return &runLog{starts: map[string][]time.Time{}, ends: map[string]time.Time{}, after: map[string][]worker.AfterResult{}}
}

// handler runs a job, failing it when fail says so.
func (l *runLog) handler(fail func(j *worker.Job) bool) worker.HandlerFunc {
	return func(_ context.Context, j *worker.Job) ([]byte, error) {
		l.mu.Lock()
		l.starts[j.Group] = append(l.starts[j.Group], time.Now())
		l.after[j.Group] = j.After
		l.mu.Unlock()
		defer func() {
			l.mu.Lock()
			l.ends[j.Group] = time.Now()
			l.mu.Unlock()
		}()
		if fail != nil && fail(j) {
			return nil, worker.Permanent(errors.New("failed on purpose"))
		}
		return nil, nil
	}
}

func (l *runLog) firstStart(g string) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.MinFunc(l.starts[g], func(a, b time.Time) int { return a.Compare(b) })
}

func (l *runLog) lastEnd(g string) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ends[g]
}

func (l *runLog) started(g string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.starts[g])
}

// TestChainOfGroups: a chain of 100 groups, each published at once with a dependency on the one
// before, runs in order: no job of a group starts before every job of the one before has ended.
func TestChainOfGroups(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.coordinator(coordinator.Config{})
	log := newRunLog()
	e.worker(worker.Config{Concurrency: 8}, log.handler(nil))
	const n = 100
	var hs []*dispatcher.Handle
	for i := range n {
		var opts []dispatcher.GroupOption
		if i > 0 {
			opts = append(opts, dispatcher.After(dispatcher.Dependency{Group: fmt.Sprint("c", i-1)}))
		}
		h, err := e.d.Publish(e.ctx, fmt.Sprint("c", i), jobs(3, nil), opts...)
		if err != nil {
			t.Fatalf("publish c%d: %v", i, err)
		}
		hs = append(hs, h)
	}
	for i, h := range hs {
		if sum, err := h.WaitSummary(e.ctx); err != nil || sum.Done != 3 {
			t.Fatalf("group c%d: %+v %v", i, sum, err)
		}
	}
	for i := 1; i < n; i++ {
		prev, cur := fmt.Sprint("c", i-1), fmt.Sprint("c", i)
		if first := log.firstStart(cur); first.Before(log.lastEnd(prev)) {
			t.Fatalf("group %s started at %v, before %s ended at %v", cur, first, prev, log.lastEnd(prev))
		}
	}
}

// TestFanIn: a group that runs after 50 groups is released only once the last of them has
// completed, and its jobs receive how each ended.
func TestFanIn(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.coordinator(coordinator.Config{})
	log := newRunLog()
	e.worker(worker.Config{Concurrency: 8}, log.handler(nil))
	const n = 50
	var deps []dispatcher.Dependency
	var hs []*dispatcher.Handle
	for i := range n {
		g := fmt.Sprint("crawl-", i)
		hs = append(hs, e.publish(g, jobs(4, nil)))
		deps = append(deps, dispatcher.Dependency{Group: g})
	}
	index, err := e.d.Publish(e.ctx, "index", jobs(1, nil), dispatcher.After(deps...))
	if err != nil {
		t.Fatal(err)
	}
	if sum, err := index.WaitSummary(e.ctx); err != nil || sum.Done != 1 {
		t.Fatalf("index: %+v %v", sum, err)
	}
	start := log.firstStart("index")
	for _, h := range hs {
		if end := log.lastEnd(h.GroupID()); start.Before(end) {
			t.Fatalf("index started at %v, before %s ended at %v", start, h.GroupID(), end)
		}
	}
	got := log.after["index"]
	if len(got) != n || got[0].Group != "crawl-0" || got[0].Done != 4 || got[0].Jobs != 4 {
		t.Fatalf("index's jobs saw %d results, first %+v; want %d, crawl-0 with 4 done", len(got), got[0], n)
	}
}

// TestFollowUps: follow-ups stored with a group that fails: on failure and on completion run
// once, with the group's failed job IDs; on success waits, and runs once a redrive of the group
// has succeeded.
func TestFollowUps(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.coordinator(coordinator.Config{})
	log := newRunLog()
	var healed atomic.Bool
	e.worker(worker.Config{Concurrency: 4}, log.handler(func(j *worker.Job) bool {
		return j.Group == "report" && j.Key == "k1" && !healed.Load()
	}))
	one := []dispatcher.Job{{Payload: []byte("x")}}
	h, err := e.d.Publish(e.ctx, "report", jobs(3, nil), dispatcher.Then(
		dispatcher.FollowUp{Group: "mail", Jobs: one},
		dispatcher.FollowUp{When: dispatcher.OnFailure, Group: "alert", Jobs: one},
		dispatcher.FollowUp{When: dispatcher.OnCompletion, Group: "cleanup", Jobs: one},
	))
	if err != nil {
		t.Fatal(err)
	}
	fu := h.FollowUps()
	if len(fu) != 3 {
		t.Fatalf("%d follow-up handles", len(fu))
	}
	if sum, err := h.WaitSummary(e.ctx); err != nil || sum.Failed != 1 {
		t.Fatalf("report: %+v %v", sum, err)
	}
	for _, f := range fu[1:] {
		if sum, err := f.WaitSummary(e.ctx); err != nil || sum.Done != 1 {
			t.Fatalf("follow-up %s: %+v %v", f.GroupID(), sum, err)
		}
	}
	alert := log.after["alert"]
	if len(alert) != 1 || alert[0].Failed != 1 || len(alert[0].FailedIDs) != 1 {
		t.Fatalf("alert's job saw %+v, want report with one failed ID", alert)
	}
	// mail waits for a redrive of report: nothing of it has run.
	if got := log.started("mail"); got != 0 {
		t.Fatalf("mail ran %d jobs before report succeeded", got)
	}
	st, err := coordinator.QueryStatus(e.ctx, e.nc, e.ns)
	if err != nil {
		t.Fatal(err)
	}
	if st.WaitingGroups != 1 || st.Totals.AfterReleased != 2 {
		t.Fatalf("status: waiting groups %d, after released %d; want mail waiting, alert and cleanup released", st.WaitingGroups, st.Totals.AfterReleased)
	}
	info, err := e.d.Group(e.ctx, "mail")
	if err != nil || !strings.Contains(strings.Join(info.WaitsFor, " "), "report") {
		t.Fatalf("group mail: %+v %v; want it shown waiting for report", info, err)
	}
	healed.Store(true)
	rh, err := e.d.Redrive(e.ctx, "report")
	if err != nil {
		t.Fatal(err)
	}
	if sum, err := rh.WaitSummary(e.ctx); err != nil || sum.Done != 1 {
		t.Fatalf("redrive: %+v %v", sum, err)
	}
	if sum, err := fu[0].WaitSummary(e.ctx); err != nil || sum.Done != 1 {
		t.Fatalf("mail: %+v %v", sum, err)
	}
	if got := log.started("mail") + log.started("alert") + log.started("cleanup"); got != 3 {
		t.Fatalf("follow-ups ran %d jobs, want 3 (each once)", got)
	}
}

// TestDependencyFailed: by default a group whose dependency did not succeed is canceled, and so
// are the groups after it.
func TestDependencyFailed(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.coordinator(coordinator.Config{})
	log := newRunLog()
	e.worker(worker.Config{Concurrency: 4}, log.handler(func(j *worker.Job) bool { return j.Group == "a" }))
	a := e.publish("a", jobs(2, nil))
	b, err := e.d.Publish(e.ctx, "b", jobs(2, nil), dispatcher.After(dispatcher.Dependency{Group: "a"}))
	if err != nil {
		t.Fatal(err)
	}
	c, err := e.d.Publish(e.ctx, "c", jobs(2, nil), dispatcher.After(dispatcher.Dependency{Group: "b"}))
	if err != nil {
		t.Fatal(err)
	}
	if sum, err := a.WaitSummary(e.ctx); err != nil || sum.Failed != 2 {
		t.Fatalf("a: %+v %v", sum, err)
	}
	for _, h := range []*dispatcher.Handle{b, c} {
		if sum, err := h.WaitSummary(e.ctx); err != nil || sum.Canceled != 2 {
			t.Fatalf("%s: %+v %v; want its 2 jobs canceled", h.GroupID(), sum, err)
		}
	}
	if log.started("b")+log.started("c") != 0 {
		t.Fatal("a canceled group ran jobs")
	}
}

// TestDependencyCycleRefused: a group that would wait on itself is refused at publish.
func TestDependencyCycleRefused(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.coordinator(coordinator.Config{})
	// b waits for a, which is not published yet; a waiting for b closes a cycle.
	if _, err := e.d.Publish(e.ctx, "b", jobs(1, nil), dispatcher.After(dispatcher.Dependency{Group: "a"})); err != nil {
		t.Fatal(err)
	}
	_, err := e.d.Publish(e.ctx, "a", jobs(1, nil), dispatcher.After(dispatcher.Dependency{Group: "b"}))
	if !errors.Is(err, dispatcher.ErrCycle) {
		t.Fatalf("publish a: %v, want ErrCycle", err)
	}
}

// TestDependencyAcrossRestart: groups and their dependencies stored while no coordinator runs,
// and a dependency on a group that completed before a restart, are decided as live.
func TestDependencyAcrossRestart(t *testing.T) {
	t.Parallel()
	e := setup(t)
	log := newRunLog()
	e.worker(worker.Config{Concurrency: 4}, log.handler(nil))
	a := e.publish("a", jobs(2, nil))
	b, err := e.d.Publish(e.ctx, "b", jobs(2, nil), dispatcher.After(dispatcher.Dependency{Group: "a"}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(e.ctx)
	c, err := coordinator.New(e.nc, coordinator.Config{Namespace: e.ns, Logger: testLogger("coordinator")})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	for _, h := range []*dispatcher.Handle{a, b} {
		if sum, err := h.WaitSummary(e.ctx); err != nil || sum.Done != 2 {
			t.Fatalf("%s: %+v %v", h.GroupID(), sum, err)
		}
	}
	if log.firstStart("b").Before(log.lastEnd("a")) {
		t.Fatal("b started before a ended")
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// a is complete and forgotten: a group published after a restart binds to it (retained).
	e.coordinator(coordinator.Config{})
	d, err := e.d.Publish(e.ctx, "d", jobs(1, nil), dispatcher.After(dispatcher.Dependency{Group: "a"}))
	if err != nil {
		t.Fatal(err)
	}
	if sum, err := d.WaitSummary(e.ctx); err != nil || sum.Done != 1 {
		t.Fatalf("d: %+v %v", sum, err)
	}
}

// TestFollowUpAfterResume: a producer that publishes a group again after a crash resumes its
// open incarnation; the follow-ups it publishes with it wait on that incarnation, and run.
func TestFollowUpAfterResume(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.coordinator(coordinator.Config{})
	log := newRunLog()
	e.worker(worker.Config{Concurrency: 4}, log.handler(nil))
	// The crashed producer's open, never sealed.
	names, _ := wire.NewNames(e.ns)
	e.publishRaw(names.GroupSubject("p"), wire.GroupControl{Group: "p", Op: wire.OpOpen}.Header(), nil)
	h, err := e.d.Publish(e.ctx, "p", jobs(2, nil), dispatcher.Then(dispatcher.FollowUp{Group: "f", Jobs: []dispatcher.Job{{Payload: []byte("x")}}}))
	if err != nil {
		t.Fatal(err)
	}
	if sum, err := h.FollowUps()[0].WaitSummary(e.ctx); err != nil || sum.Done != 1 {
		t.Fatalf("follow-up: %+v %v", sum, err)
	}
	if log.firstStart("f").Before(log.lastEnd("p")) {
		t.Fatal("the follow-up started before its group ended")
	}
}

// TestFollowUpOfGroupCutShort: a Publish that stops at an invalid job still stores the group's
// follow-up before its seal: the group completes with the jobs published before it, and what
// follows it runs once it has.
func TestFollowUpOfGroupCutShort(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.coordinator(coordinator.Config{})
	log := newRunLog()
	e.worker(worker.Config{Concurrency: 4}, log.handler(nil))
	h, err := e.d.Publish(e.ctx, "short", jobs(3, func(i int, j *dispatcher.Job) {
		if i == 2 {
			j.MaxAttempts = -1
		}
	}), dispatcher.Then(dispatcher.FollowUp{Group: "after-short", Jobs: []dispatcher.Job{{Payload: []byte("x")}}}))
	if !errors.Is(err, dispatcher.ErrInvalidJob) || h == nil || h.Accepted() != 2 || len(h.FollowUps()) != 1 {
		t.Fatalf("Publish stopped at an invalid job: %v, handle %v", err, h)
	}
	if res := e.waitFor(h); res.Summary != (dispatcher.Summary{Jobs: 2, Done: 2}) {
		t.Fatalf("the group cut short: %+v", res.Summary)
	}
	if sum, err := h.FollowUps()[0].WaitSummary(e.ctx); err != nil || sum.Done != 1 {
		t.Fatalf("its follow-up: %+v %v", sum, err)
	}
	if log.firstStart("after-short").Before(log.lastEnd("short")) {
		t.Fatal("the follow-up started before its group ended")
	}
}
