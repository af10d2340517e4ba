package integration_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/internal/testwait"
	"github.com/weavejobs/weave/internal/wire"
	"github.com/weavejobs/weave/worker"
)

// stoppableCoordinator runs a coordinator in this process until stop (or the test's end).
func (e *env) stoppableCoordinator() (stop func()) {
	c, err := coordinator.New(e.nc, coordinator.Config{Namespace: e.ns, Logger: testLogger("coordinator")})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var stopped atomic.Bool
	stop = func() {
		if stopped.Swap(true) {
			return
		}
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			e.t.Errorf("coordinator: %v", err)
		}
	}
	e.t.Cleanup(stop)
	return stop
}

// redriveWorker runs jobs: those with payload "fail" fail permanently while failing is set;
// every job waits at hold while holding is set.
type redriveWorker struct {
	failing, holding atomic.Bool
	hold             *gate
	runs             atomic.Int64
}

func (e *env) redriveWorker() *redriveWorker {
	w := &redriveWorker{hold: newGate()}
	w.failing.Store(true)
	e.worker(worker.Config{Concurrency: 4}, func(ctx context.Context, j *worker.Job) ([]byte, error) {
		w.runs.Add(1)
		if w.holding.Load() {
			if err := w.hold.wait(ctx); err != nil {
				return nil, err
			}
		}
		if string(j.Payload) == "fail" && w.failing.Load() {
			return nil, worker.Permanent(errors.New("broken"))
		}
		return []byte("ok " + j.Key), nil
	})
	return w
}

// failedGroup publishes group g with n jobs, the first `failing` of them failing, and waits for
// its summary. It returns the IDs of the failed and of the done jobs, and the failed jobs' keys
// by ID.
func (e *env) failedGroup(group string, n, failing int) (failed, done []uint64, keys map[uint64]string) {
	e.t.Helper()
	res := e.waitFor(e.publish(group, jobs(n, func(i int, j *dispatcher.Job) {
		if i < failing {
			j.Payload = []byte("fail")
		}
	})))
	keys = map[uint64]string{}
	for _, o := range res.Jobs {
		if o.State == dispatcher.StateFailed {
			failed = append(failed, o.ID)
			keys[o.ID] = o.Key
		} else {
			done = append(done, o.ID)
		}
	}
	if len(failed) != failing {
		e.t.Fatalf("group %s: %d failed, want %d", group, len(failed), failing)
	}
	return failed, done, keys
}

// TestRedriveDecidedByCoordinator: the coordinator decides every redrive and answers it. A
// complete group's failed jobs run again as a new incarnation whose Handle Wait follows; a
// redrive while that incarnation runs is refused with it (ErrGroupRunning and a Handle on it);
// specific IDs are checked against the failed ones; a job failed in an earlier incarnation stays
// failed until a redrive of it succeeds; nothing to redrive is ErrNotFailed.
func TestRedriveDecidedByCoordinator(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.coordinator(coordinator.Config{})
	w := e.redriveWorker()
	failed, done, keys := e.failedGroup("g", 4, 2)

	for _, bad := range [][]uint64{{done[0]}, {failed[0], 999999}} {
		h, err := e.d.Redrive(e.ctx, "g", bad...)
		if !errors.Is(err, dispatcher.ErrNotFailed) || h != nil || !containsText([]string{err.Error()}, strconv.FormatUint(bad[len(bad)-1], 10)) {
			t.Fatalf("Redrive(%v) = %v, %v; want ErrNotFailed naming %d", bad, h, err, bad[len(bad)-1])
		}
	}
	for _, g := range []string{"never-published", "clean"} {
		if g == "clean" {
			_, _, _ = e.failedGroup(g, 2, 0)
		}
		if _, err := e.d.Redrive(e.ctx, g); !errors.Is(err, dispatcher.ErrNotFailed) {
			t.Fatalf("Redrive(%s) = %v, want ErrNotFailed", g, err)
		}
	}

	// Only the second failed job, held while it runs.
	w.failing.Store(false)
	w.holding.Store(true)
	h, err := e.d.Redrive(e.ctx, "g", failed[1])
	if err != nil || h.Accepted() != 1 {
		t.Fatalf("Redrive of one job = %v, %v", h, err)
	}
	testwait.For(t, 30*time.Second, "the redriven job to start", func() bool { return w.hold.started.Load() == 1 })
	running, err := e.d.Redrive(e.ctx, "g")
	if !errors.Is(err, dispatcher.ErrGroupRunning) || running == nil {
		t.Fatalf("Redrive while the new incarnation runs = %v, %v; want ErrGroupRunning with a Handle", running, err)
	}
	w.hold.release()
	res := e.waitFor(h)
	if res.Summary != (dispatcher.Summary{Jobs: 1, Done: 1}) || len(res.Jobs) != 1 || res.Jobs[0].Key != keys[failed[1]] || string(res.Jobs[0].Result) != "ok "+keys[failed[1]] {
		t.Fatalf("the redrive's incarnation: %+v, %+v", res.Summary, res.Jobs)
	}
	if again := e.waitFor(running); again.Summary != res.Summary || again.Jobs[0].ID != res.Jobs[0].ID {
		t.Fatalf("the Handle of the refusal waits for %+v, want the redrive's incarnation", again.Summary)
	}
	// The latest complete incarnation has no failed job, but the first failed job of the first
	// is still failed: it runs again, alone. Then none is left.
	w.holding.Store(false)
	h, err = e.d.Redrive(e.ctx, "g")
	if err != nil || h.Accepted() != 1 {
		t.Fatalf("Redrive of the job still failed in an earlier incarnation = %v, %v", h, err)
	}
	if res := e.waitFor(h); res.Summary != (dispatcher.Summary{Jobs: 1, Done: 1}) || res.Jobs[0].Key != keys[failed[0]] {
		t.Fatalf("the second redrive's incarnation: %+v, %+v", res.Summary, res.Jobs)
	}
	if _, err := e.d.Redrive(e.ctx, "g"); !errors.Is(err, dispatcher.ErrNotFailed) {
		t.Fatalf("Redrive once every failed job ran again and succeeded = %v, want ErrNotFailed", err)
	}
	if n := w.runs.Load(); n != 4+2+1+1 {
		t.Fatalf("%d runs, want 8 (g, clean, each redriven job once)", n)
	}
}

// TestRedriveStoredWithoutCoordinator: a redrive asked while no coordinator runs is stored
// (ErrNoAnswer) and carried out, once, by the coordinator that starts next.
func TestRedriveStoredWithoutCoordinator(t *testing.T) {
	t.Parallel()
	e := setup(t)
	stop := e.stoppableCoordinator()
	w := e.redriveWorker()
	failed, _, _ := e.failedGroup("g", 3, 2)
	stop()

	d, err := dispatcher.New(e.nc, dispatcher.Config{Namespace: e.ns, RequestTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if h, err := d.Redrive(e.ctx, "g"); !errors.Is(err, dispatcher.ErrNoAnswer) || h != nil {
		t.Fatalf("Redrive without a coordinator = %v, %v; want ErrNoAnswer", h, err)
	}
	w.failing.Store(false)
	w.holding.Store(true)
	e.stoppableCoordinator()
	testwait.For(t, 30*time.Second, "the stored redrive's jobs to start", func() bool { return w.hold.started.Load() == 2 })
	h, err := e.d.Redrive(e.ctx, "g")
	if !errors.Is(err, dispatcher.ErrGroupRunning) || h == nil {
		t.Fatalf("Redrive while the stored one runs = %v, %v; want ErrGroupRunning with a Handle", h, err)
	}
	w.hold.release()
	res := e.waitFor(h)
	if res.Summary != (dispatcher.Summary{Jobs: 2, Done: 2}) || len(res.Jobs) != 2 {
		t.Fatalf("the stored redrive's incarnation: %+v, %d outcomes", res.Summary, len(res.Jobs))
	}
	for _, o := range res.Jobs {
		if o.ID == failed[0] || o.ID == failed[1] || (o.Key != "k0" && o.Key != "k1") {
			t.Errorf("outcome %+v: want a new ID and the failed job's key", o)
		}
	}
	if n := w.hold.started.Load(); n != 2 {
		t.Fatalf("%d redriven runs, want 2", n)
	}
}

// TestRedriveResumedAfterCoordinatorReplaced: a coordinator stopped in the middle of publishing a
// redrive (its open and one of two jobs stored, no seal) is replaced; the next one publishes the
// missing job and the seal, and every job runs exactly once.
func TestRedriveResumedAfterCoordinatorReplaced(t *testing.T) {
	t.Parallel()
	e := setup(t)
	stop := e.stoppableCoordinator()
	w := e.redriveWorker()
	failed, _, keys := e.failedGroup("g", 3, 2)
	stop()

	// What the stopped coordinator had stored: the request, its open and the first job.
	names, _ := wire.NewNames(e.ns)
	js, err := e.nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	tok := names.GroupSubject(wire.GroupToken("g"))
	put := func(subject string, h nats.Header, data []byte) uint64 {
		t.Helper()
		ack, err := js.PublishMsg(&nats.Msg{Subject: subject, Header: h, Data: data})
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
	req := put(tok, wire.GroupControl{Group: "g", Op: wire.OpRedrive, Reply: "gone"}.Header(), nil)
	key := e.releaseKey()
	openSeq := put(tok, wire.GroupControl{Group: "g", Op: wire.OpOpen, Redrive: req, Proof: key.RedriveProof("g", req)}.Header(), nil)
	first := nats.Header(wire.JobMeta{Group: "g", Key: keys[failed[0]]}.Header())
	first.Set(wire.HdrRedriveOf, strconv.FormatUint(failed[0], 10))
	first.Set(wire.HdrProof, key.RedriveJobProof("g", openSeq, failed[0]))
	first.Set(wire.HdrMsgID, "redrive:"+strconv.FormatUint(req, 10)+"/"+strconv.FormatUint(failed[0], 10))
	put(names.JobSubject(wire.GroupToken("g")), first, []byte("fail"))

	w.failing.Store(false)
	w.holding.Store(true)
	e.stoppableCoordinator()
	testwait.For(t, 30*time.Second, "both redriven jobs to start", func() bool { return w.hold.started.Load() == 2 })
	h, err := e.d.Redrive(e.ctx, "g")
	if !errors.Is(err, dispatcher.ErrGroupRunning) || h == nil || !containsText([]string{err.Error()}, strconv.FormatUint(openSeq, 10)) {
		t.Fatalf("Redrive while the resumed one runs = %v, %v; want ErrGroupRunning naming incarnation %d", h, err, openSeq)
	}
	w.hold.release()
	res := e.waitFor(h)
	if res.Summary != (dispatcher.Summary{Jobs: 2, Done: 2}) || len(res.Jobs) != 2 || res.Jobs[0].Key == res.Jobs[1].Key {
		t.Fatalf("the resumed redrive's incarnation: %+v, %+v", res.Summary, res.Jobs)
	}
	if n := w.hold.started.Load(); n != 2 {
		t.Fatalf("%d redriven runs, want 2", n)
	}
}

// TestRedriveKeepsWeight: the incarnation a redrive opens has the weight and priority of the one
// whose failed jobs it runs again, so the redriven jobs keep their group's share and place.
func TestRedriveKeepsWeight(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.coordinator(coordinator.Config{})
	w := e.redriveWorker()
	h, err := e.d.Publish(e.ctx, "heavy", jobs(2, func(i int, j *dispatcher.Job) {
		if i == 0 {
			j.Payload = []byte("fail")
		}
	}), dispatcher.Weight(3), dispatcher.Priority(6))
	if err != nil {
		t.Fatal(err)
	}
	if res := e.waitFor(h); res.Summary.Failed != 1 {
		t.Fatalf("first incarnation: %+v, want one failed job", res.Summary)
	}
	// The redriven job is held while it runs: a clean incarnation purges the group's messages
	// once complete.
	w.failing.Store(false)
	w.holding.Store(true)
	h, err = e.d.Redrive(e.ctx, "heavy")
	if err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 30*time.Second, "the redriven job to start", func() bool { return w.hold.started.Load() == 1 })

	names, _ := wire.NewNames(e.ns)
	s := e.jobsStream()
	var weights, priorities []int
	for seq := uint64(1); seq <= s.CachedInfo().State.LastSeq; seq++ {
		m, err := s.GetMsg(e.ctx, seq)
		if err != nil || m.Subject != names.GroupSubject("heavy") {
			continue
		}
		if c, err := wire.ParseGroupControl(m.Header); err == nil && c.Op == wire.OpOpen {
			weights, priorities = append(weights, c.Weight), append(priorities, c.Priority)
		}
	}
	if !slices.Equal(weights, []int{3, 3}) || !slices.Equal(priorities, []int{6, 6}) {
		t.Fatalf("weights %v and priorities %v of the group's opens, want [3 3] and [6 6] (the publish's and the redrive's)", weights, priorities)
	}
	w.hold.release()
	if res := e.waitFor(h); res.Summary != (dispatcher.Summary{Jobs: 1, Done: 1}) {
		t.Fatalf("redriven incarnation: %+v", res.Summary)
	}
}
