package dispatcher_test

import (
	"context"
	"iter"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/internal/wire"
)

// The tests of this file play the coordinator: the jobs are published for real (their IDs are
// JOBS sequences), and the outcomes and summaries written as the coordinator writes them, with
// the incarnation in the Weave-Group-Seq header.

// incarnation is a group published by the test, as the coordinator would see it.
type incarnation struct {
	group   string
	openSeq uint64
	ids     []uint64 // the jobs' IDs, in publish order
	h       *dispatcher.Handle
}

// publishGroup publishes jobs as a new incarnation of group and returns it.
func (e *env) publishGroup(ctx context.Context, t *testing.T, group string, jobs ...dispatcher.Job) incarnation {
	t.Helper()
	h, err := e.d.Publish(ctx, group, slices.Values(jobs))
	if err != nil {
		t.Fatal(err)
	}
	if h.Accepted() != len(jobs) {
		t.Fatalf("publish %q: %d of %d jobs accepted", group, h.Accepted(), len(jobs))
	}
	opens := e.openSeqs(ctx, t, group)
	inc := incarnation{group: group, openSeq: opens[len(opens)-1], h: h}
	for _, m := range e.readStream(ctx, t, e.names.JobsStream()) {
		if m.subject == e.names.JobSubject(wire.GroupToken(group)) && m.seq > inc.openSeq {
			inc.ids = append(inc.ids, m.seq)
		}
	}
	return inc
}

// finish records the outcomes of an incarnation, then its summary (counted from them).
func (e *env) finish(ctx context.Context, t *testing.T, inc incarnation, outs ...wire.Outcome) {
	t.Helper()
	e.recordIncarnation(ctx, t, inc.group, inc.openSeq, wire.AppendOutcomes(nil, outs), e.summaryOf(outs))
}

func (e *env) summaryOf(outs []wire.Outcome) []byte {
	var s wire.GroupSummary
	for _, o := range outs {
		s.Jobs++
		switch o.State {
		case wire.FinalDone:
			s.Done++
		case wire.FinalFailed:
			s.Failed++
		case wire.FinalCanceled:
			s.Canceled++
		}
	}
	return wire.AppendSummary(nil, s)
}

// history is a failed attempt's record as the coordinator keeps it (millisecond precision).
func history(worker, err string, at time.Time) wire.Attempt {
	return wire.Attempt{At: at.Truncate(time.Millisecond), Worker: worker, Error: err}
}

// failed collects Failed's answers.
func failed(t *testing.T, seq iter.Seq2[dispatcher.JobOutcome, error]) []dispatcher.JobOutcome {
	t.Helper()
	var out []dispatcher.JobOutcome
	for o, err := range seq {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, o)
	}
	return out
}

func ids(outs []dispatcher.JobOutcome) []uint64 {
	var ids []uint64
	for _, o := range outs {
		ids = append(ids, o.ID)
	}
	return ids
}

func TestFailedListsFailedJobsWithHistory(t *testing.T) {
	t.Parallel()
	e := setup(t, dispatcher.Config{})
	ctx := testContext(t)
	at := time.Now()

	const other = "tenant 7 / ünïcode" // travels base64-encoded in subjects
	g1 := e.publishGroup(ctx, t, "g1", dispatcher.Job{Key: "a"}, dispatcher.Job{Key: "b"}, dispatcher.Job{Key: "c"})
	g2 := e.publishGroup(ctx, t, other, dispatcher.Job{Key: "x"}, dispatcher.Job{})
	running := e.publishGroup(ctx, t, "running", dispatcher.Job{Key: "r1"}, dispatcher.Job{Key: "r2"})

	bHistory := []wire.Attempt{history("w1", "timeout", at.Add(-time.Minute)), history("w2", "boom", at)}
	e.finish(ctx, t, g1,
		wire.Outcome{ID: g1.ids[0], Key: "a", State: wire.FinalDone, Attempts: 1, Data: []byte("ok")},
		wire.Outcome{ID: g1.ids[1], Key: "b", State: wire.FinalFailed, Attempts: 2, Data: []byte("boom"), History: bHistory},
		wire.Outcome{ID: g1.ids[2], Key: "c", State: wire.FinalCanceled, Data: []byte("group canceled")},
	)
	// A running group: its failed job is listed before the group finishes.
	e.recordIncarnation(ctx, t, running.group, running.openSeq, outcomes(
		wire.Outcome{ID: running.ids[0], Key: "r1", State: wire.FinalFailed, Attempts: 1, Data: []byte("bad input"), History: []wire.Attempt{history("w3", "bad input", at)}},
	))
	e.finish(ctx, t, g2,
		wire.Outcome{ID: g2.ids[0], Key: "x", State: wire.FinalFailed, Attempts: 1, Data: []byte("nope"), History: []wire.Attempt{history("w1", "nope", at)}},
		wire.Outcome{ID: g2.ids[1], State: wire.FinalFailed, Attempts: 5, Data: []byte("again")},
	)

	b := dispatcher.JobOutcome{Group: "g1", ID: g1.ids[1], Key: "b", State: dispatcher.StateFailed, Attempts: 2, Err: "boom", History: []dispatcher.Attempt{
		{At: bHistory[0].At, Worker: "w1", Err: "timeout"}, {At: bHistory[1].At, Worker: "w2", Err: "boom"},
	}}
	if got := failed(t, e.d.Failed(ctx, "g1")); len(got) != 1 || !outcomeEqual(got[0], b) {
		t.Fatalf("Failed(g1) = %+v\nwant [%+v]", got, b)
	}
	got := failed(t, e.d.Failed(ctx, other))
	if want := []uint64{g2.ids[0], g2.ids[1]}; !slices.Equal(ids(got), want) || got[0].Group != other || got[1].Err != "again" || got[1].Attempts != 5 {
		t.Fatalf("Failed(%q) = %+v, want jobs %v", other, got, want)
	}

	all := failed(t, e.d.Failed(ctx, ""))
	if want := []uint64{g1.ids[1], running.ids[0], g2.ids[0], g2.ids[1]}; !slices.Equal(ids(all), want) {
		t.Fatalf("Failed(all) lists %v, want %v in recording order", ids(all), want)
	}
	for _, o := range all {
		if o.State != dispatcher.StateFailed || o.Group == "" {
			t.Errorf("Failed(all): %+v", o)
		}
	}
	if all[1].Group != "running" || len(all[1].History) != 1 || all[1].History[0].Worker != "w3" {
		t.Errorf("failed job of the running group: %+v", all[1])
	}

	if got := failed(t, e.d.Failed(ctx, "unknown")); len(got) != 0 {
		t.Errorf("Failed(unknown) = %+v", got)
	}
	for _, err := range e.d.Failed(ctx, "bad\x01group") {
		wantErrIs(t, err, dispatcher.ErrInvalidGroup)
	}
	// Failed reads with direct get: it leaves no consumer behind.
	if n := e.resultsConsumers(ctx, t); n != 0 {
		t.Fatalf("RESULTS has %d consumers after Failed", n)
	}
}

// outcomeEqual compares outcomes, times by instant.
func outcomeEqual(a, b dispatcher.JobOutcome) bool {
	if len(a.History) != len(b.History) {
		return false
	}
	for i := range a.History {
		if !a.History[i].At.Equal(b.History[i].At) {
			return false
		}
		a.History[i].At, b.History[i].At = time.Time{}, time.Time{}
	}
	return reflect.DeepEqual(a, b)
}

// TestFailedIsLazy records more outcome messages than one read takes and reads them with a pull
// iterator. After the first job it deletes the last message: Failed has not read it yet, so it
// never yields it. Breaking out of the loop early stops it.
func TestFailedIsLazy(t *testing.T) {
	t.Parallel()
	e := setup(t, dispatcher.Config{})
	ctx := testContext(t)
	const n = 100
	msgs := make([][]byte, n)
	for i := range msgs {
		msgs[i] = outcomes(wire.Outcome{ID: uint64(i + 1), Key: strconv.Itoa(i), State: wire.FinalFailed, Attempts: 1, Data: []byte("no")})
	}
	e.record(ctx, t, "big", msgs...)
	subs := e.nc.NumSubscriptions()

	next, stop := iter.Pull2(e.d.Failed(ctx, "big"))
	defer stop()
	if o, err, ok := next(); !ok || err != nil || o.ID != 1 {
		t.Fatalf("first: %+v, %v, %v", o, err, ok)
	}
	results, err := e.js.Stream(ctx, e.names.ResultsStream())
	if err != nil {
		t.Fatal(err)
	}
	if err := results.DeleteMsg(ctx, results.CachedInfo().State.LastSeq); err != nil {
		t.Fatal(err)
	}
	last := uint64(1)
	for {
		o, err, ok := next()
		if !ok {
			break
		}
		if err != nil || o.ID != last+1 {
			t.Fatalf("after job %d: %+v, %v", last, o, err)
		}
		last = o.ID
	}
	if last != n-1 {
		t.Fatalf("Failed read up to job %d, want %d: the deleted last message was read early", last, n-1)
	}

	seen := 0
	for range e.d.Failed(ctx, "big") {
		if seen++; seen == 3 {
			break
		}
	}
	if seen != 3 {
		t.Fatalf("broke out after %d jobs", seen)
	}
	stop()
	// Reading left nothing behind on the connection but the reply subscription the Dispatcher's
	// reads of RESULTS share, which Close ends.
	e.d.Close()
	if got := e.nc.NumSubscriptions(); got != subs {
		t.Fatalf("%d subscriptions after Failed, %d before", got, subs)
	}
}

// TestFailedEndsAtWhatIsStored checks that Failed does not wait: an outcome recorded after it
// started (here, while the caller holds the first job) is not listed.
func TestFailedEndsAtWhatIsStored(t *testing.T) {
	t.Parallel()
	e := setup(t, dispatcher.Config{})
	ctx := testContext(t)
	e.record(ctx, t, "g", outcomes(wire.Outcome{ID: 1, State: wire.FinalFailed, Attempts: 1}))
	var got []uint64
	for o, err := range e.d.Failed(ctx, "") {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, o.ID)
		if o.ID == 1 {
			e.record(ctx, t, "g", outcomes(wire.Outcome{ID: 2, State: wire.FinalFailed, Attempts: 1}))
		}
	}
	if !slices.Equal(got, []uint64{1}) {
		t.Fatalf("Failed listed %v, want [1]", got)
	}
}

func TestFailedSkipsMalformedMessages(t *testing.T) {
	t.Parallel()
	e := setup(t, dispatcher.Config{})
	ctx := testContext(t)
	e.record(ctx, t, "junk", outcomes(wire.Outcome{ID: 1, State: wire.FinalFailed}), []byte("junk"), outcomes(wire.Outcome{ID: 2, State: wire.FinalFailed}))
	var (
		got  []uint64
		errs int
	)
	for o, err := range e.d.Failed(ctx, "junk") {
		if err != nil {
			wantErrIs(t, err, dispatcher.ErrMalformedOutcome)
			errs++
			continue
		}
		got = append(got, o.ID)
	}
	if errs != 1 || !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("%d errors, jobs %v; want 1 error and jobs [1 2]", errs, got)
	}
}

// TestRedriveAnswers: Redrive asks the coordinator (played here: the decision is the
// coordinator's, see the integration tests) and turns each answer into its result: a Handle for
// the new incarnation, ErrGroupRunning with a Handle for the running one, ErrNotFailed,
// ErrJobGone (with or without a Handle).
func TestRedriveAnswers(t *testing.T) {
	t.Parallel()
	e := setup(t, dispatcher.Config{})
	ctx := testContext(t)
	asked := make(chan wire.GroupControl, 10)
	e.standInCoordinator(ctx, t, func(c wire.GroupControl) wire.ControlAnswer {
		asked <- c
		switch {
		case len(c.Jobs) == 0:
			return wire.ControlAnswer{OK: true, Incarnation: 42, Jobs: 3}
		case c.Jobs[0] == 1:
			return wire.ControlAnswer{Code: wire.AnswerRunning, Reason: "not complete", Incarnation: 7}
		case c.Jobs[0] == 2:
			return wire.ControlAnswer{Code: wire.AnswerNotFailed, Reason: "job 2 did not fail"}
		case c.Jobs[0] == 3:
			return wire.ControlAnswer{Code: wire.AnswerGone, Reason: "all gone"}
		default:
			return wire.ControlAnswer{OK: true, Incarnation: 43, Jobs: 1, Gone: 1}
		}
	})

	h, err := e.d.Redrive(ctx, "g")
	if err != nil || h.Accepted() != 3 || h.GroupID() != "g" {
		t.Fatalf("Redrive = %v, %v; want a Handle of 3 jobs", h, err)
	}
	if c := <-asked; c.Group != "g" || c.Op != wire.OpRedrive || c.Jobs != nil {
		t.Fatalf("request %+v", c)
	}
	// The Handle reads only the new incarnation's outcomes.
	e.recordIncarnation(ctx, t, "g", 41, summary(1, 1, 0, 0))
	e.recordIncarnation(ctx, t, "g", 42, summary(3, 3, 0, 0))
	if sum, err := h.WaitSummary(ctx); err != nil || sum.Jobs != 3 {
		t.Fatalf("WaitSummary = %+v, %v; want the incarnation opened at 42", sum, err)
	}

	h, err = e.d.Redrive(ctx, "g", 1, 5)
	wantErrIs(t, err, dispatcher.ErrGroupRunning)
	if h == nil || !strings.Contains(err.Error(), "not complete") {
		t.Fatalf("running: %v, %v; want a Handle and the reason", h, err)
	}
	if c := <-asked; !slices.Equal(c.Jobs, []uint64{1, 5}) {
		t.Fatalf("request for jobs 1 and 5 carried %v", c.Jobs)
	}
	e.recordIncarnation(ctx, t, "g", 7, summary(2, 2, 0, 0))
	if sum, err := h.WaitSummary(ctx); err != nil || sum.Jobs != 2 {
		t.Fatalf("the running incarnation's WaitSummary = %+v, %v", sum, err)
	}
	h, err = e.d.Redrive(ctx, "g", 2)
	wantErrIs(t, err, dispatcher.ErrNotFailed)
	if h != nil || !strings.Contains(err.Error(), "job 2 did not fail") {
		t.Fatalf("not failed: %v, %v", h, err)
	}
	h, err = e.d.Redrive(ctx, "g", 3)
	wantErrIs(t, err, dispatcher.ErrJobGone)
	if h != nil {
		t.Fatalf("all gone: a Handle")
	}
	h, err = e.d.Redrive(ctx, "g", 4)
	wantErrIs(t, err, dispatcher.ErrJobGone)
	if h == nil || h.Accepted() != 1 {
		t.Fatalf("some gone: %v, %v; want a Handle of 1 job", h, err)
	}
	for range 3 { // jobs 2, 3 and 4
		<-asked
	}

	// Checked before anything is published.
	_, err = e.d.Redrive(ctx, "bad\x01")
	wantErrIs(t, err, dispatcher.ErrInvalidGroup)
	_, err = e.d.Redrive(ctx, "g", 0)
	wantErrIs(t, err, dispatcher.ErrNotFailed)
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = e.d.Redrive(canceled, "g")
	wantErrIs(t, err, context.Canceled)
	select {
	case c := <-asked:
		t.Fatalf("published %+v", c)
	default:
	}
}

// TestRedriveNoAnswer: without a coordinator the request is stored and Redrive says so.
func TestRedriveNoAnswer(t *testing.T) {
	t.Parallel()
	e := setup(t, dispatcher.Config{RequestTimeout: 200 * time.Millisecond})
	ctx := testContext(t)
	h, err := e.d.Redrive(ctx, "g", 9)
	wantErrIs(t, err, dispatcher.ErrNoAnswer)
	if h != nil {
		t.Fatal("a Handle without an answer")
	}
	var found bool
	for _, m := range e.readStream(ctx, t, e.names.JobsStream()) {
		c, err := wire.ParseGroupControl(m.header)
		found = found || err == nil && c.Op == wire.OpRedrive && c.Group == "g" && slices.Equal(c.Jobs, []uint64{9}) && c.Reply != ""
	}
	if !found {
		t.Fatal("the redrive request is not stored in JOBS")
	}
}
