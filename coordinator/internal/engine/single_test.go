package engine

import (
	"testing"
	"time"

	"github.com/weavejobs/weave/internal/jobindex"
	"github.com/weavejobs/weave/internal/wire"
)

// TestSingleJob: one message opens a group, admits its job and seals it; the job runs and the
// group completes with its summary; a single job for a group that is open is refused, and one
// for a completed group's ID is a new incarnation.
func TestSingleJob(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{})
	te.worker("w", 4)
	id := te.job(wire.JobMeta{Group: "s", Key: "k", Single: true})
	g := te.e.group("s")
	if g == nil || !g.sealed || g.openSeq != id || g.admitted != 1 {
		t.Fatalf("single job's group: %+v", g)
	}
	got := te.releases()["any"]
	if len(got) != 1 || got[0].id != id {
		t.Fatalf("released %v, want the single job %d", ids(got), id)
	}
	te.report(got[0], wire.StatusOK, "r")
	if !g.complete || len(te.e.out.summaries) != 1 {
		t.Fatalf("single job's group did not complete: %+v", g)
	}

	te.open("open")
	te.job(wire.JobMeta{Group: "open", Single: true})
	if n := len(te.e.out.Rejections); n != 1 {
		t.Fatalf("a single job for an open group: %d rejections, want 1", n)
	}
	te.e.forget(g) // its summary is stored
	again := te.job(wire.JobMeta{Group: "s", Key: "k", Single: true})
	if g2 := te.e.group("s"); g2 == nil || g2 == g || g2.openSeq != again {
		t.Fatalf("a single job for a completed group's ID: %+v, want a new incarnation at %d", g2, again)
	}
}

// TestReplaySingleJob: replay rebuilds a single job's group as live admission built it.
func TestReplaySingleJob(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{})
	names, now := te.e.names, te.now
	e2 := te.restarted()
	e2.Feed(names.JobSubject("s"), 5, wire.JobMeta{Group: "s", Single: true}.Header(), nil, time.Time{})
	e2.EndReplay(nil, now)
	g := e2.group("s")
	if g == nil || !g.sealed || g.openSeq != 5 || g.admitted != 1 {
		t.Fatalf("replayed single job's group: %+v", g)
	}
	if st, _ := e2.idx.State(5); st != jobindex.Pending {
		t.Fatalf("replayed single job is %v", st)
	}
	joinAny(e2, now)
	e2.ReleaseAll()
	if len(e2.out.releases) != 1 {
		t.Fatalf("replayed single job not released: %+v", e2.out.releases)
	}
}

// singlePack stores a single pack of jobs of these groups and returns the jobs' IDs.
func (te *testEngine) singlePack(groups ...string) []uint64 {
	te.t.Helper()
	jobs := make([]wire.SinglePackJob, len(groups))
	for i, g := range groups {
		jobs[i] = wire.SinglePackJob{Group: g}
	}
	te.seq++
	te.e.Feed(te.e.names.SinglesSubject(), te.seq, wire.SinglePackHeader(len(groups), ""), wire.AppendSinglePack(nil, jobs), time.Time{})
	ids := make([]uint64, len(groups))
	for i := range ids {
		ids[i] = wire.PackedJobID(te.seq, i)
	}
	return ids
}

// TestSinglePack: each job of a single pack is a single job of its own group, whose incarnation
// is its packed ID; one whose group ID runs is refused alone, under its own ID. The group table
// orders the packed incarnations where their pack arrived: an open stored after the pack is its
// ID's latest incarnation, and the records are found by their incarnations.
func TestSinglePack(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{})
	te.open("busy")
	ids := te.singlePack("a", "busy", "b")
	for i, g := range []string{"a", "b"} {
		id := ids[[]int{0, 2}[i]]
		r := te.e.groups.table.latest(g)
		if r == nil || r.openSeq != id || r.lastSeq != id || r.flags&recSingle == 0 || r.flags&recSealed == 0 {
			t.Fatalf("group %s of the pack: %+v, want a sealed single job's record at %d", g, r, id)
		}
		if st := te.state(id); st != jobindex.Pending {
			t.Fatalf("job %d of group %s is %v", id, g, st)
		}
	}
	rj := te.e.out.Rejections
	if len(rj) != 1 || rj[0].Seq != ids[1] || rj[0].Subject != te.e.names.SinglesSubject() {
		t.Fatalf("rejections %+v, want the busy group's job alone, by its ID %d", rj, ids[1])
	}
	if len(te.e.out.RefusedOpens) != 1 || te.e.out.RefusedOpens[0].Seq != ids[1] {
		t.Fatalf("journaled refused opens %+v, want the busy group's job", te.e.out.RefusedOpens)
	}

	// An open after the pack: later by arrival, though its sequence is a smaller number.
	te.worker("w", 8)
	for _, j := range te.releases()["any"] {
		te.report(j, wire.StatusOK, "")
	}
	te.e.forget(te.e.group("a"))
	open := te.control(wire.GroupControl{Group: "a", Op: wire.OpOpen})
	if open >= ids[0] || !arrivedBefore(ids[0], open) {
		t.Fatalf("open %d, pack's job %d: want a smaller number that arrived later", open, ids[0])
	}
	if r := te.e.groups.table.latest("a"); r == nil || r.openSeq != open {
		t.Fatalf("group a's latest incarnation %+v, want the open at %d", r, open)
	}
	for _, id := range []uint64{ids[2], open} {
		if r := te.e.groups.table.get(id); r == nil || r.openSeq != id {
			t.Fatalf("record of incarnation %d: %+v", id, r)
		}
	}
}
