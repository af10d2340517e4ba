package engine

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weavejobs/weave/internal/jobindex"
	"github.com/weavejobs/weave/internal/journal"
	"github.com/weavejobs/weave/internal/wire"
)

// jobsMsg is a JOBS message as a test stores it.
type jobsMsg struct {
	subject string
	h       nats.Header
}

func controlMsg(names wire.Names, c wire.GroupControl) jobsMsg {
	return jobsMsg{names.GroupSubject(wire.GroupToken(c.Group)), c.Header()}
}

func jobMsg(names wire.Names, m wire.JobMeta) jobsMsg {
	return jobsMsg{names.JobSubject(wire.GroupToken(m.Group)), m.Header()}
}

// testKey is the release key of the engines tests make (newEngine leaves it zero).
var testKey wire.ReleaseKey

// redrivenJobMsg is the message of a job a coordinator publishes for a redrive, in the incarnation
// opened at incarnation: its Weave-Redrive-Of with the coordinator's proof.
func redrivenJobMsg(names wire.Names, m wire.JobMeta, incarnation uint64) jobsMsg {
	msg := jobMsg(names, m)
	msg.h.Set(wire.HdrProof, testKey.RedriveJobProof(m.Group, incarnation, m.RedriveOf))
	return msg
}

// feedFrom feeds msgs to e at the JOBS sequences from first on.
func feedFrom(e *Engine, first uint64, msgs []jobsMsg) {
	for i, m := range msgs {
		e.Feed(m.subject, first+uint64(i), m.h, nil, time.Time{})
	}
}

// takeRejections returns the rejections e recorded (sequence and reason), and clears them.
func takeRejections(e *Engine) []Rejection {
	rj := e.out.Rejections
	e.out.Rejections = nil
	return rj
}

// deferredCase is a group g whose first incarnation (open 1, jobs 2 and 3, seal 4) runs job 2
// (none if idle) and has job 3 pending, then inputs stored after it from 5 on, and reports about
// them (EVENTS 30 on). live returns the engine that read them as they came; replayed the engine
// of a coordinator that started after they were stored, with alive the jobs in WORK.
type deferredCase struct {
	t       *testing.T
	idle    bool
	inputs  []jobsMsg
	reports []wire.Report
	now     time.Time
}

func (dc *deferredCase) first(names wire.Names) []jobsMsg {
	return []jobsMsg{
		controlMsg(names, wire.GroupControl{Group: "g", Op: wire.OpOpen}),
		jobMsg(names, wire.JobMeta{Group: "g"}),
		jobMsg(names, wire.JobMeta{Group: "g"}),
		controlMsg(names, wire.GroupControl{Group: "g", Op: wire.OpSeal, Count: 2}),
	}
}

func (dc *deferredCase) live() *Engine {
	te := newTestEngine(dc.t, Config{Prefetch: -1})
	dc.now = te.now
	feedFrom(te.e, 1, dc.first(te.e.names))
	if !dc.idle {
		te.worker("w", 1)
		if rel := te.releases()["any"]; len(rel) != 1 || rel[0].id != 2 {
			dc.t.Fatalf("released %v, want job 2", ids(rel))
		}
	}
	feedFrom(te.e, 5, dc.inputs)
	for i, r := range dc.reports {
		te.e.Report("any", "w", 30+uint64(i), r, te.now)
	}
	return te.e
}

func (dc *deferredCase) replayed(alive map[uint64]AliveJob) *Engine {
	te := newTestEngine(dc.t, Config{Prefetch: -1})
	e := te.restarted()
	feedFrom(e, 1, dc.first(e.names))
	feedFrom(e, 5, dc.inputs)
	for i, r := range dc.reports {
		e.Report("any", "w", 30+uint64(i), r, te.now)
	}
	if alive == nil && !dc.idle {
		alive = map[uint64]AliveJob{2: {Attempt: 1, Pool: "any"}}
	}
	e.EndReplay(alive, te.now)
	return e
}

// TestReplayRefusesOpenOfRunningGroup: an open, its jobs, keep-alive and seal, and a single job,
// stored for group g while its sealed incarnation runs and no coordinator reads them, are
// refused when the next coordinator replays them, as the live coordinator refuses them: the same
// messages, for the same reasons, counted the same; the running incarnation is unchanged and a
// forged report about the refused job is stale, as live. (Replay used to open a new
// incarnation: the producer's open replaced the running one.) An open a coordinator accepted
// before stays.
func TestReplayRefusesOpenOfRunningGroup(t *testing.T) {
	t.Parallel()
	names, _ := wire.NewNames("")
	dc := &deferredCase{t: t, inputs: []jobsMsg{
		controlMsg(names, wire.GroupControl{Group: "g", Op: wire.OpOpen}),      // 5
		jobMsg(names, wire.JobMeta{Group: "g", Key: "forged"}),                 // 6
		controlMsg(names, wire.GroupControl{Group: "g", Op: wire.OpKeepAlive}), // 7
		controlMsg(names, wire.GroupControl{Group: "g", Op: wire.OpSeal, Count: 1}),
		jobMsg(names, wire.JobMeta{Group: "g", Single: true}), // 9
	}, reports: []wire.Report{{ID: 6, Attempt: 1, Status: wire.StatusOK, Data: []byte("forged")}}}
	live := dc.live()
	want := takeRejections(live)
	if len(want) != 5 {
		t.Fatalf("live rejections %+v, want the 5 inputs", want)
	}
	e := dc.replayed(nil)
	if got := takeRejections(e); !reflect.DeepEqual(got, want) {
		t.Errorf("replay rejected\n%+v\nlive\n%+v", got, want)
	}
	for _, s := range []struct {
		name      string
		got, want uint64
	}{{"rejected", e.stats.Rejected, live.stats.Rejected}, {"admitted", e.stats.Admitted, live.stats.Admitted},
		{"stale reports", e.stats.StaleReports, live.stats.StaleReports}, {"rejected reports", e.stats.RejectedReports, live.stats.RejectedReports}} {
		if s.got != s.want {
			t.Errorf("%s: %d after replay, %d live", s.name, s.got, s.want)
		}
	}
	g := e.group("g")
	if g == nil || g.openSeq != 1 || e.groups.table.len() != 1 || len(e.groups.unsealed) != 0 {
		t.Fatalf("group g after replay: %+v, %d incarnations", g, e.groups.table.len())
	}
	for id, want := range map[uint64]jobindex.State{2: jobindex.Running, 3: jobindex.Pending} {
		if st, _ := e.idx.State(id); st != want {
			t.Errorf("job %d is %v, want %v", id, st, want)
		}
	}
	for _, id := range []uint64{6, 9} {
		if st, ok := e.idx.State(id); ok {
			t.Errorf("refused job %d is %v", id, st)
		}
	}
	// The running incarnation's pending job is offered as before, and nothing else.
	joinAny(e, dc.now)
	e.ReleaseAll()
	var released []uint64
	for _, r := range e.out.releases {
		for _, j := range r.jobs {
			released = append(released, j.id)
		}
	}
	if !slices.Equal(released, []uint64{3}) {
		t.Errorf("released %v after replay, want job 3", released)
	}

	// Had a coordinator released the open's job (accepted it: before this release), it stays;
	// the single job after it is refused, as the open incarnation is not complete.
	dc.reports = nil // a report from pool any would now be about a job released to it
	e = dc.replayed(map[uint64]AliveJob{2: {Attempt: 1, Pool: "any"}, 6: {Attempt: 1, Pool: "any"}})
	if got := takeRejections(e); len(got) != 1 || got[0] != want[4] {
		t.Errorf("with job 6 released, replay rejected %+v, want only the single job", got)
	}
	if r := e.groups.table.latest("g"); r == nil || r.openSeq != 5 || e.groups.table.len() != 2 {
		t.Errorf("with job 6 released, group g is %+v, want the incarnation opened at 5 kept", r)
	}
	if st, _ := e.idx.State(6); st != jobindex.Running {
		t.Errorf("with job 6 released, job 6 is %v, want running", st)
	}
}

// TestReplayDeferredCancelGoesToRunningGroup: a cancel stored after a refused open is, as live, the
// running incarnation's: its pending job ends canceled and its running one is told to stop.
func TestReplayDeferredCancelGoesToRunningGroup(t *testing.T) {
	t.Parallel()
	names, _ := wire.NewNames("")
	dc := &deferredCase{t: t, inputs: []jobsMsg{
		controlMsg(names, wire.GroupControl{Group: "g", Op: wire.OpOpen}),
		jobMsg(names, wire.JobMeta{Group: "g"}),
		controlMsg(names, wire.GroupControl{Group: "g", Op: wire.OpCancel}), // 7
	}}
	live := dc.live()
	want := takeRejections(live)
	e := dc.replayed(nil)
	if got := takeRejections(e); !reflect.DeepEqual(got, want) || len(want) != 2 {
		t.Errorf("replay rejected %+v, live %+v; want the open and its job", got, want)
	}
	for _, eng := range []*Engine{live, e} {
		if st, _ := eng.idx.State(3); st != jobindex.Canceled || !slices.Equal(eng.out.Cancels, []uint64{2}) {
			t.Errorf("job 3 is %v and cancels %v, want canceled and job 2 told to stop", st, eng.out.Cancels)
		}
		if g := eng.group("g"); g == nil || g.openSeq != 1 || !g.cancelReq || g.lastSeq != 7 {
			t.Errorf("group g: %+v, want the first incarnation canceled, through the cancel at 7", g)
		}
	}
}

// TestReplayDeferredOpenAfterCancelCompletes: a cancel that completes the incarnation before lets
// the open after it start the next, live and at replay; the open before it is refused.
func TestReplayDeferredOpenAfterCancelCompletes(t *testing.T) {
	t.Parallel()
	names, _ := wire.NewNames("")
	dc := &deferredCase{t: t, idle: true, inputs: []jobsMsg{
		controlMsg(names, wire.GroupControl{Group: "g", Op: wire.OpOpen}),   // 5: refused
		controlMsg(names, wire.GroupControl{Group: "g", Op: wire.OpCancel}), // 6
		controlMsg(names, wire.GroupControl{Group: "g", Op: wire.OpOpen}),   // 7
		jobMsg(names, wire.JobMeta{Group: "g"}),                             // 8
		controlMsg(names, wire.GroupControl{Group: "g", Op: wire.OpSeal, Count: 1}),
	}}
	live := dc.live()
	want := takeRejections(live)
	e := dc.replayed(nil)
	if got := takeRejections(e); !reflect.DeepEqual(got, want) || len(want) != 1 || want[0].Seq != 5 {
		t.Errorf("replay rejected %+v, live %+v; want the open at 5", got, want)
	}
	for _, eng := range []*Engine{live, e} {
		if g := eng.group("g"); g == nil || g.openSeq != 7 || g.admitted != 1 || !g.sealed {
			t.Errorf("group g: %+v, want the incarnation opened at 7 with its job, sealed", g)
		}
		if st, _ := eng.idx.State(8); st != jobindex.Pending {
			t.Errorf("job 8 is %v, want pending", st)
		}
		if len(eng.out.summaries) != 1 || eng.out.summaries[0].openSeq != 1 {
			t.Errorf("summaries %+v, want the canceled first incarnation's", eng.out.summaries)
		}
	}
}

// TestReplayRefusesAgainAnOpenRefusedLive: a coordinator refused an open of group g while g's
// sealed incarnation ran, journaled the refusal, and died before deleting the messages; g's
// incarnation then completed. The next coordinator's replay finds the open after a complete
// incarnation, which alone would keep it, but refuses it with its job and seal, as live did. The
// refusal is journaled live and only live.
func TestReplayRefusesAgainAnOpenRefusedLive(t *testing.T) {
	t.Parallel()
	names, _ := wire.NewNames("")
	msgs := []jobsMsg{
		controlMsg(names, wire.GroupControl{Group: "g", Op: wire.OpOpen}),           // 1
		jobMsg(names, wire.JobMeta{Group: "g"}),                                     // 2
		controlMsg(names, wire.GroupControl{Group: "g", Op: wire.OpSeal, Count: 1}), // 3
		controlMsg(names, wire.GroupControl{Group: "g", Op: wire.OpOpen}),           // 4: refused live
		jobMsg(names, wire.JobMeta{Group: "g"}),                                     // 5
		controlMsg(names, wire.GroupControl{Group: "g", Op: wire.OpSeal, Count: 1}), // 6
	}
	live := newTestEngine(t, Config{})
	feedFrom(live.e, 1, msgs)
	if got := live.e.out.RefusedOpens; len(got) != 1 || got[0].Seq != 4 {
		t.Fatalf("live journals refused opens %+v, want the open at 4", got)
	}
	replay := func(journaled bool) *Engine {
		e := live.restarted()
		feedFrom(e, 1, msgs)
		if journaled {
			e.JournalRecord(journal.Record{Kind: journal.KindRefusedOpen, Epoch: 1, Entries: []journal.Entry{{Seq: 4}}})
		}
		e.Report("any", "w", 30, proven(e, "any", 0, wire.Report{ID: 2, Attempt: 1, Status: wire.StatusOK}), live.now)
		e.EndReplay(map[uint64]AliveJob{2: {Attempt: 1, Pool: "any"}}, live.now)
		// Its decision at the end is journaled again, so the next replay needs no older record.
		if refused := len(e.out.RefusedOpens) == 1 && e.out.RefusedOpens[0].Seq == 4; refused != journaled {
			t.Fatalf("replay journaled refused opens %+v, want the open at 4 iff it refused it", e.out.RefusedOpens)
		}
		return e
	}
	e := replay(true)
	var seqs []uint64
	for _, rj := range takeRejections(e) {
		seqs = append(seqs, rj.Seq)
	}
	if r := e.groups.table.latest("g"); r == nil || r.openSeq != 1 || !slices.Equal(seqs, []uint64{4, 5, 6}) {
		t.Fatalf("after replay g's latest incarnation %+v, rejections %v; want 1, and 4 to 6 refused", r, seqs)
	}
	if r := replay(false).groups.table.latest("g"); r == nil || r.openSeq != 4 {
		t.Fatalf("without the journal record g's latest incarnation is %+v, want the open at 4 kept", r)
	}
}
