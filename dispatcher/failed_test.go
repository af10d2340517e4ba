package dispatcher_test

import (
	"bytes"
	"context"
	"fmt"
	"iter"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

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

// redriveFixture publishes a group of four jobs and finishes it with two failures: b (keyed,
// every option set) and c (no key).
func (e *env) redriveFixture(ctx context.Context, t *testing.T, group string) (incarnation, []dispatcher.Job) {
	t.Helper()
	jobs := []dispatcher.Job{
		{Key: "a", Payload: []byte("pa")},
		{Key: "b", Payload: []byte("pb"), Require: []string{"db:1"}, Prefer: []string{"zone=eu", "host/a"}, MaxAttempts: 3, Timeout: 90 * time.Second},
		{Payload: []byte("pc")},
		{Key: "d", Payload: []byte("pd")},
	}
	inc := e.publishGroup(ctx, t, group, jobs...)
	e.finish(ctx, t, inc,
		wire.Outcome{ID: inc.ids[0], Key: "a", State: wire.FinalDone, Attempts: 1},
		wire.Outcome{ID: inc.ids[1], Key: "b", State: wire.FinalFailed, Attempts: 3, Data: []byte("boom")},
		wire.Outcome{ID: inc.ids[2], State: wire.FinalFailed, Attempts: 1, Data: []byte("bad")},
		wire.Outcome{ID: inc.ids[3], Key: "d", State: wire.FinalCanceled},
	)
	return inc, jobs
}

// groupSince returns the group's messages in JOBS after sequence after.
func (e *env) groupSince(ctx context.Context, t *testing.T, group string, after uint64) ([]stored, groupMsgs) {
	t.Helper()
	var msgs []stored
	for _, m := range e.readStream(ctx, t, e.names.JobsStream()) {
		if m.seq > after {
			msgs = append(msgs, m)
		}
	}
	return msgs, parseGroup(t, e.names, group, msgs)
}

// lastSeq returns the JOBS stream's last sequence.
func (e *env) lastJobsSeq(ctx context.Context, t *testing.T) uint64 {
	t.Helper()
	s, err := e.js.Stream(ctx, e.names.JobsStream())
	if err != nil {
		t.Fatal(err)
	}
	return s.CachedInfo().State.LastSeq
}

// TestRedriveRepublishesFailedJobs redrives the failed jobs of a group within the dedup window
// of their keys: they are stored again, as a new incarnation, with their payloads and options
// and new dedup IDs. Then it plays the new incarnation to its end, with b failing again: the
// next Redrive takes only b, under its new ID.
func TestRedriveRepublishesFailedJobs(t *testing.T) {
	t.Parallel()
	e := setup(t, dispatcher.Config{})
	ctx := testContext(t)
	const group = "tenant 9 / ünïcode"
	inc, jobs := e.redriveFixture(ctx, t, group)
	before := e.lastJobsSeq(ctx, t)
	subs := e.nc.NumSubscriptions()

	h, err := e.d.Redrive(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	// At most the reply subscription the Dispatcher's reads of RESULTS share stays open.
	if got := e.nc.NumSubscriptions(); got > subs+1 {
		t.Fatalf("%d subscriptions after Redrive, %d before", got, subs)
	}
	if h.GroupID() != group || h.Accepted() != 2 || h.Duplicates() != 0 {
		t.Fatalf("Redrive: group %q, %d accepted, %d duplicates; want 2 and 0", h.GroupID(), h.Accepted(), h.Duplicates())
	}
	msgs, g := e.groupSince(ctx, t, group, before)
	wantSealed(t, g, 2)
	for i, old := range []int{1, 2} {
		j := jobs[old]
		want := wire.JobMeta{Group: group, Key: j.Key, Require: j.Require, Prefer: j.Prefer, MaxAttempts: j.MaxAttempts, Timeout: j.Timeout}
		if !reflect.DeepEqual(g.jobs[i], want) || !bytes.Equal(g.payloads[i], j.Payload) {
			t.Errorf("redriven job %d: %+v %q, want %+v %q", i, g.jobs[i], g.payloads[i], want, j.Payload)
		}
		msg := msgs[1+i]
		if got, want := msg.header.Get(wire.HdrMsgID), "redrive:"+wire.GroupToken(group)+"/"+strconv.FormatUint(inc.ids[old], 10); got != want {
			t.Errorf("redriven job %d: Nats-Msg-Id %q, want %q", i, got, want)
		}
		for _, name := range []string{wire.HdrVersion, wire.HdrGroup, wire.HdrKey, wire.HdrRequire, wire.HdrPrefer, wire.HdrMaxAttempts, wire.HdrTimeout} {
			if got, want := msg.header.Values(name), jobHeader(group, j).Values(name); !slices.Equal(got, want) {
				t.Errorf("redriven job %d: header %s %q, want %q", i, name, got, want)
			}
		}
	}
	if h.FirstID() != g.jobSeqs[0] || h.LastID() != g.jobSeqs[1] {
		t.Errorf("IDs %d..%d, want %v", h.FirstID(), h.LastID(), g.jobSeqs)
	}

	// The new incarnation is open and has no outcome yet: it is running.
	_, err = e.d.Redrive(ctx, group)
	wantErrIs(t, err, dispatcher.ErrGroupRunning)
	next := incarnation{group: group, openSeq: msgs[0].seq, ids: g.jobSeqs}
	e.recordIncarnation(ctx, t, group, next.openSeq, outcomes(wire.Outcome{ID: next.ids[1], State: wire.FinalDone, Attempts: 1}))
	_, err = e.d.Redrive(ctx, group) // outcomes without a summary: still running
	wantErrIs(t, err, dispatcher.ErrGroupRunning)
	e.recordIncarnation(ctx, t, group, next.openSeq,
		outcomes(wire.Outcome{ID: next.ids[0], Key: "b", State: wire.FinalFailed, Attempts: 3, Data: []byte("boom again")}),
		summary(2, 1, 1, 0))
	sum, err := h.WaitSummary(ctx)
	if err != nil || sum != (dispatcher.Summary{Jobs: 2, Done: 1, Failed: 1}) {
		t.Fatalf("the redrive's WaitSummary = %+v, %v", sum, err)
	}

	before = e.lastJobsSeq(ctx, t)
	h, err = e.d.Redrive(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	msgs, g = e.groupSince(ctx, t, group, before)
	wantSealed(t, g, 1)
	if got, want := msgs[1].header.Get(wire.HdrMsgID), "redrive:"+wire.GroupToken(group)+"/"+strconv.FormatUint(next.ids[0], 10); got != want || g.jobs[0].Key != "b" {
		t.Fatalf("second redrive: key %q, Nats-Msg-Id %q; want b, %q", g.jobs[0].Key, got, want)
	}
	if h.Accepted() != 1 {
		t.Fatalf("second redrive accepted %d", h.Accepted())
	}
}

// jobHeader returns the headers Publish gives the job.
func jobHeader(group string, j dispatcher.Job) nats.Header {
	return wire.JobMeta{Group: group, Key: j.Key, Require: j.Require, Prefer: j.Prefer, MaxAttempts: j.MaxAttempts, Timeout: j.Timeout}.Header()
}

func TestRedriveGivenJobs(t *testing.T) {
	t.Parallel()
	e := setup(t, dispatcher.Config{})
	ctx := testContext(t)
	inc, jobs := e.redriveFixture(ctx, t, "g")
	before := e.lastJobsSeq(ctx, t)

	// Jobs that did not fail, or are not in the group: nothing is published.
	for _, bad := range [][]uint64{{inc.ids[0]}, {inc.ids[1], inc.ids[3]}, {inc.ids[2], 9999}} {
		h, err := e.d.Redrive(ctx, "g", bad...)
		wantErrIs(t, err, dispatcher.ErrNotFailed)
		if h != nil || !strings.Contains(err.Error(), strconv.FormatUint(bad[len(bad)-1], 10)) {
			t.Errorf("Redrive(%v) = %v, %v; want no handle and an error naming %d", bad, h, err, bad[len(bad)-1])
		}
	}
	if after := e.lastJobsSeq(ctx, t); after != before {
		t.Fatalf("refused redrives stored messages %d..%d", before+1, after)
	}

	h, err := e.d.Redrive(ctx, "g", inc.ids[2])
	if err != nil {
		t.Fatal(err)
	}
	_, g := e.groupSince(ctx, t, "g", before)
	wantSealed(t, g, 1)
	if h.Accepted() != 1 || g.jobs[0].Key != "" || !bytes.Equal(g.payloads[0], jobs[2].Payload) {
		t.Fatalf("redrove %+v %q (%d accepted), want job c", g.jobs[0], g.payloads[0], h.Accepted())
	}
}

// TestRedriveJobGone deletes a failed job's message: Redrive names it and publishes nothing.
func TestRedriveJobGone(t *testing.T) {
	t.Parallel()
	e := setup(t, dispatcher.Config{})
	ctx := testContext(t)
	inc, _ := e.redriveFixture(ctx, t, "g")
	jobsStream, err := e.js.Stream(ctx, e.names.JobsStream())
	if err != nil {
		t.Fatal(err)
	}
	if err := jobsStream.DeleteMsg(ctx, inc.ids[2]); err != nil {
		t.Fatal(err)
	}
	before := e.lastJobsSeq(ctx, t)
	for _, given := range [][]uint64{nil, {inc.ids[2]}} {
		h, err := e.d.Redrive(ctx, "g", given...)
		wantErrIs(t, err, dispatcher.ErrJobGone)
		if h != nil || !strings.Contains(err.Error(), strconv.FormatUint(inc.ids[2], 10)) {
			t.Fatalf("Redrive(%v) = %v, %v; want no handle and an error naming job %d", given, h, err, inc.ids[2])
		}
	}
	if after := e.lastJobsSeq(ctx, t); after != before {
		t.Fatalf("a failed redrive stored messages %d..%d", before+1, after)
	}
	// The job still stored can be redriven alone.
	if h, err := e.d.Redrive(ctx, "g", inc.ids[1]); err != nil || h.Accepted() != 1 {
		t.Fatalf("Redrive(b) = %v, %v", h, err)
	}
}

func TestRedriveRunningGroup(t *testing.T) {
	t.Parallel()
	e := setup(t, dispatcher.Config{})
	ctx := testContext(t)

	// Published, no outcome yet.
	inc := e.publishGroup(ctx, t, "g", dispatcher.Job{Key: "a"}, dispatcher.Job{Key: "b"})
	_, err := e.d.Redrive(ctx, "g")
	wantErrIs(t, err, dispatcher.ErrGroupRunning)
	// A failed job, but the group has not finished.
	e.recordIncarnation(ctx, t, "g", inc.openSeq, outcomes(wire.Outcome{ID: inc.ids[0], Key: "a", State: wire.FinalFailed, Attempts: 1}))
	_, err = e.d.Redrive(ctx, "g", inc.ids[0])
	wantErrIs(t, err, dispatcher.ErrGroupRunning)
	// Finished.
	e.recordIncarnation(ctx, t, "g", inc.openSeq, outcomes(wire.Outcome{ID: inc.ids[1], Key: "b", State: wire.FinalDone, Attempts: 1}), summary(2, 1, 1, 0))
	if h, err := e.d.Redrive(ctx, "g"); err != nil || h.Accepted() != 1 {
		t.Fatalf("Redrive after the summary = %v, %v", h, err)
	}
}

// TestRedriveIgnoresResumingOpen finishes an incarnation whose producer published its open twice
// (it resumed after a crash): the second open is not a new incarnation.
func TestRedriveIgnoresResumingOpen(t *testing.T) {
	t.Parallel()
	e := setup(t, dispatcher.Config{})
	ctx := testContext(t)
	control := func(op wire.GroupOp) uint64 {
		t.Helper()
		c := wire.GroupControl{Group: "g", Op: op, Count: 1}
		ack, err := e.js.PublishMsg(ctx, &nats.Msg{Subject: e.names.GroupSubject("g"), Header: c.Header()})
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
	open := control(wire.OpOpen)
	job := &nats.Msg{Subject: e.names.JobSubject("g"), Header: wire.JobMeta{Group: "g", Key: "k"}.Header(), Data: []byte("p")}
	ack, err := e.js.PublishMsg(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	control(wire.OpOpen)
	control(wire.OpSeal)
	control(wire.OpCancel)
	e.recordIncarnation(ctx, t, "g", open,
		outcomes(wire.Outcome{ID: ack.Sequence, Key: "k", State: wire.FinalFailed, Attempts: 1}), summary(1, 0, 1, 0))
	h, err := e.d.Redrive(ctx, "g")
	if err != nil || h.Accepted() != 1 {
		t.Fatalf("Redrive = %v, %v", h, err)
	}
}

func TestRedriveNothingToRedrive(t *testing.T) {
	t.Parallel()
	e := setup(t, dispatcher.Config{})
	ctx := testContext(t)
	_, err := e.d.Redrive(ctx, "unknown")
	wantErrIs(t, err, dispatcher.ErrNotFailed)

	inc := e.publishGroup(ctx, t, "ok", dispatcher.Job{Key: "a"})
	e.finish(ctx, t, inc, wire.Outcome{ID: inc.ids[0], Key: "a", State: wire.FinalDone, Attempts: 1})
	_, err = e.d.Redrive(ctx, "ok")
	wantErrIs(t, err, dispatcher.ErrNotFailed)

	_, err = e.d.Redrive(ctx, "bad\x01")
	wantErrIs(t, err, dispatcher.ErrInvalidGroup)
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = e.d.Redrive(canceled, "ok")
	wantErrIs(t, err, context.Canceled)
}

// TestRedriveRepeatedRecord redrives a job whose failed outcome the coordinator recorded twice
// (it may repeat records after a crash): the job is stored once, the repeat is a duplicate.
func TestRedriveRepeatedRecord(t *testing.T) {
	t.Parallel()
	e := setup(t, dispatcher.Config{})
	ctx := testContext(t)
	inc := e.publishGroup(ctx, t, "g", dispatcher.Job{Key: "a", Payload: []byte("pa")})
	failedA := wire.Outcome{ID: inc.ids[0], Key: "a", State: wire.FinalFailed, Attempts: 1}
	e.recordIncarnation(ctx, t, "g", inc.openSeq, outcomes(failedA), outcomes(failedA), summary(1, 0, 1, 0))
	h, err := e.d.Redrive(ctx, "g")
	if err != nil || h.Accepted() != 1 || h.Duplicates() != 1 {
		t.Fatalf("Redrive = %v, %v; want 1 accepted and 1 duplicate", h, err)
	}
}

// TestRedriveReadsOnlyTheLatestIncarnation redrives a group whose older incarnation also failed:
// only the latest one's failures are redriven, and an older job's ID is refused.
func TestRedriveReadsOnlyTheLatestIncarnation(t *testing.T) {
	t.Parallel()
	e := setup(t, dispatcher.Config{})
	ctx := testContext(t)
	first := e.publishGroup(ctx, t, "g", dispatcher.Job{Key: "old"})
	e.finish(ctx, t, first, wire.Outcome{ID: first.ids[0], Key: "old", State: wire.FinalFailed, Attempts: 1})
	second := e.publishGroup(ctx, t, "g", dispatcher.Job{Key: "new"})
	e.finish(ctx, t, second, wire.Outcome{ID: second.ids[0], Key: "new", State: wire.FinalFailed, Attempts: 1})

	_, err := e.d.Redrive(ctx, "g", first.ids[0])
	wantErrIs(t, err, dispatcher.ErrNotFailed)
	before := e.lastJobsSeq(ctx, t)
	if _, err := e.d.Redrive(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	_, g := e.groupSince(ctx, t, "g", before)
	wantSealed(t, g, 1)
	if g.jobs[0].Key != "new" {
		t.Fatalf("redrove %q, want only the latest incarnation's job", g.jobs[0].Key)
	}
	// Both old failures are still listed (until the retention passes).
	if got := failed(t, e.d.Failed(ctx, "g")); fmt.Sprint(ids(got)) != fmt.Sprint([]uint64{first.ids[0], second.ids[0]}) {
		t.Fatalf("Failed lists %v", ids(got))
	}
}

// TestRedriveIgnoresRejectedOpen publishes a group again while it is sealed and still running:
// the coordinator rejects that open and records the rejection. Once the group has finished, the
// rejected open is not a running incarnation. Without its rejection record it would be one.
func TestRedriveIgnoresRejectedOpen(t *testing.T) {
	t.Parallel()
	e := setup(t, dispatcher.Config{})
	dispatcher.SkipRunningCheck(e.d) // stands in for a coordinator that accepted the group again
	ctx := testContext(t)
	inc := e.publishGroup(ctx, t, "g", dispatcher.Job{Key: "a"})
	again := e.publishGroup(ctx, t, "g", dispatcher.Job{Key: "b"}) // rejected: g is sealed, running
	e.finish(ctx, t, inc, wire.Outcome{ID: inc.ids[0], Key: "a", State: wire.FinalFailed, Attempts: 1})

	_, err := e.d.Redrive(ctx, "g")
	wantErrIs(t, err, dispatcher.ErrGroupRunning)
	if n := e.streamConsumers(ctx, t, e.names.RejectedStream()); n != 0 {
		t.Fatalf("REJECTED has %d consumers after Redrive", n)
	}

	// The coordinator's records: another message's rejection, then the open's.
	reject := func(subject string, seq uint64) {
		t.Helper()
		m := nats.NewMsg(e.names.RejectSubject())
		m.Header.Set(wire.HdrVersion, "1")
		m.Header.Set(wire.HdrReason, "rejected")
		m.Header.Set(wire.HdrSubject, subject)
		m.Header.Set(wire.HdrSeq, strconv.FormatUint(seq, 10))
		if _, err := e.js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	reject(e.names.JobSubject("g"), again.openSeq)
	_, err = e.d.Redrive(ctx, "g")
	wantErrIs(t, err, dispatcher.ErrGroupRunning)
	reject(e.names.GroupSubject("g"), again.openSeq)
	h, err := e.d.Redrive(ctx, "g")
	if err != nil || h.Accepted() != 1 {
		t.Fatalf("Redrive = %v, %v", h, err)
	}
	if n := e.streamConsumers(ctx, t, e.names.RejectedStream()); n != 0 {
		t.Fatalf("REJECTED has %d consumers after Redrive", n)
	}
}

// streamConsumers returns how many consumers a stream has.
func (e *env) streamConsumers(ctx context.Context, t *testing.T, stream string) int {
	t.Helper()
	s, err := e.js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Consumers
}
