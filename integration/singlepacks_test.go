package integration_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/internal/testwait"
	"github.com/weavejobs/weave/internal/wire"
	"github.com/weavejobs/weave/worker"
)

// singles returns n keyless single jobs of groups prefix0..prefix<n-1>, payload "fail" for the
// indexes in failing.
func singles(prefix string, n int, failing ...int) []dispatcher.Single {
	jobs := make([]dispatcher.Single, n)
	for i := range jobs {
		jobs[i] = dispatcher.Single{Group: fmt.Sprint(prefix, i), Job: dispatcher.Job{Payload: []byte(strconv.Itoa(i))}}
	}
	for _, i := range failing {
		jobs[i].Job.Payload = []byte("fail")
	}
	return jobs
}

// singleJobsDone submits a single job alone (group prefix+"alone") and three in a pack (groups
// prefix0 to prefix2), waits until each is done, and returns them, the one alone last.
func (e *env) singleJobsDone(prefix string) []dispatcher.Submitted {
	e.t.Helper()
	h, id, err := e.d.Submit(e.ctx, prefix+"alone", dispatcher.Job{Payload: []byte("a")})
	if err != nil {
		e.t.Fatal(err)
	}
	subs, err := e.d.SubmitMany(e.ctx, singles(prefix, 3))
	if err != nil || len(subs) != 3 || !wire.IsPacked(subs[0].ID) {
		e.t.Fatalf("SubmitMany: %+v, %v", subs, err)
	}
	subs = append(subs, dispatcher.Submitted{Handle: h, ID: id})
	for _, s := range subs {
		if out, err := s.Handle.WaitJob(e.ctx, s.ID); err != nil || out.State != dispatcher.StateDone {
			e.t.Fatalf("single job of %s: %+v, %v", s.Handle.GroupID(), out, err)
		}
	}
	return subs
}

// TestSinglePacks: single jobs without a key submitted together travel in packs of 32, one
// stored message each, and each is still its own group: it runs, its outcome reaches WaitJob,
// a priority is its group's, and a pack's message is deleted only once every job in it is done
// with it. A failed job keeps its pack's message (its payload) until it is redriven and its
// retention passes; its redrive runs it again as its group's new incarnation.
func TestSinglePacks(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.coordinator(coordinator.Config{TrimInterval: 100 * time.Millisecond, Streams: coordinator.StreamOptions{ResultRetention: 5 * time.Second}})
	w := e.redriveWorker()

	jobs := singles("sp-", 100, 7)
	jobs[40].Job.Priority = 3
	before := e.jobsState().Msgs
	subs, err := e.d.SubmitMany(e.ctx, jobs)
	if err != nil || len(subs) != len(jobs) {
		t.Fatalf("SubmitMany: %d submitted, %v", len(subs), err)
	}
	if stored := e.jobsState().Msgs - before; stored > 4 {
		t.Errorf("100 single jobs stored in %d messages, want 4 packs at most", stored)
	}
	for i, s := range subs {
		if !wire.IsPacked(s.ID) || s.Handle.GroupID() != jobs[i].Group || s.Handle.Accepted() != 1 {
			t.Fatalf("job %d: ID %d (packed %v), group %q, accepted %d", i, s.ID, wire.IsPacked(s.ID), s.Handle.GroupID(), s.Handle.Accepted())
		}
		if i > 0 && wire.JobSeq(s.ID) == wire.JobSeq(subs[i-1].ID) && s.ID != subs[i-1].ID+1 {
			t.Fatalf("jobs %d and %d of one pack: IDs %d and %d", i-1, i, subs[i-1].ID, s.ID)
		}
	}
	// Submitted again (as after a failed SubmitMany), each pack is a duplicate of the first.
	again, err := e.d.SubmitMany(e.ctx, jobs)
	if err != nil || len(again) != len(jobs) {
		t.Fatalf("SubmitMany again: %d submitted, %v", len(again), err)
	}
	for i, s := range again {
		if s.ID != subs[i].ID || s.Handle.Duplicates() != 1 {
			t.Fatalf("job %d submitted again: ID %d (first %d), %d duplicates", i, s.ID, subs[i].ID, s.Handle.Duplicates())
		}
	}
	if stored := e.jobsState().Msgs - before; stored > 4 {
		t.Errorf("the same 100 single jobs submitted twice stored in %d messages", stored)
	}
	for i, s := range subs {
		out, err := s.Handle.WaitJob(e.ctx, s.ID)
		want := dispatcher.StateDone
		if i == 7 {
			want = dispatcher.StateFailed
		}
		if err != nil || out.State != want || out.ID != s.ID || out.Group != jobs[i].Group {
			t.Fatalf("job %d: %+v, %v; want %s", i, out, err, want)
		}
	}
	// Every pack but the failed job's is deleted once its jobs are done.
	testwait.For(t, 30*time.Second, "JOBS to keep only the failed job's pack", func() bool { return e.jobsState().Msgs == before+1 })
	info, err := e.d.Job(e.ctx, subs[7].ID)
	if err != nil || info.Group != "sp-7" {
		t.Fatalf("inspection of the failed packed job: %+v, %v", info, err)
	}

	w.failing.Store(false)
	h, err := e.d.Redrive(e.ctx, "sp-7")
	if err != nil {
		t.Fatal(err)
	}
	if res := e.waitFor(h); res.Summary != (dispatcher.Summary{Jobs: 1, Done: 1}) {
		t.Fatalf("redriven packed job: %+v", res.Summary)
	}
	// Its retention over, the failed incarnation's share of the pack goes, and the pack with it.
	testwait.For(t, 30*time.Second, "JOBS to be empty", func() bool { return e.jobsState().Msgs == before })
	if n := w.runs.Load(); n != 101 {
		t.Errorf("%d runs, want 101 (100 jobs, one redriven)", n)
	}
}

// TestSinglePacksSurviveCoordinatorRestart: packs of single jobs admitted, some running, when the
// coordinator stops; the next one replays them: every job runs to its outcome once, and the
// packs are deleted once their jobs are done.
func TestSinglePacksSurviveCoordinatorRestart(t *testing.T) {
	t.Parallel()
	e := setup(t)
	stop := e.stoppableCoordinator()
	hold := newGate()
	var (
		runs    atomic.Int64
		holding atomic.Bool
	)
	holding.Store(true)
	e.worker(worker.Config{Concurrency: 4}, func(ctx context.Context, j *worker.Job) ([]byte, error) {
		runs.Add(1)
		if holding.Load() {
			if err := hold.wait(ctx); err != nil {
				return nil, err
			}
		}
		return j.Payload, nil
	})
	before := e.jobsState().Msgs
	subs, err := e.d.SubmitMany(e.ctx, singles("rs-", 70))
	if err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 30*time.Second, "four jobs to start", func() bool { return hold.started.Load() >= 4 })
	stop()
	e.coordinator(coordinator.Config{})
	holding.Store(false)
	hold.release()
	for i, s := range subs {
		out, err := s.Handle.WaitJob(e.ctx, s.ID)
		if err != nil || out.State != dispatcher.StateDone || string(out.Result) != strconv.Itoa(i) {
			t.Fatalf("job %d: %+v, %v", i, out, err)
		}
	}
	testwait.For(t, 30*time.Second, "JOBS to be empty", func() bool { return e.jobsState().Msgs == before })
	if n := runs.Load(); n != 70 {
		t.Errorf("%d runs of 70 jobs", n)
	}
}

// TestSinglePackRefusesRunningGroup: a job of a pack whose group ID runs already is refused
// alone, recorded in NS_REJECTED under its pack's sequence and its own ID; the pack's other jobs
// run, and the pack is deleted once they and the refusal are done.
func TestSinglePackRefusesRunningGroup(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.coordinator(coordinator.Config{})
	hold := newGate()
	e.worker(worker.Config{Concurrency: 4}, func(ctx context.Context, j *worker.Job) ([]byte, error) {
		if string(j.Payload) == "busy" {
			if err := hold.wait(ctx); err != nil {
				return nil, err
			}
		}
		return nil, nil
	})
	before := e.jobsState().Msgs
	busy, busyID, err := e.d.Submit(e.ctx, "busy", dispatcher.Job{Payload: []byte("busy")})
	if err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 30*time.Second, "the busy job to start", func() bool { return hold.started.Load() == 1 })
	js, _ := jetstream.New(e.nc)
	names, _ := wire.NewNames(e.ns)
	rr := newRejectionReader(t, e.ctx, js, names)

	jobs := []dispatcher.Single{{Group: "free-1"}, {Group: "busy", Job: dispatcher.Job{Payload: []byte("again")}}, {Group: "free-2"}}
	subs, err := e.d.SubmitMany(e.ctx, jobs)
	if err != nil || len(subs) != 3 || !wire.IsPacked(subs[1].ID) {
		t.Fatalf("SubmitMany: %+v, %v", subs, err)
	}
	for _, i := range []int{0, 2} {
		if out, err := subs[i].Handle.WaitJob(e.ctx, subs[i].ID); err != nil || out.State != dispatcher.StateDone {
			t.Fatalf("job %d: %+v, %v", i, out, err)
		}
	}
	var got []rejection
	testwait.For(t, 30*time.Second, "the refusal to be recorded", func() bool { got = append(got, rr.next()...); return len(got) > 0 })
	wantSeq := strconv.FormatUint(wire.JobSeq(subs[1].ID), 10)
	if len(got) != 1 || got[0].subject != names.SinglesSubject() || got[0].seq != wantSeq {
		t.Fatalf("rejections %+v, want one of the pack at %s on %s", got, wantSeq, names.SinglesSubject())
	}
	hold.release()
	if out, err := busy.WaitJob(e.ctx, busyID); err != nil || out.State != dispatcher.StateDone {
		t.Fatalf("busy job: %+v, %v", out, err)
	}
	testwait.For(t, 30*time.Second, "JOBS to be empty", func() bool { return e.jobsState().Msgs == before })
}

// TestSinglePackCancel: a job of a pack canceled before it runs ends canceled, alone; the pack's
// other jobs run; the pack goes once every job in it is done with it, the cancel with it.
func TestSinglePackCancel(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.coordinator(coordinator.Config{})
	before := e.jobsState().Msgs
	subs, err := e.d.SubmitMany(e.ctx, singles("cs-", 3))
	if err != nil || len(subs) != 3 || !wire.IsPacked(subs[1].ID) {
		t.Fatalf("SubmitMany: %+v, %v", subs, err)
	}
	e.waitPending("cs-1", 1) // a cancel read at replay is applied but not answered
	if err := subs[1].Handle.Cancel(e.ctx); err != nil {
		t.Fatalf("cancel of a pending packed job: %v", err)
	}
	if out, err := subs[1].Handle.WaitJob(e.ctx, subs[1].ID); err != nil || out.State != dispatcher.StateCanceled {
		t.Fatalf("canceled packed job: %+v, %v", out, err)
	}
	e.worker(worker.Config{Concurrency: 2}, func(_ context.Context, j *worker.Job) ([]byte, error) { return j.Payload, nil })
	for _, i := range []int{0, 2} {
		if out, err := subs[i].Handle.WaitJob(e.ctx, subs[i].ID); err != nil || out.State != dispatcher.StateDone {
			t.Fatalf("job %d: %+v, %v", i, out, err)
		}
	}
	testwait.For(t, 30*time.Second, "JOBS to be empty", func() bool { return e.jobsState().Msgs == before })
}

// TestFinishedSingleJobInspected: a single job that finished, alone or in a pack, is found by
// its ID (Dispatcher.Job, weave job) within the result retention, after its message is deleted:
// its retained incarnation is the job itself.
func TestFinishedSingleJobInspected(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.coordinator(coordinator.Config{})
	e.worker(worker.Config{Concurrency: 2}, func(_ context.Context, j *worker.Job) ([]byte, error) { return j.Payload, nil })
	before := e.jobsState().Msgs
	subs := e.singleJobsDone("in-")
	testwait.For(t, 30*time.Second, "JOBS to be empty", func() bool { return e.jobsState().Msgs == before })
	for _, s := range subs {
		info, err := e.d.Job(e.ctx, s.ID)
		if err != nil || info.State != dispatcher.StateDone || info.Group != s.Handle.GroupID() || info.Incarnation != s.ID {
			t.Fatalf("job %d of %s, finished: %+v, %v", s.ID, s.Handle.GroupID(), info, err)
		}
	}
}

// TestGroupAfterSinglePackJob: a group that runs after a single pack's job, its group ID named,
// waits for that job's incarnation (ordered by its pack's arrival, not by its packed ID's value)
// and runs once it is done.
func TestGroupAfterSinglePackJob(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.coordinator(coordinator.Config{})
	hold := newGate()
	var holding atomic.Bool
	holding.Store(true)
	e.worker(worker.Config{Concurrency: 4}, func(ctx context.Context, j *worker.Job) ([]byte, error) {
		if j.Group == "dep-0" && holding.Load() {
			if err := hold.wait(ctx); err != nil {
				return nil, err
			}
		}
		return nil, nil
	})
	subs, err := e.d.SubmitMany(e.ctx, singles("dep-", 2))
	if err != nil || !wire.IsPacked(subs[0].ID) {
		t.Fatalf("SubmitMany: %+v, %v", subs, err)
	}
	testwait.For(t, 30*time.Second, "the dependency to start", func() bool { return hold.started.Load() == 1 })
	h, err := e.d.Publish(e.ctx, "after-dep", jobs(2, nil), dispatcher.After(dispatcher.Dependency{Group: "dep-0"}))
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("dep-0 (success, incarnation %d)", subs[0].ID)
	testwait.For(t, 30*time.Second, "the dependent group to wait for "+want, func() bool {
		gi, err := e.d.Group(e.ctx, "after-dep")
		return err == nil && slices.Contains(gi.WaitsFor, want) && gi.Jobs[dispatcher.StateDone] == 0
	})
	holding.Store(false)
	hold.release()
	if res := e.waitFor(h); res.Summary != (dispatcher.Summary{Jobs: 2, Done: 2}) {
		t.Fatalf("dependent group: %+v", res.Summary)
	}
}

// TestSinglePackKeptAcrossRestart: a pack holding a failed job is kept for it across a
// coordinator restart (the next coordinator registers it again as it replays JOBS, and its jobs
// found complete are done with it again); the failed job's redrive runs it, and the pack goes
// once the failed incarnation's retention passes.
func TestSinglePackKeptAcrossRestart(t *testing.T) {
	t.Parallel()
	e := setup(t)
	cfg := coordinator.Config{Namespace: e.ns, Logger: testLogger("coordinator"), TrimInterval: 100 * time.Millisecond,
		Streams: coordinator.StreamOptions{ResultRetention: 5 * time.Second}}
	c, err := coordinator.New(e.nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	w := e.redriveWorker()
	before := e.jobsState().Msgs
	subs, err := e.d.SubmitMany(e.ctx, singles("kr-", 40, 3))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range subs {
		if _, err := s.Handle.WaitJob(e.ctx, s.ID); err != nil {
			t.Fatal(err)
		}
	}
	testwait.For(t, 30*time.Second, "JOBS to keep only the failed job's pack", func() bool { return e.jobsState().Msgs == before+1 })
	stop()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("first coordinator: %v", err)
	}
	e.coordinator(coordinator.Config{TrimInterval: 100 * time.Millisecond, Streams: coordinator.StreamOptions{ResultRetention: 5 * time.Second}})
	w.failing.Store(false)
	h, err := e.d.Redrive(e.ctx, "kr-3")
	if err != nil {
		t.Fatal(err)
	}
	if res := e.waitFor(h); res.Summary != (dispatcher.Summary{Jobs: 1, Done: 1}) {
		t.Fatalf("redriven packed job after a restart: %+v", res.Summary)
	}
	testwait.For(t, 30*time.Second, "JOBS to be empty", func() bool { return e.jobsState().Msgs == before })
}

// TestSingleJobOutcomesExpire: a single job's outcome, alone or from a pack, is written with the
// result retention as its TTL and the server deletes it; the coordinator sends no purge request
// for it, only for groups, whose outcomes may be written long before they complete.
func TestSingleJobOutcomesExpire(t *testing.T) {
	t.Parallel()
	e := setup(t)
	names, _ := wire.NewNames(e.ns)
	var purges atomic.Int64
	sub, err := e.nc.Subscribe("$JS.API.STREAM.PURGE."+names.ResultsStream(), func(*nats.Msg) { purges.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	e.coordinator(coordinator.Config{TrimInterval: 100 * time.Millisecond, Streams: coordinator.StreamOptions{ResultRetention: time.Second}})
	e.worker(worker.Config{Concurrency: 4}, func(_ context.Context, j *worker.Job) ([]byte, error) { return j.Payload, nil })
	for _, s := range e.singleJobsDone("ttl-") {
		m, err := e.resultsStream().GetLastMsgForSubject(e.ctx, names.OutcomeSubject(wire.GroupToken(s.Handle.GroupID())))
		if err != nil || m.Header.Get(jetstream.MsgTTLHeader) != "1" {
			t.Fatalf("outcome of single job %s: %v, %v; want a TTL of 1 s", s.Handle.GroupID(), m, err)
		}
	}
	if res := e.waitFor(e.publish("grouped", jobs(2, nil))); res.Summary.Done != 2 {
		t.Fatalf("group: %+v", res.Summary)
	}
	testwait.For(t, 30*time.Second, "RESULTS to be empty", func() bool {
		info, err := e.resultsStream().Info(e.ctx)
		return err == nil && info.State.Msgs == 0
	})
	if n := purges.Load(); n != 1 {
		t.Errorf("%d purge requests on %s, want 1 (the group's)", n, names.ResultsStream())
	}
}

// TestSubmitManyRepeatsAGroup: a job without a key repeating an earlier one's group in the same
// SubmitMany is its duplicate (its ID, Duplicates 1), as it was when each went alone: in a pack
// it would be refused, its group running, and its Handle would wait for ever.
func TestSubmitManyRepeatsAGroup(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.coordinator(coordinator.Config{})
	e.worker(worker.Config{Concurrency: 2}, func(_ context.Context, j *worker.Job) ([]byte, error) { return j.Payload, nil })
	jobs := []dispatcher.Single{{Group: "r-a", Job: dispatcher.Job{Payload: []byte("1")}}, {Group: "r-b"}, {Group: "r-a", Job: dispatcher.Job{Payload: []byte("2")}}, {Group: "r-c"}}
	subs, err := e.d.SubmitMany(e.ctx, jobs)
	if err != nil || len(subs) != 4 {
		t.Fatalf("SubmitMany: %+v, %v", subs, err)
	}
	if subs[2].ID != subs[0].ID || subs[2].Handle.Duplicates() != 1 || subs[0].Handle.Duplicates() != 0 || !wire.IsPacked(subs[0].ID) {
		t.Fatalf("the repeat of group r-a: ID %d (first %d), duplicates %d", subs[2].ID, subs[0].ID, subs[2].Handle.Duplicates())
	}
	for i, s := range subs {
		if out, err := s.Handle.WaitJob(e.ctx, s.ID); err != nil || out.State != dispatcher.StateDone {
			t.Fatalf("job %d: %+v, %v", i, out, err)
		}
	}
}
