package integration_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/internal/testwait"
	"github.com/weavejobs/weave/internal/wire"
	"github.com/weavejobs/weave/worker"
)

// TestInspectJobsAndGroups looks up jobs in every state, by ID and by key, and their group, while
// the group runs (the coordinator's live state) and after it completed (the stored outcomes and
// summary), and checks the errors for unknown jobs and groups and for bad requests.
func TestInspectJobsAndGroups(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.coordinator(coordinator.Config{})
	release := make(chan struct{})
	var heldBy atomic.Value // the worker running "held"
	var handle func(ctx context.Context, id string, j *worker.Job) ([]byte, error)
	handler := func(id string) worker.HandlerFunc {
		return func(ctx context.Context, j *worker.Job) ([]byte, error) {
			return handle(ctx, id, j)
		}
	}
	handle = func(ctx context.Context, id string, j *worker.Job) ([]byte, error) {
		switch j.Key {
		case "ok":
			return []byte("result"), nil
		case "bad":
			return nil, worker.Permanent(errors.New("boom"))
		case "held":
			heldBy.Store(id)
			select {
			case <-release:
				return nil, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		case "later":
			if j.Attempt == 1 {
				return nil, worker.RetryAfter(time.Hour, errors.New("not yet"))
			}
		}
		return nil, nil
	}
	// Two workers of one pool: the coordinator releases to the pool, and the one running a job
	// says so.
	e.worker(worker.Config{ID: "w1", Concurrency: 2}, handler("w1"))
	e.worker(worker.Config{ID: "w2", Concurrency: 2}, handler("w2"))
	e.waitWorkers(2)
	before := time.Now()
	h := e.publish("ins", func(yield func(dispatcher.Job) bool) {
		for _, j := range []dispatcher.Job{
			{Key: "ok"}, {Key: "bad"}, {Key: "held"}, {Key: "later", MaxAttempts: 3}, {Key: "parked", Require: []string{"nobody"}},
		} {
			if !yield(j) {
				return
			}
		}
	})
	for _, k := range []string{"ok", "bad"} {
		if _, err := h.WaitKey(e.ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	byKey := func(group, key string) *dispatcher.JobInfo {
		t.Helper()
		info, err := e.d.JobByKey(e.ctx, group, key)
		if err != nil {
			t.Fatalf("job %s/%s: %v", group, key, err)
		}
		return info
	}
	testwait.For(t, 30*time.Second, "held running and later waiting for its retry", func() bool {
		return byKey("ins", "held").State == dispatcher.StateRunning && byKey("ins", "later").State == dispatcher.StateRetryWait
	})

	// While the group runs: the live state, from the coordinator.
	held := byKey("ins", "held")
	if held.Group != "ins" || held.Incarnation == 0 || held.Attempts != 1 || held.Worker != heldBy.Load() || !slices.Equal(held.Workers, []string{"w1", "w2"}) ||
		held.Pool != wire.PoolKey(nil) || held.PublishedAt.Before(before.Add(-time.Second)) || held.ReleasedAt.IsZero() ||
		held.StartedAt.Before(held.ReleasedAt.Add(-time.Second)) {
		t.Errorf("running job: %+v (run by %v)", held, heldBy.Load())
	}
	if byID, err := e.d.Job(e.ctx, held.ID); err != nil || byID.State != dispatcher.StateRunning || byID.Key != "held" {
		t.Errorf("running job by ID: %+v, %v", byID, err)
	}
	later := byKey("ins", "later")
	if later.Attempts != 1 || later.MaxAttempts != 3 || len(later.History) != 1 || later.History[0].Err != "not yet" ||
		!slices.Contains([]string{"w1", "w2"}, later.History[0].Worker) || time.Until(later.RetryAt) < 50*time.Minute || later.Worker != "" {
		t.Errorf("job waiting for its retry: %+v", later)
	}
	if parked := byKey("ins", "parked"); parked.State != dispatcher.StatePending || parked.Attempts != 0 {
		t.Errorf("parked job: %+v", parked)
	}
	if ok := byKey("ins", "ok"); ok.State != dispatcher.StateDone || string(ok.Result) != "result" || ok.EndedAt.IsZero() {
		t.Errorf("done job of a running group: %+v", ok)
	}
	if bad := byKey("ins", "bad"); bad.State != dispatcher.StateFailed || bad.Err != "boom" || bad.Attempts != 1 {
		t.Errorf("failed job of a running group: %+v", bad)
	}
	g, err := e.d.Group(e.ctx, "ins")
	if err != nil {
		t.Fatal(err)
	}
	wantJobs := map[dispatcher.State]int{"pending": 1, "running": 1, "retrywait": 1, "done": 1, "failed": 1, "canceled": 0, "delayed": 0}
	if g.State != dispatcher.GroupRunning || g.Admitted != 5 || g.InFlight != 1 || g.OpenedAt.IsZero() || g.Summary != nil || !mapsEqual(g.Jobs, wantJobs) {
		t.Errorf("running group: %+v", g)
	}
	groups, err := e.d.Groups(e.ctx)
	if err != nil || len(groups) != 1 || groups[0].ID != "ins" || groups[0].State != dispatcher.GroupRunning {
		t.Errorf("groups while one runs: %+v, %v", groups, err)
	}

	// A group whose jobs all succeed: its job messages are purged once it completes.
	clean := e.publish("clean", jobs(3, nil))
	e.wait(clean)

	// End the first group: held finishes, the rest is canceled.
	close(release)
	if _, err := h.WaitKey(e.ctx, "held"); err != nil {
		t.Fatal(err)
	}
	if err := h.Cancel(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.wait(h)
	// After it completed and the coordinator forgot it: the stored summary and outcomes.
	testwait.For(t, 30*time.Second, "both groups retained", func() bool {
		gs, err := e.d.Groups(e.ctx)
		return err == nil && len(gs) == 2 && gs[0].CompletedAt.After(before) && gs[1].CompletedAt.After(before)
	})
	g, err = e.d.Group(e.ctx, "ins")
	if err != nil {
		t.Fatal(err)
	}
	if g.State != dispatcher.GroupComplete || g.Summary == nil || *g.Summary != (dispatcher.Summary{Jobs: 5, Done: 2, Failed: 1, Canceled: 2}) || g.CompletedAt.IsZero() {
		t.Errorf("complete group: %+v (summary %+v)", g, g.Summary)
	}
	if held2 := byKey("ins", "held"); held2.ID != held.ID || held2.State != dispatcher.StateDone || held2.Incarnation != held.Incarnation || held2.Worker != "" {
		t.Errorf("held after its group completed: %+v", held2)
	}
	if l := byKey("ins", "later"); l.State != dispatcher.StateCanceled || len(l.History) != 1 {
		t.Errorf("later after its group was canceled: %+v", l)
	}
	// "clean"'s job messages are gone: its job is found from the outcomes alone.
	c1 := byKey("clean", "k1")
	if c1.State != dispatcher.StateDone || !c1.PublishedAt.IsZero() || c1.EndedAt.IsZero() {
		t.Errorf("job of a completed group without failures: %+v", c1)
	}
	if byID, err := e.d.Job(e.ctx, c1.ID); err != nil || byID.Group != "clean" || byID.Key != "k1" || byID.State != dispatcher.StateDone {
		t.Errorf("job of a completed group by ID: %+v, %v", byID, err)
	}
	gs, err := e.d.Groups(e.ctx)
	if err != nil || len(gs) != 2 || gs[0].ID != "ins" || gs[0].Summary == nil || gs[1].ID != "clean" || gs[1].Summary == nil || gs[1].Summary.Done != 3 {
		t.Errorf("groups after both completed (latest first): %+v, %v", gs, err)
	}

	// A second incarnation of "ins" (its failed job run again): the job with the key in the
	// latest incarnation wins.
	old := byKey("ins", "bad")
	rh, err := e.d.Redrive(e.ctx, "ins")
	if err != nil {
		t.Fatal(err)
	}
	e.wait(rh)
	if again := byKey("ins", "bad"); again.ID <= old.ID || again.Incarnation <= old.Incarnation || again.State != dispatcher.StateFailed {
		t.Errorf("key of a group run again: %+v, the first incarnation's %+v", again, old)
	}

	// Unknown jobs and groups; bad arguments.
	if _, err := e.d.Job(e.ctx, 1_000_000); !errors.Is(err, dispatcher.ErrJobNotFound) {
		t.Errorf("unknown job: %v", err)
	}
	if _, err := e.d.JobByKey(e.ctx, "ins", "nope"); !errors.Is(err, dispatcher.ErrJobNotFound) {
		t.Errorf("unknown key: %v", err)
	}
	if _, err := e.d.Group(e.ctx, "nope"); !errors.Is(err, dispatcher.ErrGroupNotFound) {
		t.Errorf("unknown group: %v", err)
	}
	if _, err := e.d.JobByKey(e.ctx, "", "k"); !errors.Is(err, dispatcher.ErrInvalidGroup) {
		t.Errorf("empty group: %v", err)
	}
	if _, err := e.d.JobByKey(e.ctx, "ins", ""); !errors.Is(err, dispatcher.ErrInvalidJob) {
		t.Errorf("empty key: %v", err)
	}
	// A malformed request on the wire gets the reason, and the coordinator keeps answering.
	names, _ := wire.NewNames(e.ns)
	for req, want := range map[string]string{
		`{"v":1`:                        "inspect request",
		`{"v":1}`:                       "name a job, a group, or ask for the groups",
		`{"v":1,"groups":true,"job":3}`: "takes no job or group",
		`{"v":2,"job":3}`:               "version 2",
		`{"v":1,"jobs":3}`:              "unknown field",
	} {
		m, err := e.nc.RequestWithContext(e.ctx, names.InspectSubject(), []byte(req))
		if err != nil {
			t.Fatal(err)
		}
		rep, err := wire.ParseInspectReply(m.Data)
		if err != nil || !strings.Contains(rep.Error, want) {
			t.Errorf("request %s: reply %+v, %v; want an error saying %q", req, rep, err, want)
		}
	}
	if _, err := e.d.Group(e.ctx, "ins"); err != nil {
		t.Errorf("after bad requests: %v", err)
	}
}

// TestInspectWithoutCoordinator: with no coordinator, what ended is still found in the streams;
// what has not ended says no coordinator answered.
func TestInspectWithoutCoordinator(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx, stop := context.WithCancel(e.ctx)
	c, err := coordinator.New(e.nc, coordinator.Config{Namespace: e.ns, Logger: testLogger("coordinator")})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	e.worker(worker.Config{Concurrency: 1}, func(context.Context, *worker.Job) ([]byte, error) { return []byte("r"), nil })
	e.wait(e.publish("g", jobs(2, nil)))
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	d, err := dispatcher.New(e.nc, dispatcher.Config{Namespace: e.ns, RequestTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	j, err := d.JobByKey(e.ctx, "g", "k1")
	if err != nil || j.State != dispatcher.StateDone || string(j.Result) != "r" {
		t.Errorf("ended job without a coordinator: %+v, %v", j, err)
	}
	if byID, err := d.Job(e.ctx, j.ID); err != nil || byID.Key != "k1" {
		t.Errorf("ended job by ID without a coordinator: %+v, %v", byID, err)
	}
	if g, err := d.Group(e.ctx, "g"); err != nil || g.State != dispatcher.GroupComplete || g.Summary.Done != 2 {
		t.Errorf("complete group without a coordinator: %+v, %v", g, err)
	}
	pending := e.publish("p", jobs(1, nil))
	if _, err := d.Job(e.ctx, pending.FirstID()); !errors.Is(err, dispatcher.ErrNoCoordinator) {
		t.Errorf("pending job without a coordinator: %v", err)
	}
	if _, err := d.Group(e.ctx, "p"); !errors.Is(err, dispatcher.ErrNoCoordinator) {
		t.Errorf("running group without a coordinator: %v", err)
	}
	if _, err := d.Groups(e.ctx); !errors.Is(err, dispatcher.ErrNoCoordinator) {
		t.Errorf("groups without a coordinator: %v", err)
	}
}

// TestStatusListsStandbys: a second coordinator of the namespace waits for the lease and
// announces itself; the active one lists it in its status, and forgets it once it stops.
func TestStatusListsStandbys(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.coordinator(coordinator.Config{})
	testwait.For(t, 30*time.Second, "the coordinator to answer", func() bool {
		_, err := coordinator.QueryStatus(e.ctx, e.nc, e.ns)
		return err == nil
	})
	standby, err := coordinator.New(e.nc, coordinator.Config{Namespace: e.ns, Logger: testLogger("standby")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- standby.Run(ctx) }()
	standbys := func() []coordinator.StandbyStatus {
		st, err := coordinator.QueryStatus(e.ctx, e.nc, e.ns)
		if err != nil {
			t.Fatal(err)
		}
		return st.Standbys
	}
	testwait.For(t, 10*time.Second, "the standby to be listed", func() bool { return len(standbys()) == 1 })
	if sb := standbys()[0]; sb.Holder == "" || sb.Since.IsZero() {
		t.Errorf("standby: %+v", sb)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "the stopped standby to be forgotten", func() bool { return len(standbys()) == 0 })
}

func mapsEqual[K comparable, V comparable](a, b map[K]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
