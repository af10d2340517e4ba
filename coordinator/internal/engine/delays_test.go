package engine

import (
	"slices"
	"testing"
	"time"

	"github.com/weavejobs/weave/internal/jobindex"
	"github.com/weavejobs/weave/internal/wire"
)

// TestDelayedJobWaitsForItsTime: a delayed job is not released before its time, holds no feeder
// slot while it waits (another group runs in the only one), keeps its sealed group from
// completing, and is released when its time comes.
func TestDelayedJobWaitsForItsTime(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{Feeders: 1})
	te.worker("w", 4)
	te.open("later")
	late := te.job(wire.JobMeta{Group: "later", RunAt: te.now.Add(10 * time.Second)})
	te.seal("later")
	te.open("now")
	first := te.job(wire.JobMeta{Group: "now"})
	te.seal("now")
	if st := te.state(late); st != jobindex.Delayed {
		t.Fatalf("delayed job is %v", st)
	}
	got := te.releases()["any"]
	if len(got) != 1 || got[0].id != first {
		t.Fatalf("released %v, want only job %d: the delayed group must not hold the only feeder slot", ids(got), first)
	}
	te.report(got[0], wire.StatusOK, "")
	te.now = te.now.Add(9 * time.Second)
	te.worker("w", 4) // still there
	te.e.Tick(te.now)
	if got := te.releases(); len(got) != 0 {
		t.Fatalf("released %v a second before its time", got)
	}
	if g := te.e.group("later"); g.complete {
		t.Fatal("a sealed group with a delayed job completed")
	}
	if due := te.e.delays.nextDue(); !due.Equal(te.now.Add(time.Second)) {
		t.Fatalf("next due %v, want %v", due, te.now.Add(time.Second))
	}
	te.now = te.now.Add(time.Second)
	te.worker("w", 4)
	te.e.Tick(te.now)
	got = te.releases()["any"]
	if len(got) != 1 || got[0].id != late {
		t.Fatalf("released %v at its time, want job %d", ids(got), late)
	}
	te.report(got[0], wire.StatusOK, "")
	if g := te.e.group("later"); !g.complete || g.done != 1 {
		t.Fatalf("group not complete after its delayed job ran: %+v", g)
	}
}

// TestDelayedJobsInOrderOfTime: jobs delayed to different times become pending in time order and
// each joins the end of its group's queue; a job whose time has passed is pending at once.
func TestDelayedJobsInOrderOfTime(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{})
	te.open("g")
	b := te.job(wire.JobMeta{Group: "g", RunAt: te.now.Add(2 * time.Second)})
	a := te.job(wire.JobMeta{Group: "g", RunAt: te.now.Add(time.Second)})
	past := te.job(wire.JobMeta{Group: "g", RunAt: te.now.Add(-time.Second)})
	te.seal("g")
	if st := te.state(past); st != jobindex.Pending {
		t.Fatalf("job delayed to the past is %v, want pending", st)
	}
	te.now = te.now.Add(3 * time.Second)
	te.e.Tick(te.now)
	te.worker("w", 1)
	var order []uint64
	for len(order) < 3 {
		got := te.releases()["any"]
		if len(got) == 0 {
			t.Fatalf("stalled after %v", order)
		}
		for _, j := range got {
			order = append(order, j.id)
			te.report(j, wire.StatusOK, "")
		}
	}
	if want := []uint64{past, a, b}; !slices.Equal(order, want) {
		t.Fatalf("released in order %v, want %v", order, want)
	}
}

// TestCancelDelayedJobs: a cancel of a delayed job, or of its whole group, ends it canceled at
// once; its time coming later changes nothing.
func TestCancelDelayedJobs(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{})
	te.worker("w", 4)
	te.open("g")
	one := te.job(wire.JobMeta{Group: "g", RunAt: te.now.Add(time.Minute)})
	two := te.job(wire.JobMeta{Group: "g", RunAt: te.now.Add(time.Minute)})
	te.seal("g")
	te.control(wire.GroupControl{Group: "g", Op: wire.OpCancel, Jobs: []uint64{one}})
	if st := te.state(one); st != jobindex.Canceled {
		t.Fatalf("canceled delayed job is %v", st)
	}
	if st := te.state(two); st != jobindex.Delayed {
		t.Fatalf("the other delayed job is %v", st)
	}
	te.open("h")
	three := te.job(wire.JobMeta{Group: "h", RunAt: te.now.Add(time.Minute)})
	te.control(wire.GroupControl{Group: "h", Op: wire.OpCancel})
	if st := te.state(three); st != jobindex.Canceled {
		t.Fatalf("delayed job of a canceled group is %v", st)
	}
	if h := te.e.group("h"); !h.complete {
		t.Fatal("canceled group with a delayed job did not complete")
	}
	te.now = te.now.Add(2 * time.Minute)
	te.worker("w", 4)
	te.e.Tick(te.now)
	got := te.releases()["any"]
	if len(got) != 1 || got[0].id != two {
		t.Fatalf("released %v, want only job %d", ids(got), two)
	}
	if st := te.state(one); st != jobindex.Canceled {
		t.Fatalf("canceled job moved to %v when its time came", st)
	}
}

// TestReplayKeepsDelayedJobs: after a restart a delayed job is delayed again until its time, and
// one released before the restart (due by the clock of the coordinator that released it) is
// running in its batch's pool.
func TestReplayKeepsDelayedJobs(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{})
	names, now := te.e.names, te.now
	e2 := te.restarted()
	e2.Feed(names.GroupSubject("g"), 1, wire.GroupControl{Group: "g", Op: wire.OpOpen}.Header(), nil, time.Time{})
	e2.Feed(names.JobSubject("g"), 2, wire.JobMeta{Group: "g", RunAt: now.Add(time.Minute)}.Header(), nil, time.Time{})
	e2.Feed(names.JobSubject("g"), 3, wire.JobMeta{Group: "g", RunAt: now.Add(time.Minute)}.Header(), nil, time.Time{})
	e2.Feed(names.GroupSubject("g"), 4, wire.GroupControl{Group: "g", Op: wire.OpSeal, Count: 2}.Header(), nil, time.Time{})
	e2.EndReplay(map[uint64]AliveJob{3: {Attempt: 1, Pool: "any"}}, now)
	if st, _ := e2.idx.State(2); st != jobindex.Delayed {
		t.Fatalf("delayed job is %v after replay", st)
	}
	if st, _ := e2.idx.State(3); st != jobindex.Running {
		t.Fatalf("delayed job released before the restart is %v after replay", st)
	}
	joinAny(e2, now)
	e2.ReleaseAll()
	if len(e2.out.releases) != 0 {
		t.Fatalf("released %+v before the delayed job's time", e2.out.releases)
	}
	joinAny(e2, now.Add(time.Minute))
	e2.Tick(now.Add(time.Minute))
	e2.ReleaseAll()
	if len(e2.out.releases) != 1 || len(e2.out.releases[0].jobs) != 1 || e2.out.releases[0].jobs[0].id != 2 {
		t.Fatalf("at its time released %+v, want job 2", e2.out.releases)
	}
}

func ids(js []*job) []uint64 {
	out := make([]uint64, len(js))
	for i, j := range js {
		out[i] = j.id
	}
	return out
}

// TestInspectNextRunAt: inspecting a group names when its first delayed job runs; a group
// without delayed jobs has none, whatever other groups hold.
func TestInspectNextRunAt(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{})
	te.open("later")
	te.job(wire.JobMeta{Group: "later", RunAt: te.now.Add(2 * time.Hour)})
	te.job(wire.JobMeta{Group: "later", RunAt: te.now.Add(time.Hour)})
	te.open("now")
	te.job(wire.JobMeta{Group: "now"})
	if g := te.e.Inspect(wire.InspectRequest{Group: "later"}).Group; g == nil || !g.NextRunAt.Equal(te.now.Add(time.Hour)) {
		t.Errorf("group later: %+v, want its next run in an hour", g)
	}
	if g := te.e.Inspect(wire.InspectRequest{Group: "now"}).Group; g == nil || !g.NextRunAt.IsZero() {
		t.Errorf("group now: %+v, want no next run", g)
	}
}
