package dispatcher_test

import (
	"context"
	"fmt"
	"iter"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/integration/jstest"
	"github.com/weavejobs/weave/internal/wire"
)

// record stores outcomes of the group as the coordinator publishes them to the producer that
// opened it (e.d).
func (e *env) record(ctx context.Context, t *testing.T, group string, msgs ...[]byte) {
	t.Helper()
	for _, m := range msgs {
		if _, err := e.js.Publish(ctx, e.outcomeSubject(group), m); err != nil {
			t.Fatal(err)
		}
	}
}

// outcomeSubject is the subject the coordinator publishes the group's outcomes on when e.d
// opened it: e.d's reply token; an env without a Dispatcher stands in for another producer's.
func (e *env) outcomeSubject(group string) string {
	reply := ""
	if e.d != nil {
		reply = dispatcher.ReplyToken(e.d)
	}
	return e.names.OutcomeSubjectTo(wire.GroupToken(group), reply)
}

func outcomes(outs ...wire.Outcome) []byte { return wire.AppendOutcomes(nil, outs) }

func summary(jobs, done, failed, canceled uint64) []byte {
	return wire.AppendSummary(nil, wire.GroupSummary{Jobs: jobs, Done: done, Failed: failed, Canceled: canceled})
}

// publishABC publishes a group of three keyed jobs and returns its handle.
func (e *env) publishABC(ctx context.Context, t *testing.T, group string) *dispatcher.Handle {
	t.Helper()
	h, err := e.d.Publish(ctx, group, slices.Values([]dispatcher.Job{{Key: "a"}, {Key: "b"}, {Key: "c"}}))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// finishABC records outcomes for the jobs of publishABC, one of each final state, and returns
// the Result Wait should give.
func (e *env) finishABC(ctx context.Context, t *testing.T, h *dispatcher.Handle) *dispatcher.Result {
	t.Helper()
	id := h.FirstID()
	e.record(ctx, t, h.GroupID(),
		outcomes(
			wire.Outcome{ID: id, Key: "a", State: wire.FinalDone, Attempts: 1, Data: []byte("result-a")},
			wire.Outcome{ID: id + 1, Key: "b", State: wire.FinalFailed, Attempts: 3, Data: []byte("boom")},
		),
		outcomes(wire.Outcome{ID: id + 2, Key: "c", State: wire.FinalCanceled}),
		summary(3, 1, 1, 1),
	)
	return &dispatcher.Result{
		Summary: dispatcher.Summary{Jobs: 3, Done: 1, Failed: 1, Canceled: 1},
		Jobs: []dispatcher.JobOutcome{
			{Group: h.GroupID(), ID: id, Key: "a", State: dispatcher.StateDone, Attempts: 1, Result: []byte("result-a")},
			{Group: h.GroupID(), ID: id + 1, Key: "b", State: dispatcher.StateFailed, Attempts: 3, Err: "boom"},
			{Group: h.GroupID(), ID: id + 2, Key: "c", State: dispatcher.StateCanceled},
		},
	}
}

func TestWaitReturnsOutcomes(t *testing.T) {
	t.Parallel()
	e := setup(t, dispatcher.Config{})
	ctx := testContext(t)
	h := e.publishABC(ctx, t, "g")
	want := e.finishABC(ctx, t, h)

	got, err := h.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Wait = %+v\nwant %+v", got, want)
	}
	sum, err := h.WaitSummary(ctx)
	if err != nil || sum != want.Summary {
		t.Fatalf("WaitSummary = %+v, %v; want %+v", sum, err, want.Summary)
	}

	// Wait and WaitSummary delete their consumers.
	s, err := e.js.Stream(ctx, e.names.ResultsStream())
	if err != nil {
		t.Fatal(err)
	}
	if info, err := s.Info(ctx); err != nil || info.State.Consumers != 0 {
		t.Fatalf("RESULTS has %d consumers after Wait (%v)", info.State.Consumers, err)
	}
}

func TestWaitKeepsLastRecordOfAJob(t *testing.T) {
	t.Parallel()
	e := setup(t, dispatcher.Config{})
	ctx := testContext(t)
	h := e.d.Attach("repeat")
	e.record(ctx, t, "repeat",
		outcomes(wire.Outcome{ID: 7, Key: "x", State: wire.FinalFailed, Attempts: 1, Data: []byte("first")}),
		outcomes(wire.Outcome{ID: 8, Key: "y", State: wire.FinalDone, Attempts: 1}),
		outcomes(wire.Outcome{ID: 7, Key: "x", State: wire.FinalDone, Attempts: 2, Data: []byte("second")}),
		summary(2, 2, 0, 0),
	)
	res, err := h.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []dispatcher.JobOutcome{
		{Group: "repeat", ID: 7, Key: "x", State: dispatcher.StateDone, Attempts: 2, Result: []byte("second")},
		{Group: "repeat", ID: 8, Key: "y", State: dispatcher.StateDone, Attempts: 1},
	}
	if !reflect.DeepEqual(res.Jobs, want) {
		t.Fatalf("jobs %+v, want %+v", res.Jobs, want)
	}
}

// TestOutcomesStreamsBeforeTheGroupFinishes reads outcomes while the "coordinator" is still
// recording them: Outcomes yields each batch as it arrives and ends after the summary.
func TestOutcomesStreamsBeforeTheGroupFinishes(t *testing.T) {
	t.Parallel()
	e := setup(t, dispatcher.Config{})
	ctx := testContext(t)
	h := e.d.Attach("live")
	next, stop := iter.Pull2(h.Outcomes(ctx))
	defer stop()

	e.record(ctx, t, "live", outcomes(
		wire.Outcome{ID: 1, State: wire.FinalDone, Attempts: 1},
		wire.Outcome{ID: 2, State: wire.FinalDone, Attempts: 1},
	))
	for want := uint64(1); want <= 2; want++ {
		o, err, ok := next()
		if !ok || err != nil || o.ID != want {
			t.Fatalf("outcome %+v, %v, %v; want job %d", o, err, ok, want)
		}
	}
	// The summary does not exist yet, so Outcomes is waiting now.
	e.record(ctx, t, "live", outcomes(wire.Outcome{ID: 3, State: wire.FinalFailed, Attempts: 2, Data: []byte("no")}), summary(3, 2, 1, 0))
	o, err, ok := next()
	if !ok || err != nil || !reflect.DeepEqual(o, dispatcher.JobOutcome{Group: "live", ID: 3, State: dispatcher.StateFailed, Attempts: 2, Err: "no"}) {
		t.Fatalf("outcome %+v, %v, %v; want job 3 failed", o, err, ok)
	}
	if o, err, ok := next(); ok {
		t.Fatalf("after the summary: %+v, %v", o, err)
	}
}

func TestOutcomesStopsWhenTheCallerBreaks(t *testing.T) {
	t.Parallel()
	e := setup(t, dispatcher.Config{})
	ctx := testContext(t)
	h := e.d.Attach("early")
	e.record(ctx, t, "early", outcomes(wire.Outcome{ID: 1, State: wire.FinalDone}, wire.Outcome{ID: 2, State: wire.FinalDone}))
	n := 0
	for _, err := range h.Outcomes(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		n++
		break
	}
	if n != 1 {
		t.Fatalf("%d outcomes", n)
	}
}

// TestAttachFromAnotherProcess waits with a new connection and Dispatcher, as a submitter does
// after a restart: once for a group already finished, once for a group that finishes later.
func TestAttachFromAnotherProcess(t *testing.T) {
	t.Parallel()
	e := setup(t, dispatcher.Config{Namespace: "restart"})
	ctx := testContext(t)
	finished := e.publishABC(ctx, t, "finished")
	wantFinished := e.finishABC(ctx, t, finished)
	later := e.publishABC(ctx, t, "later")
	e.nc.Close() // the submitter goes away

	nc := jstest.NewConn(t, e.srv.ClientURL())
	d, err := dispatcher.New(nc, dispatcher.Config{Namespace: "restart"})
	if err != nil {
		t.Fatal(err)
	}

	got, err := d.Attach("finished").Wait(ctx)
	if err != nil || !reflect.DeepEqual(got, wantFinished) {
		t.Fatalf("Wait = %+v, %v; want %+v", got, err, wantFinished)
	}

	done := make(chan struct{})
	var (
		res     *dispatcher.Result
		waitErr error
	)
	go func() {
		defer close(done)
		res, waitErr = d.Attach("later").Wait(ctx)
	}()
	coordinator := &env{js: jstest.NewJetStream(t, nc), names: e.names}
	wantLater := coordinator.finishABC(ctx, t, later)
	<-done
	if waitErr != nil || !reflect.DeepEqual(res, wantLater) {
		t.Fatalf("Wait = %+v, %v; want %+v", res, waitErr, wantLater)
	}
}

func TestWaitHonorsContext(t *testing.T) {
	t.Parallel()
	e := setup(t, dispatcher.Config{})
	h := e.d.Attach("never")

	ctx, cancel := context.WithTimeout(testContext(t), 200*time.Millisecond)
	defer cancel()
	_, err := h.Wait(ctx)
	wantErrIs(t, err, context.DeadlineExceeded)
	_, err = h.WaitSummary(ctx)
	wantErrIs(t, err, context.DeadlineExceeded)

	canceled, cancel := context.WithCancel(testContext(t))
	cancel()
	_, err = h.Wait(canceled)
	wantErrIs(t, err, context.Canceled)
}

func TestWaitReportsMalformedOutcomes(t *testing.T) {
	t.Parallel()
	e := setup(t, dispatcher.Config{})
	ctx := testContext(t)
	h := e.d.Attach("junk")
	e.record(ctx, t, "junk", []byte("junk"), outcomes(wire.Outcome{ID: 1, State: wire.FinalDone}), summary(1, 1, 0, 0))

	_, err := h.Wait(ctx)
	wantErrIs(t, err, dispatcher.ErrMalformedOutcome)

	// Outcomes lets the caller skip the bad message.
	var errs, outs int
	for o, err := range h.Outcomes(ctx) {
		switch {
		case err != nil:
			wantErrIs(t, err, dispatcher.ErrMalformedOutcome)
			errs++
		case o.ID == 1:
			outs++
		}
	}
	if errs != 1 || outs != 1 {
		t.Fatalf("%d errors and %d outcomes, want 1 and 1", errs, outs)
	}
}

// TestWaitSummaryWaitsForTheSummary starts WaitSummary while the group runs.
func TestWaitSummaryWaitsForTheSummary(t *testing.T) {
	t.Parallel()
	e := setup(t, dispatcher.Config{})
	ctx := testContext(t)
	h := e.d.Attach("running")
	e.record(ctx, t, "running", outcomes(wire.Outcome{ID: 1, State: wire.FinalDone}))

	type answer struct {
		sum dispatcher.Summary
		err error
	}
	done := make(chan answer, 1)
	go func() {
		sum, err := h.WaitSummary(ctx)
		done <- answer{sum, err}
	}()
	e.record(ctx, t, "running", outcomes(wire.Outcome{ID: 2, State: wire.FinalCanceled}), summary(2, 1, 0, 1))
	if a := <-done; a.err != nil || a.sum != (dispatcher.Summary{Jobs: 2, Done: 1, Canceled: 1}) {
		t.Fatalf("WaitSummary = %+v, %v", a.sum, a.err)
	}
}

func TestAttachInvalidGroup(t *testing.T) {
	t.Parallel()
	e := setup(t, dispatcher.Config{})
	ctx := testContext(t)
	h := e.d.Attach("")
	_, err := h.Wait(ctx)
	wantErrIs(t, err, dispatcher.ErrInvalidGroup)
	_, err = h.WaitSummary(ctx)
	wantErrIs(t, err, dispatcher.ErrInvalidGroup)
	_, err = h.WaitJob(ctx, 0)
	wantErrIs(t, err, dispatcher.ErrInvalidGroup)
	_, err = h.WaitKey(ctx, "")
	wantErrIs(t, err, dispatcher.ErrInvalidGroup)
	for _, err := range h.Outcomes(ctx) {
		wantErrIs(t, err, dispatcher.ErrInvalidGroup)
	}
}

// TestWaitManyWaiters: a thousand Wait calls and a thousand Outcomes loops on one running group
// wait without a consumer; each sees every outcome, in order, once the batches and the summary
// are recorded.
func TestWaitManyWaiters(t *testing.T) {
	t.Parallel()
	const n, jobs, perBatch = 1000, 300, 30
	e := setup(t, dispatcher.Config{})
	t.Cleanup(e.d.Close)
	ctx := testContext(t)
	h := e.d.Attach("crowd")
	// The first batch is stored before anyone waits: it is read, the rest comes live.
	first := make([]wire.Outcome, perBatch)
	for i := range first {
		first[i] = wire.Outcome{ID: uint64(i + 1), State: wire.FinalDone, Attempts: 1}
	}
	e.record(ctx, t, "crowd", outcomes(first...))
	waiting := expectWaiting(e, 2*n)

	type answer struct {
		ids []uint64
		sum dispatcher.Summary
		err error
	}
	answers := make(chan answer, 2*n)
	for range n {
		go func() {
			r, err := h.Wait(ctx)
			var a answer
			if a.err = err; err == nil {
				a.sum = r.Summary
				for _, o := range r.Jobs {
					a.ids = append(a.ids, o.ID)
				}
			}
			answers <- a
		}()
		go func() {
			var a answer
			for o, err := range h.Outcomes(ctx) {
				if err != nil {
					a.err = err
					break
				}
				a.ids = append(a.ids, o.ID)
			}
			a.sum.Jobs = jobs // Outcomes does not return the summary
			answers <- a
		}()
	}
	awaitSignal(ctx, t, "every call to wait", waiting)
	if c := e.resultsConsumers(ctx, t); c != 0 {
		t.Fatalf("RESULTS has %d consumers while %d Wait and Outcomes calls wait", c, 2*n)
	}
	for from := perBatch + 1; from <= jobs; from += perBatch {
		var outs []wire.Outcome
		for id := from; id < from+perBatch; id++ {
			outs = append(outs, wire.Outcome{ID: uint64(id), State: wire.FinalDone, Attempts: 1})
		}
		e.record(ctx, t, "crowd", outcomes(outs...))
	}
	e.record(ctx, t, "crowd", summary(jobs, jobs, 0, 0))
	for i := range 2 * n {
		a := receive(ctx, t, fmt.Sprintf("waiter %d", i), answers)
		if a.err != nil || a.sum.Jobs != jobs || len(a.ids) != jobs {
			t.Fatalf("waiter %d: %d outcomes, summary %+v, %v; want %d", i, len(a.ids), a.sum, a.err, jobs)
		}
		for j, id := range a.ids {
			if id != uint64(j+1) {
				t.Fatalf("waiter %d: outcome %d is job %d, want %d", i, j, id, j+1)
			}
		}
	}
	if c := e.resultsConsumers(ctx, t); c != 0 {
		t.Fatalf("RESULTS has %d consumers after the waits", c)
	}
}
