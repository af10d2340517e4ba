package engine

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weavejobs/weave/internal/wire"
)

// ready feeds the engine g's ready record with proof (its own when proof is "").
func (te *testEngine) ready(g string, incarnation uint64, proof string) {
	if proof == "" {
		proof = te.e.key.ReadyProof(g, incarnation)
	}
	c := wire.GroupControl{Group: g, Op: wire.OpReady, Incarnation: incarnation, Proof: proof}
	te.seq++
	te.e.Feed(te.e.names.GroupSubject(wire.GroupToken(g)), te.seq, c.Header(), wire.AppendAfterResults(nil, nil), time.Time{})
}

// TestReadyRecord: a group after another waits, with no job released, until its edge is met;
// the engine then asks for its ready record once and releases the group only when the record is
// read back; a record read again changes nothing, and one without a coordinator's proof is
// rejected and releases nothing.
func TestReadyRecord(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{Prefetch: -1})
	te.worker("w", 4)
	te.open("a")
	te.job(wire.JobMeta{Group: "a"})
	te.seal("a")
	bOpen := te.control(wire.GroupControl{Group: "b", Op: wire.OpOpen, After: []wire.After{{Group: "a"}}})
	te.job(wire.JobMeta{Group: "b"})
	te.seal("b")
	cOpen := te.control(wire.GroupControl{Group: "c", Op: wire.OpOpen, After: []wire.After{{Group: "b"}}})
	te.job(wire.JobMeta{Group: "c"})
	te.seal("c")

	rel := te.releases()["any"]
	if len(rel) != 1 || rel[0].g.id != "a" {
		t.Fatalf("released %d jobs (want a's only)", len(rel))
	}
	b, c := bOpen, cOpen
	if !te.e.isWaiting(b) || !te.e.isWaiting(c) || len(te.e.out.Readies) != 0 {
		t.Fatalf("b waiting %v, c waiting %v, readies %d", te.e.isWaiting(b), te.e.isWaiting(c), len(te.e.out.Readies))
	}
	te.report(rel[0], wire.StatusOK, "ok")
	if len(te.e.out.Readies) != 1 || te.e.out.Readies[0].OpenSeq != b {
		t.Fatalf("readies after a completed: %d", len(te.e.out.Readies))
	}
	if n := len(te.releases()["any"]); n != 0 {
		t.Fatalf("b released %d jobs before its ready record was read back", n)
	}
	te.e.out.Readies = nil

	// A forged record for c: rejected, c still waits.
	te.ready("c", cOpen, te.e.key.ReadyProof("c", cOpen+1))
	if !te.e.isWaiting(c) || !strings.Contains(te.lastRejection(), "without a coordinator's proof") {
		t.Fatalf("forged ready: c waiting %v, rejection %q", te.e.isWaiting(c), te.lastRejection())
	}
	te.ready("b", bOpen, "")
	rel = te.releases()["any"]
	if len(rel) != 1 || rel[0].g.openSeq != b || te.e.isWaiting(b) || te.e.stats.AfterReleased != 1 {
		t.Fatalf("after b's ready record: released %d, waiting %v, released groups %d", len(rel), te.e.isWaiting(b), te.e.stats.AfterReleased)
	}
	te.ready("b", bOpen, "") // stored twice (a coordinator writing it again after a restart)
	if n := len(te.releases()["any"]); n != 0 || te.e.stats.AfterReleased != 1 {
		t.Fatalf("a second ready record released %d jobs", n)
	}
	te.report(rel[0], wire.StatusPermanent, "boom")
	if len(te.e.out.DepCancels) != 1 || te.e.out.DepCancels[0].OpenSeq != c || te.e.CanceledFor(c) != "b" {
		t.Fatalf("b failed: cancels %d, c canceled for %q; want c canceled for b", len(te.e.out.DepCancels), te.e.CanceledFor(c))
	}
}

// TestPriorityGoesFirst: a group of a higher priority takes every slot it can use before groups
// of lower priorities, whatever least in-flight would share; the slots it cannot use (its jobs
// require what the pool lacks, or it has none left) go to the lower priorities.
func TestPriorityGoesFirst(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{Prefetch: -1, Feeders: 4})
	te.worker("w", 4)
	te.open("low")
	for range 6 {
		te.job(wire.JobMeta{Group: "low"})
	}
	te.control(wire.GroupControl{Group: "high", Op: wire.OpOpen, Priority: 5})
	for range 3 {
		te.job(wire.JobMeta{Group: "high"})
	}
	te.job(wire.JobMeta{Group: "high", Require: []string{"gpu"}}) // no pool can run it
	count := func(rel []*job) map[string]int {
		n := map[string]int{}
		for _, j := range rel {
			n[j.g.id]++
		}
		return n
	}
	got := count(te.releases()["any"])
	if got["high"] != 3 || got["low"] != 1 {
		t.Fatalf("released %v; want high's 3 runnable jobs first, then 1 of low's", got)
	}
}

// TestPriorityTakesFeederSlotFirst: with more groups waiting than feeder slots, a vacant slot goes
// to the waiting group of the highest priority, whatever order the groups came in; groups of one
// priority take slots in the order they came.
func TestPriorityTakesFeederSlotFirst(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{Prefetch: -1, Feeders: 1})
	for _, g := range []string{"a", "b"} {
		te.open(g)
		te.job(wire.JobMeta{Group: g})
	}
	te.control(wire.GroupControl{Group: "high", Op: wire.OpOpen, Priority: 5})
	te.job(wire.JobMeta{Group: "high"})
	te.seal("high")
	te.worker("w", 1)
	var order []string
	for range 3 {
		rel := te.releases()["any"]
		if len(rel) != 1 {
			t.Fatalf("released %d jobs after %v, want 1", len(rel), order)
		}
		order = append(order, rel[0].g.id)
		te.seal(rel[0].g.id)
		te.report(rel[0], wire.StatusOK, "ok")
	}
	if !slices.Equal(order, []string{"high", "a", "b"}) {
		t.Fatalf("groups took the feeder slot in the order %v, want high, a, b", order)
	}
}

// TestEdgeToAnotherGroupsIncarnation: an edge naming an incarnation that belongs to another group
// ID is not met by that incarnation's success: nothing says its own group's succeeded, so the
// waiting group is canceled (the default policy) rather than released.
func TestEdgeToAnotherGroupsIncarnation(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{Prefetch: -1})
	te.worker("w", 4)
	other := te.control(wire.GroupControl{Group: "other", Op: wire.OpOpen})
	te.job(wire.JobMeta{Group: "other"})
	te.seal("other")
	rel := te.releases()["any"]
	te.report(rel[0], wire.StatusOK, "ok")
	c := te.control(wire.GroupControl{Group: "c", Op: wire.OpOpen, After: []wire.After{{Group: "a", Incarnation: other}}})
	te.job(wire.JobMeta{Group: "c"})
	te.seal("c")
	if len(te.e.out.Readies) != 0 || len(te.e.out.DepCancels) != 1 || te.e.out.DepCancels[0].OpenSeq != c {
		t.Fatalf("readies %d, cancels %d: want c canceled, not made ready by group other's incarnation %d", len(te.e.out.Readies), len(te.e.out.DepCancels), other)
	}
}
