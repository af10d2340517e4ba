package coordinator

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/weavejobs/weave/coordinator/internal/engine"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/internal/auth"
	"github.com/weavejobs/weave/internal/wire"
	"github.com/weavejobs/weave/worker"
)

// gapWorker runs a worker of pool "any" (user <ns>-worker-w) with handler h until the test ends.
func (cs *coordServer) gapWorker(h worker.HandlerFunc) {
	t := cs.t
	w, err := worker.New(cs.connect(cs.ns+"-worker-w"), worker.Config{Namespace: cs.ns, ID: "w", Concurrency: 1, Logger: zerolog.Nop()}, h)
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(cs.ctx)
	wdone := make(chan error, 1)
	go func() { wdone <- w.Run(wctx) }()
	t.Cleanup(func() {
		wcancel()
		<-wdone
	})
}

// store publishes msgs as the producer's user and returns their JOBS sequences.
func (cs *coordServer) store(msgs ...*nats.Msg) []uint64 {
	t := cs.t
	t.Helper()
	js, err := jetstream.New(cs.connect(cs.ns + "-producer"))
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for _, m := range msgs {
		ack, err := js.PublishMsg(cs.ctx, m)
		if err != nil {
			t.Fatalf("storing %s: %v", m.Subject, err)
		}
		seqs = append(seqs, ack.Sequence)
	}
	return seqs
}

// TestReplayOpenWhileRedriveStarts runs on a server with the users `weave auth` renders. Group x
// completed with its job failed; while no coordinator runs, the producer's user stores a redrive
// request of x, then an open of x, a job and a seal. Live, the request, read first, is accepted
// and the open comes while the redrive starts: refused, with its job and seal. The next
// coordinator refuses them so too: recorded in NS_REJECTED, counted, deleted from NS_JOBS, the
// open's job never admitted, and the redrive carried out (the failed job runs again and
// succeeds). (Replay used to start a new incarnation with the open and refuse the request.)
func TestReplayOpenWhileRedriveStarts(t *testing.T) {
	t.Parallel()
	const ns = "rdopen"
	cs := newCoordServer(t, ns, auth.User{Role: auth.Worker, WorkerID: "w"})
	stop := cs.start()
	var runs atomic.Int32
	cs.gapWorker(func(context.Context, *worker.Job) ([]byte, error) {
		if runs.Add(1) == 1 {
			return nil, worker.Permanent(errors.New("no"))
		}
		return nil, nil
	})
	d, err := dispatcher.New(cs.connect(ns+"-producer"), dispatcher.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	h, err := d.Publish(cs.ctx, "x", func(yield func(dispatcher.Job) bool) { yield(dispatcher.Job{Key: "k"}) })
	if err != nil {
		t.Fatal(err)
	}
	if sum, err := h.WaitSummary(cs.ctx); err != nil || sum.Failed != 1 {
		t.Fatalf("x's summary %+v, %v; want its job failed", sum, err)
	}
	stop()
	held := cs.jobsHeld()

	names := cs.names
	seqs := cs.store(
		&nats.Msg{Subject: names.GroupSubject("x"), Header: wire.GroupControl{Group: "x", Op: wire.OpRedrive}.Header()},
		&nats.Msg{Subject: names.GroupSubject("x"), Header: wire.GroupControl{Group: "x", Op: wire.OpOpen}.Header()},
		&nats.Msg{Subject: names.JobSubject("x"), Header: wire.JobMeta{Group: "x", Key: "p"}.Header(), Data: []byte("p")},
		&nats.Msg{Subject: names.GroupSubject("x"), Header: wire.GroupControl{Group: "x", Op: wire.OpSeal, Count: 1}.Header()},
	)
	cs.start()
	got := cs.recorded(3)
	if got[0].Seq != seqs[1] || got[0].Reason != engine.BeingRedriven("x", seqs[0]) {
		t.Errorf("first record %+v, want the open %d refused as being redriven", got[0], seqs[1])
	}
	// The job's reason depends on whether x's first incarnation was forgotten when it came.
	if got[1].Seq != seqs[2] || got[1].Reason != "job after the seal of group x" && got[1].Reason != "job for a group that is not open: x" {
		t.Errorf("second record %+v, want the open's job %d refused", got[1], seqs[2])
	}
	if got[2].Seq != seqs[3] || got[2].Reason != "seal of a group that is not open: x" {
		t.Errorf("third record %+v, want the open's seal %d refused", got[2], seqs[3])
	}
	cs.waitFor("the failed job to run again", func() bool { return runs.Load() == 2 })
	cs.waitFor("no job of x to be still failed", func() bool {
		for _, err := range d.Failed(cs.ctx, "x") {
			return err != nil
		}
		return true
	})
	st := cs.status()
	if st.Totals.Rejected != 3 || st.Totals.Refused != 0 || st.Totals.Admitted != 2 {
		t.Errorf("%d rejected, %d refused, %d admitted; want the 3 refused inputs, and x's job and its redrive's", st.Totals.Rejected, st.Totals.Refused, st.Totals.Admitted)
	}
	// What stays of x: its two incarnations' messages (kept for the failed job's retention) and
	// the request; the refused inputs are gone.
	cs.waitFor("the refused inputs to be deleted from NS_JOBS", func() bool { return cs.jobsHeld() == held+1+3 })
}

// TestReplayCancelAfterCompletionInMemory: group c's job was running when its coordinator
// stopped; while none runs, the job ends (its report stored) and the producer's user stores a
// cancel of c. Live, the report read first completes c, and the cancel is refused; the next
// coordinator refuses it so too (recorded, counted as refused), and c completes with its job
// done. (Replay used to apply the cancel, which changed nothing, unrecorded.)
func TestReplayCancelAfterCompletionInMemory(t *testing.T) {
	t.Parallel()
	const ns = "rdcancel"
	cs := newCoordServer(t, ns, auth.User{Role: auth.Worker, WorkerID: "w"})
	stop := cs.start()
	started, release := make(chan struct{}, 1), make(chan struct{})
	cs.gapWorker(func(ctx context.Context, _ *worker.Job) ([]byte, error) {
		started <- struct{}{}
		select {
		case <-release:
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	d, err := dispatcher.New(cs.connect(ns+"-producer"), dispatcher.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	h, err := d.Publish(cs.ctx, "c", func(yield func(dispatcher.Job) bool) { yield(dispatcher.Job{Key: "k"}) })
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-cs.ctx.Done():
		t.Fatal("the job never started")
	}
	stop()
	close(release)
	cs.waitFor("the worker to report and ack its batch", func() bool {
		s, err := cs.js.Stream(cs.ctx, cs.names.WorkStream())
		return err == nil && s.CachedInfo().State.Msgs == 0
	})
	seqs := cs.store(&nats.Msg{Subject: cs.names.GroupSubject("c"), Header: wire.GroupControl{Group: "c", Op: wire.OpCancel}.Header()})

	cs.start()
	if got := cs.recorded(1); got[0].Seq != seqs[0] || got[0].Reason != engine.CancelComplete("c") {
		t.Errorf("record %+v, want the cancel %d refused as of a complete group", got[0], seqs[0])
	}
	if sum, err := h.WaitSummary(cs.ctx); err != nil || sum.Done != 1 || sum.Canceled != 0 {
		t.Errorf("c's summary %+v, %v; want its job done", sum, err)
	}
	if st := cs.status(); st.Totals.Refused != 1 || st.Totals.Rejected != 0 {
		t.Errorf("%d refused, %d rejected; want the cancel refused", st.Totals.Refused, st.Totals.Rejected)
	}
}
