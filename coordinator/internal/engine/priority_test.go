package engine

import (
	"slices"
	"testing"
	"time"

	"github.com/weavejobs/weave/internal/wire"
)

// TestJobPriorityInLimitLine: a job of a higher priority that a limit holds back waits in the
// limit's line ahead of its group's jobs of lower priorities held before it, and is the first the
// line offers when the limit has room.
func TestJobPriorityInLimitLine(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{Feeders: 1, Prefetch: -1})
	te.e.SetLimit(wire.Limit{Kind: wire.LimitGroup, Name: "g", Concurrency: 1}, te.now)
	te.open("g")
	for range 4 {
		te.job(wire.JobMeta{Group: "g"})
	}
	te.worker("w", 4)
	first := te.releases()["any"]
	if len(first) != 1 {
		t.Fatalf("released %d jobs under a limit of 1", len(first))
	}
	urgent := te.job(wire.JobMeta{Group: "g", Priority: 5})
	if got := te.releases()["any"]; len(got) != 0 {
		t.Fatalf("released %v past the limit", ids(got))
	}
	ls := te.e.limits.byKey[limitKey{wire.LimitGroup, "g"}]
	if ls.held != 4 {
		t.Fatalf("the limit holds %d jobs back, want 4", ls.held)
	}
	te.report(first[0], wire.StatusOK, "")
	if got := te.releases()["any"]; len(got) != 1 || got[0].id != urgent {
		t.Fatalf("the limit's room released %v, want the priority-5 job %d", ids(got), urgent)
	}
}

// TestJobPriorityAcrossReplay: a coordinator that takes over releases a group's pending jobs in
// the order of their priorities, read back from the stored messages, packs included.
func TestJobPriorityAcrossReplay(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{Feeders: 1, Prefetch: -1})
	names, now := te.e.names, te.now
	e2 := te.restarted()
	e2.Feed(names.GroupSubject("g"), 1, wire.GroupControl{Group: "g", Op: wire.OpOpen}.Header(), nil, time.Time{})
	e2.Feed(names.JobSubject("g"), 2, wire.JobMeta{Group: "g"}.Header(), nil, time.Time{})
	e2.Feed(names.JobSubject("g"), 3, wire.PackHeader("g", 2, 4), wire.AppendPack(nil, []wire.PackJob{{}, {}}), time.Time{})
	e2.Feed(names.JobSubject("g"), 4, wire.JobMeta{Group: "g", Priority: 9}.Header(), nil, time.Time{})
	e2.Feed(names.GroupSubject("g"), 5, wire.GroupControl{Group: "g", Op: wire.OpSeal, Count: 4}.Header(), nil, time.Time{})
	e2.EndReplay(nil, now)
	var order []uint64
	for range 4 {
		e2.Heartbeat(names.HeartbeatSubject("any", "w"), wire.Heartbeat{Version: wire.Version, Worker: "w", Pool: "any", Concurrency: 1, IntervalMS: 1000}, now)
		e2.ReleaseAll()
		if len(e2.out.releases) != 1 || len(e2.out.releases[0].jobs) != 1 {
			t.Fatalf("released %+v after %v, want one job", e2.out.releases, order)
		}
		j := e2.out.releases[0].jobs[0]
		order = append(order, j.id)
		e2.out = Effects{}
		e2.Report("any", "w", uint64(len(order)), proven(e2, "any", j.rel, wire.Report{ID: j.id, Attempt: j.attempt, Status: wire.StatusOK}), now)
	}
	if want := []uint64{4, wire.PackedJobID(3, 0), wire.PackedJobID(3, 1), 2}; !slices.Equal(order, want) {
		t.Fatalf("released %v, want %v", order, want)
	}
	if e2.prio.n != 0 {
		t.Fatalf("%d priorities kept after every job ended", e2.prio.n)
	}
}

// TestUrgentGroupTakesASlotBeyondTheFeeders: a group of a higher priority than the group holding
// the only feeder slot does not wait for that group to hand out its last job: it takes a slot of
// its own, which closes when it leaves. A group of the same priority waits.
func TestUrgentGroupTakesASlotBeyondTheFeeders(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{Feeders: 1, Prefetch: -1})
	te.open("big")
	for range 10 {
		te.job(wire.JobMeta{Group: "big"})
	}
	te.worker("w", 1)
	running := te.releases()["any"]
	if len(running) != 1 || running[0].g.id != "big" {
		t.Fatalf("released %v, want one of big's jobs", ids(running))
	}
	te.open("peer") // priority 0, as big: waits for the slot
	te.job(wire.JobMeta{Group: "peer"})
	te.control(wire.GroupControl{Group: "urgent", Op: wire.OpOpen, Priority: 5})
	urgent := te.job(wire.JobMeta{Group: "urgent"})
	te.seal("urgent")
	te.report(running[0], wire.StatusOK, "")
	got := te.releases()["any"]
	if len(got) != 1 || got[0].id != urgent {
		t.Fatalf("after big's first job released %v, want urgent's job %d", ids(got), urgent)
	}
	te.report(got[0], wire.StatusOK, "")
	got = te.releases()["any"]
	if len(got) != 1 || got[0].g.id != "big" {
		t.Fatalf("after urgent's job released %v, want big's next (peer waits for the slot)", ids(got))
	}
	if n := te.e.sched.Extra(); n != 0 {
		t.Fatalf("%d groups beyond the feeders once urgent handed out its job, want 0", n)
	}
}
