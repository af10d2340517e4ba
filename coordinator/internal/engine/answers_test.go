package engine

import (
	"reflect"
	"testing"
	"time"

	"github.com/weavejobs/weave/internal/wire"
)

// answers takes the answers the engine recorded since the last call.
func (te *testEngine) answers() []Answer {
	a := te.e.out.Answers
	te.e.out.Answers = nil
	return a
}

func TestCancelAnswers(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{Prefetch: -1})
	te.open("g")
	var ids []uint64
	for range 5 {
		ids = append(ids, te.job(wire.JobMeta{Group: "g"}))
	}
	te.seal("g")
	te.worker("w1", 2)
	if n := len(te.releases()["any"]); n != 2 {
		t.Fatalf("released %d jobs to 2 slots", n)
	}

	// Without Weave-Reply, nothing is answered.
	te.control(wire.GroupControl{Group: "g", Op: wire.OpCancel, Jobs: []uint64{ids[4]}})
	if a := te.answers(); len(a) != 0 {
		t.Fatalf("answered %+v without a reply token", a)
	}

	// Some jobs: one running (told to stop), one pending, one already canceled, one of another
	// group and one that does not exist: the answer names the three it left alone.
	te.open("other")
	otherID := te.job(wire.JobMeta{Group: "other"})
	seq := te.control(wire.GroupControl{Group: "g", Op: wire.OpCancel, Jobs: []uint64{ids[0], ids[3], ids[4], otherID, 999_999}, Reply: "tok1"})
	want := Answer{Subject: "weave.reply.tok1", Reply: wire.ControlAnswer{Seq: seq, Op: wire.OpCancel, Group: "g", OK: true, Canceled: 1, Stopping: 1,
		Final: []uint64{ids[4]}, Unknown: []uint64{otherID, 999_999}}}
	if a := te.answers(); len(a) != 1 || !reflect.DeepEqual(a[0], want) {
		t.Fatalf("answers %+v, want %+v", a, want)
	}

	// The whole group: the other running job stops, the last pending one ends.
	seq = te.control(wire.GroupControl{Group: "g", Op: wire.OpCancel, Reply: "tok2"})
	want = Answer{Subject: "weave.reply.tok2", Reply: wire.ControlAnswer{Seq: seq, Op: wire.OpCancel, Group: "g", OK: true, Canceled: 1, Stopping: 2}}
	if a := te.answers(); len(a) != 1 || !reflect.DeepEqual(a[0], want) {
		t.Fatalf("answers %+v, want %+v", a, want)
	}

	// A group that was never opened: refused, and the rejection recorded as before.
	rejected := len(te.e.out.Rejections)
	seq = te.control(wire.GroupControl{Group: "nope", Op: wire.OpCancel, Reply: "tok3"})
	a := te.answers()
	if len(a) != 1 || a[0].Reply.OK || a[0].Reply.Code != wire.AnswerNotOpen || a[0].Reply.Seq != seq || a[0].Reply.Group != "nope" || a[0].Subject != "weave.reply.tok3" {
		t.Fatalf("answers %+v, want a refusal of group nope", a)
	}
	if len(te.e.out.Rejections) != rejected+1 {
		t.Fatalf("the cancel of group nope was not recorded as rejected")
	}
	// A request the state refuses is not counted with malformed or hostile input.
	if s := te.e.Status().Totals; s.Rejected != 0 || s.Refused != 1 {
		t.Fatalf("totals: %d rejected and %d refused, want 0 and 1", s.Rejected, s.Refused)
	}
}

// A cancel read during replay is not answered: the counts are not final yet, and its producer
// asked a coordinator that has stopped.
func TestCancelNotAnsweredDuringReplay(t *testing.T) {
	t.Parallel()
	r := newReplayEngine(t, 1)
	e, names := r.e, r.names
	e.Feed(names.GroupSubject("g"), 1, wire.GroupControl{Group: "g", Op: wire.OpOpen}.Header(), nil, time.Time{})
	e.Feed(names.GroupSubject("g"), 2, wire.GroupControl{Group: "g", Op: wire.OpCancel, Reply: "tok"}.Header(), nil, time.Time{})
	e.Feed(names.GroupSubject("x"), 3, wire.GroupControl{Group: "x", Op: wire.OpCancel, Reply: "tok"}.Header(), nil, time.Time{})
	if len(e.out.Answers) != 0 {
		t.Fatalf("answered during replay: %+v", e.out.Answers)
	}
}

// A reply token that is not one subject token is malformed: the coordinator would otherwise
// publish its answer on a subject the producer chose.
func TestCancelWithBadReplyTokenRejected(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{})
	te.open("g")
	h := wire.Header(wire.GroupControl{Group: "g", Op: wire.OpCancel}.Header())
	h.Set(wire.HdrReply, "weave.group.g")
	te.seq++
	te.e.Feed(te.e.names.GroupSubject("g"), te.seq, h, nil, time.Time{})
	if len(te.answers()) != 0 || len(te.e.out.Rejections) != 1 {
		t.Fatalf("answers %+v, rejections %+v: want the message rejected", te.e.out.Answers, te.e.out.Rejections)
	}
}
