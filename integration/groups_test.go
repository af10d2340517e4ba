package integration_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/internal/testwait"
	"github.com/weavejobs/weave/internal/wire"
	"github.com/weavejobs/weave/worker"
)

// gate holds the handlers that wait on it until it is released; later waits hold again.
type gate struct {
	mu      sync.Mutex
	open    chan struct{} // guarded by mu: release replaces it
	started atomic.Int64
}

func newGate() *gate { return &gate{open: make(chan struct{})} }

func (g *gate) wait(ctx context.Context) error {
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	g.started.Add(1)
	select {
	case <-open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	close(g.open)
	g.open = make(chan struct{}) // later holds wait again
}

// TestIncarnationsSurviveCoordinatorKill, end to end: group g ends with
// a failed job; a redrive starts a second incarnation and a re-publish of the ID a third; each
// time the coordinator is SIGKILLed and started again while the new incarnation runs. Every
// incarnation's Wait returns every outcome, and a later redrive still finds what failed, in
// whichever incarnation it failed.
func TestIncarnationsSurviveCoordinatorKill(t *testing.T) {
	t.Parallel()
	e := setup(t)
	coord := e.startChildCoordinator()
	hold := newGate()
	var failing atomic.Bool
	failing.Store(true)
	e.worker(worker.Config{Concurrency: 4}, func(ctx context.Context, j *worker.Job) ([]byte, error) {
		switch string(j.Payload) {
		case "flaky":
			if failing.Load() {
				return nil, worker.Permanent(errors.New("still broken"))
			}
		case "hold":
			if err := hold.wait(ctx); err != nil {
				return nil, err
			}
		}
		return []byte("ok " + j.Key), nil
	})
	restart := func() {
		t.Helper()
		if err := coord.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = coord.Wait()
		coord = e.startChildCoordinator()
	}

	// Incarnation 1: four jobs, one fails.
	first := e.waitFor(e.publish("g", jobs(4, func(i int, j *dispatcher.Job) {
		if i == 3 {
			j.Payload = []byte("flaky")
		}
	})))
	if first.Summary.Done != 3 || first.Summary.Failed != 1 {
		t.Fatalf("first incarnation: %+v", first.Summary)
	}

	// Incarnation 2: the redrive of the failed job, which fails again. The coordinator is
	// killed as soon as the redrive is published: its open, job and seal, perhaps its outcome.
	h2, err := e.d.Redrive(e.ctx, "g")
	if err != nil {
		t.Fatalf("redrive: %v", err)
	}
	restart()
	second := e.waitFor(h2)
	if second.Summary.Jobs != 1 || second.Summary.Failed != 1 {
		t.Fatalf("second incarnation (redrive): %+v", second.Summary)
	}

	// Incarnation 3: a re-publish of the ID with new keys, held while the coordinator is killed.
	h3 := e.publish("g", jobs(3, func(i int, j *dispatcher.Job) {
		j.Key, j.Payload = fmt.Sprint("again-", i), []byte("hold")
	}))
	testwait.For(t, 30*time.Second, "the third incarnation's jobs to start", func() bool { return hold.started.Load() == 3 })
	restart()
	hold.release()
	third := e.waitFor(h3)
	if third.Summary.Done != 3 || len(third.Jobs) != 3 {
		t.Fatalf("third incarnation: %+v, %d outcomes", third.Summary, len(third.Jobs))
	}
	for _, o := range third.Jobs {
		if o.State != dispatcher.StateDone || !strings.HasPrefix(o.Key, "again-") || string(o.Result) != "ok "+o.Key {
			t.Errorf("third incarnation's outcome %+v", o)
		}
	}

	// The latest finished incarnation is the third, which has no failed job; the second's is
	// still failed, and its message was kept through the third's completion and the restarts:
	// it runs again. Then nothing is left to redrive.
	failing.Store(false)
	h4, err := e.d.Redrive(e.ctx, "g")
	if err != nil || h4.Accepted() != 1 {
		t.Fatalf("redrive of the job still failed in the second incarnation: %v, %v", h4, err)
	}
	if fourth := e.waitFor(h4); fourth.Summary.Done != 1 || fourth.Jobs[0].Key != second.Jobs[0].Key {
		t.Fatalf("fourth incarnation (redrive): %+v, %+v", fourth.Summary, fourth.Jobs)
	}
	if _, err := e.d.Redrive(e.ctx, "g"); !errors.Is(err, dispatcher.ErrNotFailed) {
		t.Fatalf("redrive once every failed job succeeded: %v, want ErrNotFailed", err)
	}
}

// TestRedriveSurvivesCoordinatorKill: a redrive whose job is running when the coordinator is
// SIGKILLed completes after the restart, and a later redrive of a failed one still works.
func TestRedriveSurvivesCoordinatorKill(t *testing.T) {
	t.Parallel()
	e := setup(t)
	coord := e.startChildCoordinator()
	hold := newGate()
	var failing atomic.Bool
	failing.Store(true)
	e.worker(worker.Config{Concurrency: 2}, func(ctx context.Context, j *worker.Job) ([]byte, error) {
		if failing.Load() {
			return nil, worker.Permanent(errors.New("broken"))
		}
		if err := hold.wait(ctx); err != nil {
			return nil, err
		}
		return []byte("fixed"), nil
	})
	first := e.waitFor(e.publish("r", jobs(2, nil)))
	if first.Summary.Failed != 2 {
		t.Fatalf("first incarnation: %+v", first.Summary)
	}
	failing.Store(false)
	h, err := e.d.Redrive(e.ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 30*time.Second, "the redriven jobs to start", func() bool { return hold.started.Load() == 2 })
	if err := coord.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = coord.Wait()
	e.startChildCoordinator()
	hold.release()
	res := e.waitFor(h)
	if res.Summary.Done != 2 || len(res.Jobs) != 2 {
		t.Fatalf("redrive after the restart: %+v, %d outcomes", res.Summary, len(res.Jobs))
	}
	for _, o := range res.Jobs {
		if o.Key == "" || string(o.Result) != "fixed" {
			t.Errorf("outcome %+v: want its key and result", o)
		}
	}
}

// publishRaw publishes a group control message or a job as any NATS client would.
func (e *env) publishRaw(subject string, h nats.Header, data []byte) {
	e.t.Helper()
	js, err := e.nc.JetStream()
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := js.PublishMsg(&nats.Msg{Subject: subject, Header: h, Data: data}); err != nil {
		e.t.Fatalf("publish on %s: %v", subject, err)
	}
}

func (e *env) openRaw(group string) {
	e.t.Helper()
	names, _ := wire.NewNames(e.ns)
	e.publishRaw(names.GroupSubject(wire.GroupToken(group)), wire.GroupControl{Group: group, Op: wire.OpOpen}.Header(), nil)
}

func (e *env) jobRaw(group, key string) {
	e.t.Helper()
	names, _ := wire.NewNames(e.ns)
	e.publishRaw(names.JobSubject(wire.GroupToken(group)), wire.JobMeta{Group: group, Key: key}.Header(), []byte(key))
}

// TestUnsealedGroupsDoNotBlock: 1,000 groups opened and never sealed (producers that died after
// open) do not hold the feeder slots: a normal group of 50 jobs published after them finishes,
// and status shows the 1,000 with their age.
func TestUnsealedGroupsDoNotBlock(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.coordinator(coordinator.Config{})
	e.worker(worker.Config{Concurrency: 4}, func(context.Context, *worker.Job) ([]byte, error) { return nil, nil })
	const stalled = 1000
	for i := range stalled {
		e.openRaw(fmt.Sprint("stalled-", i))
	}
	e.jobRaw("stalled-0", "only") // one of them even has a job, which runs
	res := e.waitFor(e.publish("normal", jobs(50, nil)))
	if res.Summary.Done != 50 {
		t.Fatalf("normal group behind %d unsealed ones: %+v", stalled, res.Summary)
	}
	var st *coordinator.Status
	testwait.For(t, 30*time.Second, "status to show the unsealed groups", func() bool {
		var err error
		st, err = coordinator.QueryStatus(e.ctx, e.nc, e.ns)
		// (Finished groups leave the index, so "done" counts here would race with the normal
		// group being forgotten: only the unsealed groups are checked.)
		return err == nil && st.Unsealed == stalled
	})
	if len(st.Groups) == 0 || st.Groups[0].Sealed || st.Groups[0].OpenedAt.IsZero() || st.Groups[0].LastHeard.IsZero() {
		t.Fatalf("first listed group %+v: want an unsealed group with its open and last-heard times", st.Groups[0])
	}
}

// TestAbandonedGroupIsSealed: a group whose producer published an open and two jobs and then
// went silent is sealed by the coordinator after AbandonAfter; its jobs run, its Wait returns,
// and its summary says it was abandoned. Cancel ends an unsealed group too.
func TestAbandonedGroupIsSealed(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.coordinator(coordinator.Config{AbandonAfter: time.Second})
	e.worker(worker.Config{Concurrency: 2}, func(context.Context, *worker.Job) ([]byte, error) { return []byte("ok"), nil })
	e.openRaw("silent")
	e.jobRaw("silent", "a")
	e.jobRaw("silent", "b")
	res := e.waitFor(e.d.Attach("silent"))
	if !res.Summary.Abandoned || res.Summary.Done != 2 || len(res.Jobs) != 2 {
		t.Fatalf("abandoned group: %+v, %d outcomes", res.Summary, len(res.Jobs))
	}

	// Cancel of a group nobody seals: it ends at once, not after AbandonAfter.
	e.openRaw("doomed")
	h := e.d.Attach("doomed")
	if err := h.Cancel(e.ctx); err != nil {
		t.Fatal(err)
	}
	res = e.waitFor(h)
	if res.Summary.Abandoned || res.Summary.Jobs != 0 {
		t.Fatalf("canceled unsealed group: %+v", res.Summary)
	}
}

// TestKeepAliveHoldsSlowProducer: a producer that waits longer than AbandonAfter between two
// jobs is not cut off while Publish runs: the dispatcher's keep-alives hold the group open.
func TestKeepAliveHoldsSlowProducer(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const abandonAfter = time.Second
	e.coordinator(coordinator.Config{AbandonAfter: abandonAfter})
	e.worker(worker.Config{Concurrency: 2}, func(context.Context, *worker.Job) ([]byte, error) { return []byte("ok"), nil })
	d, err := dispatcher.New(e.nc, dispatcher.Config{Namespace: e.ns, KeepAlive: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	names, _ := wire.NewNames(e.ns)
	keepAlives := make(chan struct{}, 100)
	sub, err := e.nc.Subscribe(names.GroupSubject("slow"), func(m *nats.Msg) {
		if m.Header.Get(wire.HdrOp) == string(wire.OpKeepAlive) {
			select {
			case keepAlives <- struct{}{}:
			default:
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	slow := func(yield func(dispatcher.Job) bool) {
		if !yield(dispatcher.Job{Key: "first", Payload: []byte("1")}) {
			return
		}
		// Silent for more than twice AbandonAfter, counted in keep-alives seen.
		since := time.Now()
		for time.Since(since) < 2*abandonAfter+abandonAfter/2 {
			select {
			case <-keepAlives:
			case <-e.ctx.Done():
				return
			}
		}
		yield(dispatcher.Job{Key: "second", Payload: []byte("2")})
	}
	h, err := d.Publish(e.ctx, "slow", slow)
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	res := e.waitFor(h)
	if res.Summary.Abandoned || res.Summary.Done != 2 {
		t.Fatalf("slow producer's group: %+v", res.Summary)
	}
}

// TestResumedPublishWaits: a producer that died mid-publish (its open and some jobs stored, no
// seal) publishes the group again, as Publish's doc invites. The coordinator resumes the open
// group, so its outcomes carry the first open's incarnation; the second Publish's Handle still
// finds them, and Wait returns every job (the chaos run found it waiting for ever).
func TestResumedPublishWaits(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.coordinator(coordinator.Config{})
	e.worker(worker.Config{Concurrency: 2}, func(_ context.Context, j *worker.Job) ([]byte, error) { return []byte(j.Key), nil })
	e.openRaw("resumed")
	e.jobRaw("resumed", "k0")
	e.jobRaw("resumed", "k1")
	h := e.publish("resumed", jobs(4, nil)) // k0..k3: k0 and k1 are duplicates
	if h.Duplicates() != 2 || h.Accepted() != 2 {
		t.Fatalf("second publish: %d accepted, %d duplicates; want 2 and 2", h.Accepted(), h.Duplicates())
	}
	res := e.waitFor(h)
	if res.Summary.Done != 4 || len(res.Jobs) != 4 {
		t.Fatalf("resumed group: %+v, %d outcomes", res.Summary, len(res.Jobs))
	}
	if o, err := h.WaitKey(e.ctx, "k0"); err != nil || string(o.Result) != "k0" {
		t.Fatalf("WaitKey(k0) on the resumed handle: %+v, %v", o, err)
	}
	// A later incarnation of the ID is its own again.
	h2 := e.publish("resumed", jobs(1, func(_ int, j *dispatcher.Job) { j.Key = "next" }))
	if res := e.waitFor(h2); res.Summary.Jobs != 1 || res.Jobs[0].Key != "next" {
		t.Fatalf("next incarnation: %+v", res)
	}
}
