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
