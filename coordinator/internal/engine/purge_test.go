package engine

import (
	"testing"
	"time"

	"github.com/weavejobs/weave/internal/wire"
)

// TestSingleGroup: a single job's group, its open its one message in JOBS, is single (its message
// is deleted by sequence); one with a cancel stored after it is not (purged by subject, the cancel
// with it), nor a group of one job.
func TestSingleGroup(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{})
	id := te.job(wire.JobMeta{Group: "s", Single: true})
	canceled := te.job(wire.JobMeta{Group: "c", Single: true, RunAt: te.now.Add(time.Hour)})
	te.control(wire.GroupControl{Group: "c", Op: wire.OpCancel, Jobs: []uint64{canceled}})
	te.open("g")
	te.job(wire.JobMeta{Group: "g"})
	te.seal("g")
	if g := te.e.group("s"); !g.single() || g.openSeq != id {
		t.Fatalf("single job's group: single %v, open %d, want %d", g.single(), g.openSeq, id)
	}
	if c := te.e.group("c"); !c.complete || c.single() {
		t.Fatalf("a single job canceled by a later message: complete %v, single %v; want complete and not single", c.complete, c.single())
	}
	if te.e.group("g").single() {
		t.Fatal("a group of one job taken for a single job")
	}
}
