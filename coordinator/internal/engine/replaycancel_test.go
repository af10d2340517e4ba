package engine

import (
	"reflect"
	"testing"
	"time"

	"github.com/weavejobs/weave/internal/jobindex"
	"github.com/weavejobs/weave/internal/wire"
)

// A cancel stored while no coordinator ran (or before a restart) is applied when replay ends:
// during replay the group's pending jobs are not in the scheduler yet, and they used to be
// scheduled again as if the cancel had never been.
func TestCancelReadDuringReplayApplies(t *testing.T) {
	t.Parallel()
	r := newReplayEngine(t, 1)
	e, names := r.e, r.names
	seq := uint64(0)
	feed := func(subject string, h map[string][]string) uint64 {
		seq++
		e.Feed(subject, seq, h, nil, time.Time{})
		return seq
	}
	control := func(c wire.GroupControl) uint64 { return feed(names.GroupSubject(c.Group), c.Header()) }
	job := func(g string) uint64 { return feed(names.JobSubject(g), wire.JobMeta{Group: g}.Header()) }

	control(wire.GroupControl{Group: "whole", Op: wire.OpOpen})
	w1, w2 := job("whole"), job("whole")
	control(wire.GroupControl{Group: "whole", Op: wire.OpSeal, Count: 2})
	control(wire.GroupControl{Group: "whole", Op: wire.OpCancel})

	control(wire.GroupControl{Group: "some", Op: wire.OpOpen})
	s1, s2 := job("some"), job("some")
	control(wire.GroupControl{Group: "some", Op: wire.OpSeal, Count: 2})
	control(wire.GroupControl{Group: "some", Op: wire.OpCancel, Jobs: []uint64{s1}})

	// A cancel before the group's seal seals it: a later job is refused, as live, and the
	// producer's own seal is accepted silently.
	control(wire.GroupControl{Group: "early", Op: wire.OpOpen})
	e0 := job("early")
	control(wire.GroupControl{Group: "early", Op: wire.OpCancel})
	late := job("early")
	control(wire.GroupControl{Group: "early", Op: wire.OpSeal, Count: 2})
	if len(e.out.Rejections) != 1 || e.out.Rejections[0].Seq != late {
		t.Errorf("rejections %+v, want only the job after the cancel (%d)", e.out.Rejections, late)
	}

	e.EndReplay(nil, time.Unix(1_700_000_000, 0))
	for _, tc := range []struct {
		id   uint64
		want jobindex.State
	}{{w1, jobindex.Canceled}, {w2, jobindex.Canceled}, {s1, jobindex.Canceled}, {s2, jobindex.Pending}, {e0, jobindex.Canceled}} {
		if st, _ := e.idx.State(tc.id); st != tc.want {
			t.Errorf("job %d is %v, want %v", tc.id, st, tc.want)
		}
	}
	complete := map[string]bool{}
	for _, g := range e.out.summaries {
		complete[g.id] = true
	}
	if !complete["whole"] || !complete["early"] || complete["some"] {
		t.Errorf("groups complete: %v, want whole and early", complete)
	}
	if len(e.out.Answers) != 0 {
		t.Errorf("answered cancels read during replay: %+v", e.out.Answers)
	}
}

// TestReplayRefusesCancelAfterCompletion: group "late" completed (its job failed: its messages
// are kept) and a cancel of it was stored after, while no coordinator ran; group "early" was
// canceled while it ran, and completed so. Replay refuses the late cancel as live (recorded,
// counted as refused, for the live reason) and leaves the early one alone: the summary names the
// last message its incarnation had. (Replay used to drop the late cancel silently.)
func TestReplayRefusesCancelAfterCompletion(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{Prefetch: -1})
	te.worker("w", 2)
	names := te.e.names
	var msgs []jobsMsg
	add := func(m jobsMsg) uint64 {
		msgs = append(msgs, m)
		feedFrom(te.e, uint64(len(msgs)), msgs[len(msgs)-1:])
		return uint64(len(msgs))
	}
	type done struct {
		g      *group
		report wire.Report
		out    wire.Outcome
	}
	var ended []done
	for _, id := range []string{"late", "early"} {
		add(controlMsg(names, wire.GroupControl{Group: id, Op: wire.OpOpen}))
		add(jobMsg(names, wire.JobMeta{Group: id}))
		add(controlMsg(names, wire.GroupControl{Group: id, Op: wire.OpSeal, Count: 1}))
		j := te.releases()["any"][0]
		st := wire.StatusPermanent
		if id == "early" {
			add(controlMsg(names, wire.GroupControl{Group: id, Op: wire.OpCancel}))
			st = wire.StatusCanceled
		}
		r := proven(te.e, "any", 0, wire.Report{ID: j.id, Attempt: 1, Status: st})
		g := te.e.group(id)
		te.e.Report("any", "w", j.id, r, te.now)
		if !g.complete {
			t.Fatalf("group %s did not complete", id)
		}
		ended = append(ended, done{g, r, g.outcomes[0]})
		te.e.forget(g) // its summary is stored
	}
	takeRejections(te.e)
	late := add(controlMsg(names, wire.GroupControl{Group: "late", Op: wire.OpCancel}))
	want := takeRejections(te.e)
	if len(want) != 1 || want[0].Seq != late || te.e.stats.Refused != 1 {
		t.Fatalf("live: rejections %+v, refused %d; want the late cancel refused", want, te.e.stats.Refused)
	}

	e := te.restarted()
	feedFrom(e, 1, msgs)
	for i, d := range ended {
		e.Report("any", "w", d.report.ID, d.report, te.now)
		e.OutcomeReplay(d.g.tok, d.g.openSeq, nil, nil, 0, uint64(2*i+1), te.now, false)
		e.OutcomeReplay(d.g.tok, d.g.openSeq, []wire.Outcome{d.out}, &wire.GroupSummary{Jobs: 1, Failed: d.g.failed, Canceled: d.g.canceled}, d.g.lastSeq, uint64(2*i+2), te.now, false)
	}
	e.EndReplay(nil, te.now)
	if got := takeRejections(e); !reflect.DeepEqual(got, want) {
		t.Errorf("replay rejected %+v, live %+v", got, want)
	}
	if e.stats.Refused != 1 || e.stats.Rejected != 0 {
		t.Errorf("replay: refused %d, rejected %d; want the late cancel refused", e.stats.Refused, e.stats.Rejected)
	}
	if len(e.out.purges) != 2 || len(e.out.summaries) != 0 {
		t.Errorf("replay: purges %d, summaries %d; want both groups purged, complete already", len(e.out.purges), len(e.out.summaries))
	}
}

// A cancel stored lately (within answerLateFor), read while a new coordinator replays, is
// answered when replay ends, with the counts it had then: its producer may still be waiting. An
// older one is not (its producer gave up, or a former coordinator answered); one refused as it
// was read (no open incarnation) is answered so.
func TestCancelReadDuringReplayAnsweredIfLate(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	cfg := withTestDefaults(Config{Now: func() time.Time { return now }})
	names, _ := wire.NewNames("weave")
	e, err := New(cfg, names, 2)
	if err != nil {
		t.Fatal(err)
	}
	seq := uint64(0)
	feed := func(subject string, h map[string][]string, stored time.Time) {
		seq++
		e.Feed(subject, seq, h, nil, stored)
	}
	group := func(g string) {
		feed(names.GroupSubject(g), wire.GroupControl{Group: g, Op: wire.OpOpen}.Header(), now)
		feed(names.JobSubject(g), wire.JobMeta{Group: g}.Header(), now)
		feed(names.JobSubject(g), wire.JobMeta{Group: g}.Header(), now)
		feed(names.GroupSubject(g), wire.GroupControl{Group: g, Op: wire.OpSeal, Count: 2}.Header(), now)
	}
	cancel := func(g, reply string, stored time.Time) uint64 {
		feed(names.GroupSubject(g), wire.GroupControl{Group: g, Op: wire.OpCancel, Reply: reply}.Header(), stored)
		return seq
	}
	group("now")
	group("old")
	recent := cancel("now", "r-now", now.Add(-time.Second))
	cancel("old", "r-old", now.Add(-answerLateFor-time.Second))
	unknown := cancel("unknown", "r-unknown", now.Add(-time.Second))
	if len(e.out.Answers) != 0 {
		t.Fatalf("answered during replay: %+v", e.out.Answers)
	}

	e.EndReplay(nil, now)
	got := map[string]wire.ControlAnswer{}
	for _, a := range e.out.Answers {
		got[a.Subject] = a.Reply
	}
	if a := got[names.ReplySubject("r-now")]; !a.OK || a.Canceled != 2 || a.Seq != recent || a.Op != wire.OpCancel || a.Group != "now" {
		t.Errorf("the recent cancel's answer %+v, want OK with 2 jobs canceled, for sequence %d", a, recent)
	}
	if a := got[names.ReplySubject("r-unknown")]; a.Code != wire.AnswerNotOpen || a.Seq != unknown {
		t.Errorf("the recent cancel of an unknown group's answer %+v, want not open, for sequence %d", a, unknown)
	}
	if a, ok := got[names.ReplySubject("r-old")]; ok {
		t.Errorf("an old cancel answered: %+v", a)
	}
	if len(got) != 2 {
		t.Errorf("answers %+v, want two", got)
	}
	if st, _ := e.idx.State(recent - 2); st != jobindex.Canceled {
		t.Errorf("a job of the recently canceled group is %v", st)
	}
}
