package dispatcher_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/integration/jstest"
	"github.com/weavejobs/weave/internal/wire"
)

// resultsConsumers returns how many consumers the RESULTS stream has: one per Wait-like call
// reading it.
func (e *env) resultsConsumers(ctx context.Context, t *testing.T) int {
	t.Helper()
	s, err := e.js.Stream(ctx, e.names.ResultsStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Consumers
}

// recordIncarnation is record with the Weave-Group-Seq header the coordinator puts on outcomes.
func (e *env) recordIncarnation(ctx context.Context, t *testing.T, group string, openSeq uint64, msgs ...[]byte) {
	t.Helper()
	for _, m := range msgs {
		msg := &nats.Msg{Subject: e.outcomeSubject(group), Header: nats.Header{}, Data: m}
		msg.Header.Set(wire.HdrGroupSeq, strconv.FormatUint(openSeq, 10))
		if _, err := e.js.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
}

// openSeqs returns the JOBS sequences of the group's open messages: its incarnations.
func (e *env) openSeqs(ctx context.Context, t *testing.T, group string) []uint64 {
	t.Helper()
	var seqs []uint64
	for _, m := range e.readStream(ctx, t, e.names.JobsStream()) {
		if m.subject != e.names.GroupSubject(wire.GroupToken(group)) {
			continue
		}
		if c, err := wire.ParseGroupControl(m.header); err == nil && c.Op == wire.OpOpen {
			seqs = append(seqs, m.seq)
		}
	}
	return seqs
}

type jobAnswer struct {
	o   dispatcher.JobOutcome
	err error
}

// receive returns the answer a waiter sends, failing the test at ctx's deadline.
func receive[A any](ctx context.Context, t *testing.T, what string, ch <-chan A) A {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-ctx.Done():
		t.Fatalf("%s did not return: %v", what, ctx.Err())
		var zero A
		return zero
	}
}

// TestWaitJobReturnsTheJobsOutcome asks for every job of a finished group, by ID and by key: the
// third job's record is in the second batch, the second job's is not the first of its batch.
func TestWaitJobReturnsTheJobsOutcome(t *testing.T) {
	t.Parallel()
	e := setup(t, dispatcher.Config{})
	ctx := testContext(t)
	h := e.publishABC(ctx, t, "g")
	want := e.finishABC(ctx, t, h)

	for _, w := range slices.Backward(want.Jobs) {
		got, err := h.WaitJob(ctx, w.ID)
		if err != nil || !reflect.DeepEqual(got, w) {
			t.Fatalf("WaitJob(%d) = %+v, %v; want %+v", w.ID, got, err, w)
		}
		got, err = h.WaitKey(ctx, w.Key)
		if err != nil || !reflect.DeepEqual(got, w) {
			t.Fatalf("WaitKey(%q) = %+v, %v; want %+v", w.Key, got, err, w)
		}
	}
	if n := e.resultsConsumers(ctx, t); n != 0 {
		t.Fatalf("RESULTS has %d consumers after WaitJob", n)
	}
}

// TestWaitJobReturnsBeforeTheGroupFinishes reads a group that has no summary yet: WaitJob and
// WaitKey return at the job's record, from a later batch, and stop reading.
func TestWaitJobReturnsBeforeTheGroupFinishes(t *testing.T) {
	t.Parallel()
	e := setup(t, dispatcher.Config{})
	ctx := testContext(t)
	h := e.d.Attach("running")
	e.record(ctx, t, "running",
		outcomes(wire.Outcome{ID: 1, Key: "one", State: wire.FinalDone, Attempts: 1}),
		outcomes(
			wire.Outcome{ID: 2, Key: "two", State: wire.FinalFailed, Attempts: 2, Data: []byte("no")},
			wire.Outcome{ID: 3, Key: "three", State: wire.FinalDone, Attempts: 1, Data: []byte("yes")},
		),
	)
	want := dispatcher.JobOutcome{Group: "running", ID: 3, Key: "three", State: dispatcher.StateDone, Attempts: 1, Result: []byte("yes")}
	got, err := h.WaitJob(ctx, 3)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("WaitJob = %+v, %v; want %+v", got, err, want)
	}
	got, err = h.WaitKey(ctx, "three")
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("WaitKey = %+v, %v; want %+v", got, err, want)
	}
	if n := e.resultsConsumers(ctx, t); n != 0 {
		t.Fatalf("RESULTS has %d consumers after WaitJob", n)
	}
}

// TestWaitJobWaitsForTheOutcome starts WaitJob and WaitKey before anything is recorded; another
// job's outcome does not end them, the job's own does. Neither creates a consumer: they wait on
// the Dispatcher's shared subscription.
func TestWaitJobWaitsForTheOutcome(t *testing.T) {
	t.Parallel()
	e := setup(t, dispatcher.Config{})
	ctx := testContext(t)
	h := e.d.Attach("live")
	waiting := expectWaiting(e, 2)

	byID, byKey := make(chan jobAnswer, 1), make(chan jobAnswer, 1)
	go func() {
		o, err := h.WaitJob(ctx, 2)
		byID <- jobAnswer{o, err}
	}()
	go func() {
		o, err := h.WaitKey(ctx, "k2")
		byKey <- jobAnswer{o, err}
	}()
	awaitSignal(ctx, t, "both to wait on an empty subject", waiting)
	if n := e.resultsConsumers(ctx, t); n != 0 {
		t.Fatalf("RESULTS has %d consumers while WaitJob and WaitKey wait", n)
	}

	e.record(ctx, t, "live", outcomes(wire.Outcome{ID: 1, Key: "k1", State: wire.FinalDone, Attempts: 1}))
	e.record(ctx, t, "live", outcomes(wire.Outcome{ID: 2, Key: "k2", State: wire.FinalCanceled, Data: []byte("canceled by user")}))
	want := dispatcher.JobOutcome{Group: "live", ID: 2, Key: "k2", State: dispatcher.StateCanceled, Err: "canceled by user"}
	if a := receive(ctx, t, "WaitJob", byID); a.err != nil || !reflect.DeepEqual(a.o, want) {
		t.Fatalf("WaitJob = %+v, %v; want %+v", a.o, a.err, want)
	}
	if a := receive(ctx, t, "WaitKey", byKey); a.err != nil || !reflect.DeepEqual(a.o, want) {
		t.Fatalf("WaitKey = %+v, %v; want %+v", a.o, a.err, want)
	}
}

// TestWaitJobNotFound asks for jobs a finished group does not have.
func TestWaitJobNotFound(t *testing.T) {
	t.Parallel()
	e := setup(t, dispatcher.Config{})
	ctx := testContext(t)
	h := e.publishABC(ctx, t, "g")
	e.finishABC(ctx, t, h)

	_, err := h.WaitJob(ctx, h.LastID()+1) // the seal's sequence: not a job
	wantErrIs(t, err, dispatcher.ErrJobNotFound)
	_, err = h.WaitKey(ctx, "d")
	wantErrIs(t, err, dispatcher.ErrJobNotFound)
	_, err = h.WaitJob(ctx, 0)
	wantErrIs(t, err, dispatcher.ErrJobNotFound)
	_, err = h.WaitKey(ctx, "")
	wantErrIs(t, err, dispatcher.ErrJobNotFound)
}

// TestWaitJobReadsItsIncarnation publishes a group ID twice: a Handle from Publish finds only its
// own incarnation's jobs, a Handle from Attach those of the oldest.
func TestWaitJobReadsItsIncarnation(t *testing.T) {
	t.Parallel()
	e := setup(t, dispatcher.Config{})
	dispatcher.SkipRunningCheck(e.d) // stands in for a coordinator that accepted the group again
	ctx := testContext(t)
	first, err := e.d.Publish(ctx, "twice", slices.Values([]dispatcher.Job{{Key: "x"}}))
	if err != nil {
		t.Fatal(err)
	}
	// Within the dedup window the second incarnation's job needs another key to be stored; the
	// coordinator's records below reuse "x" to check that keys do not match across incarnations.
	second, err := e.d.Publish(ctx, "twice", slices.Values([]dispatcher.Job{{Key: "y"}}))
	if err != nil {
		t.Fatal(err)
	}
	opens := e.openSeqs(ctx, t, "twice")
	if len(opens) != 2 {
		t.Fatalf("open sequences %v, want 2", opens)
	}
	e.recordIncarnation(ctx, t, "twice", opens[0],
		outcomes(wire.Outcome{ID: first.FirstID(), Key: "x", State: wire.FinalFailed, Attempts: 5, Data: []byte("old")}),
		summary(1, 0, 1, 0))
	e.recordIncarnation(ctx, t, "twice", opens[1],
		outcomes(wire.Outcome{ID: second.FirstID(), Key: "x", State: wire.FinalDone, Attempts: 1}),
		summary(1, 1, 0, 0))

	newer := dispatcher.JobOutcome{Group: "twice", ID: second.FirstID(), Key: "x", State: dispatcher.StateDone, Attempts: 1}
	older := dispatcher.JobOutcome{Group: "twice", ID: first.FirstID(), Key: "x", State: dispatcher.StateFailed, Attempts: 5, Err: "old"}
	if got, err := second.WaitKey(ctx, "x"); err != nil || !reflect.DeepEqual(got, newer) {
		t.Fatalf("second WaitKey = %+v, %v; want %+v", got, err, newer)
	}
	_, err = second.WaitJob(ctx, first.FirstID())
	wantErrIs(t, err, dispatcher.ErrJobNotFound)
	if got, err := first.WaitJob(ctx, first.FirstID()); err != nil || !reflect.DeepEqual(got, older) {
		t.Fatalf("first WaitJob = %+v, %v; want %+v", got, err, older)
	}
	_, err = first.WaitJob(ctx, second.FirstID())
	wantErrIs(t, err, dispatcher.ErrJobNotFound)

	// Attach ends at the oldest summary.
	if got, err := e.d.Attach("twice").WaitKey(ctx, "x"); err != nil || !reflect.DeepEqual(got, older) {
		t.Fatalf("Attach WaitKey = %+v, %v; want %+v", got, err, older)
	}
	_, err = e.d.Attach("twice").WaitJob(ctx, second.FirstID())
	wantErrIs(t, err, dispatcher.ErrJobNotFound)
}

func TestWaitJobHonorsContext(t *testing.T) {
	t.Parallel()
	e := setup(t, dispatcher.Config{})
	h := e.d.Attach("slow")
	e.record(testContext(t), t, "slow", outcomes(wire.Outcome{ID: 1, Key: "other", State: wire.FinalDone}))

	ctx, cancel := context.WithTimeout(testContext(t), 200*time.Millisecond)
	defer cancel()
	_, err := h.WaitJob(ctx, 2)
	wantErrIs(t, err, context.DeadlineExceeded)
	_, err = h.WaitKey(ctx, "mine")
	wantErrIs(t, err, context.DeadlineExceeded)
	if errors.Is(err, dispatcher.ErrJobNotFound) {
		t.Fatalf("a group still running reported %v", err)
	}

	canceled, cancel := context.WithCancel(testContext(t))
	cancel()
	_, err = h.WaitJob(canceled, 2)
	wantErrIs(t, err, context.Canceled)
}

// TestWaitJobFromAttach waits with a new connection and Dispatcher, as a submitter does after a
// restart: for a job of a group already finished and for one recorded later.
func TestWaitJobFromAttach(t *testing.T) {
	t.Parallel()
	e := setup(t, dispatcher.Config{Namespace: "restart"})
	ctx := testContext(t)
	finished := e.publishABC(ctx, t, "finished")
	want := e.finishABC(ctx, t, finished)
	later := e.publishABC(ctx, t, "later")
	laterID := later.FirstID() + 1
	e.nc.Close() // the submitter goes away

	nc := jstest.NewConn(t, e.srv.ClientURL())
	d, err := dispatcher.New(nc, dispatcher.Config{Namespace: "restart"})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := d.Attach("finished").WaitJob(ctx, want.Jobs[2].ID); err != nil || !reflect.DeepEqual(got, want.Jobs[2]) {
		t.Fatalf("WaitJob = %+v, %v; want %+v", got, err, want.Jobs[2])
	}
	if got, err := d.Attach("finished").WaitKey(ctx, "b"); err != nil || !reflect.DeepEqual(got, want.Jobs[1]) {
		t.Fatalf("WaitKey = %+v, %v; want %+v", got, err, want.Jobs[1])
	}

	coordinator := &env{js: jstest.NewJetStream(t, nc), names: e.names, d: d}
	waiting := expectWaiting(coordinator, 1)
	done := make(chan jobAnswer, 1)
	go func() {
		o, err := d.Attach("later").WaitJob(ctx, laterID)
		done <- jobAnswer{o, err}
	}()
	awaitSignal(ctx, t, "WaitJob to wait", waiting)
	coordinator.record(ctx, t, "later", outcomes(wire.Outcome{ID: laterID, Key: "b", State: wire.FinalDone, Attempts: 1}))
	wantLater := dispatcher.JobOutcome{Group: "later", ID: laterID, Key: "b", State: dispatcher.StateDone, Attempts: 1}
	if a := receive(ctx, t, "WaitJob", done); a.err != nil || !reflect.DeepEqual(a.o, wantLater) {
		t.Fatalf("WaitJob = %+v, %v; want %+v", a.o, a.err, wantLater)
	}
}

// TestWaitJobSkipsMalformedOutcomes: an undecodable message does not hide a job recorded after
// it, but a job missing from a group with such a message is not reported as not found.
func TestWaitJobSkipsMalformedOutcomes(t *testing.T) {
	t.Parallel()
	e := setup(t, dispatcher.Config{})
	ctx := testContext(t)
	h := e.d.Attach("junk")
	e.record(ctx, t, "junk", []byte("junk"), outcomes(wire.Outcome{ID: 1, Key: "a", State: wire.FinalDone}), summary(2, 2, 0, 0))

	if got, err := h.WaitJob(ctx, 1); err != nil || got.ID != 1 {
		t.Fatalf("WaitJob = %+v, %v", got, err)
	}
	_, err := h.WaitKey(ctx, "b")
	wantErrIs(t, err, dispatcher.ErrMalformedOutcome)
	if errors.Is(err, dispatcher.ErrJobNotFound) {
		t.Fatalf("a job possibly in the malformed message reported %v", err)
	}
}

// TestWaitJobManyWaiters: two thousand WaitJob calls on one running group, and a WaitKey for a
// key the group does not have, wait without a consumer; each WaitJob gets its own job's outcome
// as the batches holding them are recorded, and the WaitKey learns from the summary that the
// job is not in the group.
func TestWaitJobManyWaiters(t *testing.T) {
	t.Parallel()
	const n, perBatch = 2000, 100
	e := setup(t, dispatcher.Config{})
	t.Cleanup(e.d.Close)
	ctx := testContext(t)
	h := e.d.Attach("big")
	waiting := expectWaiting(e, n+1)

	answers := make([]chan jobAnswer, n)
	for i := range answers {
		answers[i] = make(chan jobAnswer, 1)
		go func() {
			o, err := h.WaitJob(ctx, uint64(i+1))
			answers[i] <- jobAnswer{o, err}
		}()
	}
	missing := make(chan jobAnswer, 1)
	go func() {
		o, err := h.WaitKey(ctx, "no such key")
		missing <- jobAnswer{o, err}
	}()
	awaitSignal(ctx, t, "every call to wait", waiting)
	if c := e.resultsConsumers(ctx, t); c != 0 {
		t.Fatalf("RESULTS has %d consumers while %d WaitJob calls wait", c, n)
	}

	var msgs [][]byte
	for first := 1; first <= n; first += perBatch {
		var outs []wire.Outcome
		for id := first; id < first+perBatch; id++ {
			outs = append(outs, wire.Outcome{ID: uint64(id), Key: fmt.Sprint("k", id), State: wire.FinalDone, Attempts: 1, Data: []byte(fmt.Sprint("r", id))})
		}
		msgs = append(msgs, outcomes(outs...))
	}
	e.record(ctx, t, "big", append(msgs, summary(n, n, 0, 0))...)
	for i, ch := range answers {
		a := receive(ctx, t, fmt.Sprintf("WaitJob %d", i+1), ch)
		if a.err != nil || a.o.ID != uint64(i+1) || string(a.o.Result) != fmt.Sprint("r", i+1) {
			t.Fatalf("WaitJob(%d) = %+v, %v", i+1, a.o, a.err)
		}
	}
	a := receive(ctx, t, "WaitKey", missing)
	wantErrIs(t, a.err, dispatcher.ErrJobNotFound)
}

// TestWaitJobAfterClose: a WaitJob waiting when the Dispatcher is closed goes on reading the
// stored outcomes on an interval, without a consumer, and still gets its outcome; so does one
// made after Close.
func TestWaitJobAfterClose(t *testing.T) {
	t.Parallel()
	e := setup(t, dispatcher.Config{})
	ctx := testContext(t)
	h := e.d.Attach("closing")
	waiting := expectWaiting(e, 1)
	done := make(chan jobAnswer, 1)
	go func() {
		o, err := h.WaitJob(ctx, 7)
		done <- jobAnswer{o, err}
	}()
	awaitSignal(ctx, t, "WaitJob to wait", waiting)
	e.d.Close()
	e.record(ctx, t, "closing", outcomes(wire.Outcome{ID: 7, Key: "k", State: wire.FinalDone, Attempts: 1}))
	if a := receive(ctx, t, "WaitJob", done); a.err != nil || a.o.ID != 7 {
		t.Fatalf("WaitJob = %+v, %v", a.o, a.err)
	}
	if o, err := h.WaitKey(ctx, "k"); err != nil || o.ID != 7 {
		t.Fatalf("WaitKey after Close = %+v, %v", o, err)
	}
	if c := e.resultsConsumers(ctx, t); c != 0 {
		t.Fatalf("RESULTS has %d consumers after waits on a closed Dispatcher", c)
	}
}

// TestWaitJobLiveMalformedOutcome: a waiting WaitKey sees an undecodable message go by, then the
// summary: its job may have been in that message, so it is not reported as not found.
func TestWaitJobLiveMalformedOutcome(t *testing.T) {
	t.Parallel()
	e := setup(t, dispatcher.Config{})
	ctx := testContext(t)
	h := e.d.Attach("junk-live")
	waiting := expectWaiting(e, 1)
	done := make(chan jobAnswer, 1)
	go func() {
		o, err := h.WaitKey(ctx, "b")
		done <- jobAnswer{o, err}
	}()
	awaitSignal(ctx, t, "WaitKey to wait", waiting)
	e.record(ctx, t, "junk-live", []byte("junk"), outcomes(wire.Outcome{ID: 1, Key: "a", State: wire.FinalDone}), summary(2, 2, 0, 0))
	a := receive(ctx, t, "WaitKey", done)
	wantErrIs(t, a.err, dispatcher.ErrMalformedOutcome)
	if errors.Is(a.err, dispatcher.ErrJobNotFound) {
		t.Fatalf("a job possibly in the malformed message reported %v", a.err)
	}
}
