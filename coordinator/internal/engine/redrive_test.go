package engine

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weavejobs/weave/internal/jobindex"
	"github.com/weavejobs/weave/internal/wire"
)

// takeRedrives returns the redrive decisions recorded since the last call.
func takeRedrives(e *Engine) []RedriveOrder {
	out := e.out.Redrives
	e.out.Redrives = nil
	return out
}

func wantRefusal(t *testing.T, orders []RedriveOrder, code string, inc uint64) {
	t.Helper()
	if len(orders) != 1 || orders[0].Refuse == nil || orders[0].Refuse.Code != code || orders[0].Refuse.Incarnation != inc || !orders[0].Answer {
		t.Fatalf("decisions %+v, want one refusal %q naming incarnation %d", orders, code, inc)
	}
}

// The coordinator decides a redrive from its own state: running, nothing failed, accepted; while
// an accepted one starts, other requests and a producer's open are refused; a group whose summary
// is being stored is decided once it is retained.
func TestRedriveDecision(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{})
	e := te.e
	ask := func(g string, jobs ...uint64) uint64 {
		return te.control(wire.GroupControl{Group: g, Op: wire.OpRedrive, Reply: "t", Jobs: jobs})
	}

	ask("unknown")
	wantRefusal(t, takeRedrives(e), wire.AnswerNotFailed, 0)

	te.open("g")
	open := te.seq
	ask("g")
	wantRefusal(t, takeRedrives(e), wire.AnswerRunning, open)

	// Complete: its summary is being stored, so the request waits for it.
	g := e.group("g")
	te.seal("g")
	if !g.complete {
		t.Fatal("an empty sealed group did not complete")
	}
	req := ask("g", 7)
	if got := takeRedrives(e); len(got) != 0 {
		t.Fatalf("decided before the summary is stored: %+v", got)
	}
	e.retain("g", open, 40, true, te.seq, te.now, wire.GroupSummary{}, false)
	e.forget(g)
	got := takeRedrives(e)
	if len(got) != 1 || got[0].Refuse != nil || got[0].Ask.Seq != req || !slices.Equal(got[0].PrevOpens, []uint64{open}) || got[0].PrevSummary != 40 || len(got[0].Ask.Control.Jobs) != 1 {
		t.Fatalf("decisions %+v, want the acceptance of request %d for incarnation %d", got, req, open)
	}

	// Starting: another request and a producer's open are refused.
	ask("g")
	wantRefusal(t, takeRedrives(e), wire.AnswerRunning, 0)
	e.out.Rejections = nil
	te.open("g")
	if len(e.out.Rejections) != 1 || e.groups.table.latest("g") != nil {
		t.Fatalf("a producer's open while a redrive starts: rejections %+v", e.out.Rejections)
	}

	// Its open: the new incarnation, running.
	newOpen := te.control(wire.GroupControl{Group: "g", Op: wire.OpOpen, Redrive: req, Proof: e.key.RedriveProof("g", req)})
	if ng := e.group("g"); ng == nil || ng.openSeq != newOpen || len(e.rd.starting) != 0 {
		t.Fatalf("redrive open: group %+v, starting %v", ng, e.rd.starting)
	}
	ask("g")
	wantRefusal(t, takeRedrives(e), wire.AnswerRunning, newOpen)

	// A complete incarnation without failures has nothing to redrive.
	e.retain("clean", 90, 91, false, 92, te.now, wire.GroupSummary{}, false)
	ask("clean")
	wantRefusal(t, takeRedrives(e), wire.AnswerNotFailed, 0)

	// A later incarnation without failures (a redrive of some of the jobs that succeeded) leaves
	// the earlier one's failed jobs to run again: every retained incarnation is read.
	e.retain("twice", 100, 101, true, 102, te.now, wire.GroupSummary{}, false)
	e.retain("twice", 110, 111, false, 112, te.now, wire.GroupSummary{}, false)
	twice := ask("twice")
	if got := takeRedrives(e); len(got) != 1 || got[0].Refuse != nil || !slices.Equal(got[0].PrevOpens, []uint64{110, 100}) || got[0].PrevSummary != 111 {
		t.Fatalf("decisions %+v, want the acceptance over incarnations 110 and 100", got)
	}

	// Every refusal of a redrive counts as refused, not as rejected input: the five decided
	// here, and one the publication decides (every failed job ran again and succeeded, say).
	// The one rejection is the producer's open of a group being redriven.
	refused := e.stats.Refused
	e.RedriveEnded(RedriveEnd{Group: "twice", Req: twice})
	if refused != 5 || e.stats.Refused != 6 || e.stats.Rejected != 1 {
		t.Fatalf("%d refused (then %d after a late refusal), %d rejected; want 5, 6 and 1", refused, e.stats.Refused, e.stats.Rejected)
	}
}

// Replay rebuilds redrive decisions from JOBS: a request followed by its open was accepted, and
// an unsealed incarnation it opened resumes its publication (unanswered); a request without its
// open was never answered and is decided when replay ends.
func TestRedriveReplay(t *testing.T) {
	t.Parallel()
	r := newReplayEngine(t, 1)
	e := r.e
	r.control(1, wire.GroupControl{Group: "a", Op: wire.OpOpen})
	r.control(2, wire.GroupControl{Group: "a", Op: wire.OpSeal})
	e.retain("a", 1, 10, true, 2, time.Unix(1_700_000_000, 0), wire.GroupSummary{}, false)
	r.control(3, wire.GroupControl{Group: "a", Op: wire.OpRedrive, Reply: "r1", Jobs: []uint64{5}})
	r.control(4, wire.GroupControl{Group: "a", Op: wire.OpOpen, Redrive: 3, Proof: e.key.RedriveProof("a", 3)})
	r.control(6, wire.GroupControl{Group: "a", Op: wire.OpRedrive, Reply: "r2"})

	r.control(7, wire.GroupControl{Group: "b", Op: wire.OpOpen})
	r.control(8, wire.GroupControl{Group: "b", Op: wire.OpSeal})
	e.retain("b", 7, 11, true, 8, time.Unix(1_700_000_000, 0), wire.GroupSummary{}, false)
	r.control(9, wire.GroupControl{Group: "b", Op: wire.OpRedrive, Reply: "r3"})

	if got := takeRedrives(e); len(got) != 0 {
		t.Fatalf("decided during replay: %+v", got)
	}
	e.EndReplay(nil, time.Unix(1_700_000_000, 0))
	got := takeRedrives(e)
	if len(got) != 3 {
		t.Fatalf("decisions after replay: %+v, want 3", got)
	}
	if o := got[0]; o.Refuse != nil || o.OpenSeq != 4 || o.Ask.Seq != 3 || !slices.Equal(o.PrevOpens, []uint64{1}) || o.PrevSummary != 10 || o.Answer || len(o.Ask.Control.Jobs) != 1 {
		t.Fatalf("first decision %+v, want the resumed publication of incarnation 4 for request 3", o)
	}
	wantRefusal(t, got[1:2], wire.AnswerRunning, 4)
	if o := got[2]; o.Refuse != nil || o.Ask.Seq != 9 || o.OpenSeq != 0 || !slices.Equal(o.PrevOpens, []uint64{7}) || !o.Answer {
		t.Fatalf("third decision %+v, want the acceptance of request 9", o)
	}
	if e.rd.starting["b"] != 9 || e.rd.replayAsks != nil || e.rd.replayOpen != nil {
		t.Fatalf("state after replay: %+v", e.rd)
	}
}

// TestRedriveNeedsTheCoordinatorsProof: an open carrying Weave-Redrive is a coordinator's
// acceptance of a redrive only with its proof, and the jobs of an incarnation a redrive opened are
// the coordinator's alone: a producer cannot open one, nor add a job to one (which would settle a
// failed job by its Weave-Redrive-Of).
func TestRedriveNeedsTheCoordinatorsProof(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{})
	e := te.e
	te.control(wire.GroupControl{Group: "f", Op: wire.OpOpen, Redrive: 50})
	te.control(wire.GroupControl{Group: "f", Op: wire.OpOpen, Redrive: 50, Proof: e.key.RedriveProof("f", 51)})
	if e.groups.table.latest("f") != nil || !strings.Contains(te.lastRejection(), "without a coordinator's proof") {
		t.Fatalf("an unproven redrive open: group %+v, last rejection %q", e.groups.table.latest("f"), te.lastRejection())
	}
	open := te.control(wire.GroupControl{Group: "g", Op: wire.OpOpen, Redrive: 50, Proof: e.key.RedriveProof("g", 50)})
	if r := e.groups.table.latest("g"); r == nil || r.openSeq != open || r.flags&recRedriven == 0 {
		t.Fatalf("a proven redrive open: group %+v", r)
	}
	job := func(redriveOf uint64, proof string) bool { // admitted
		te.seq++
		h := wire.Header(wire.JobMeta{Group: "g", RedriveOf: redriveOf}.Header())
		if proof != "" {
			h.Set(wire.HdrProof, proof)
		}
		e.Feed(e.names.JobSubject(wire.GroupToken("g")), te.seq, h, nil, time.Time{})
		st, known := e.idx.State(te.seq)
		return known && st == jobindex.Pending
	}
	for name, admitted := range map[string]bool{
		"no Weave-Redrive-Of":      job(0, ""),
		"no proof":                 job(7, ""),
		"another failed job's":     job(8, e.key.RedriveJobProof("g", open, 7)),
		"another incarnation's":    job(7, e.key.RedriveJobProof("g", open+1, 7)),
		"a ready record's instead": job(7, e.key.ReadyProof("g", open)),
	} {
		if admitted {
			t.Errorf("a job with %s was admitted", name)
		}
	}
	if !job(7, e.key.RedriveJobProof("g", open, 7)) {
		t.Fatal("the coordinator's redriven job was not admitted")
	}
	te.seq++
	e.Feed(e.names.JobSubject(wire.GroupToken("g")), te.seq, wire.PackHeader("g", 2, 0), wire.AppendPack(nil, []wire.PackJob{{}, {}}), time.Time{})
	if _, known := e.idx.State(wire.PackedJobID(te.seq, 0)); known {
		t.Fatal("a pack was admitted into an incarnation a redrive opened")
	}
}
