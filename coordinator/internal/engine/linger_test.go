package engine

import (
	"context"
	"testing"
	"time"

	"github.com/weavejobs/weave/internal/wire"
)

// lingerRun stands for the run: each step takes the engine's effects and keeps their writes;
// busy starts it under load, as if other groups' outcomes had just been written.
type lingerRun struct {
	te     *testEngine
	writes []Write
}

func newLingerRun(te *testEngine, busy bool) *lingerRun {
	if busy {
		te.e.ol.window, te.e.ol.thisRun = te.now, lingerAbove+1
	}
	return &lingerRun{te: te}
}

func (r *lingerRun) step(context.Context) {
	r.te.e.ReleaseAll()
	out := r.te.e.TakeEffects(r.te.now)
	r.writes = append(r.writes, out.Writes...)
}

// handedToWriter drains what the engine handed the writer: the outcome IDs of each outcome write
// (a summary's last outcomes included), and how many summaries were written after them.
func handedToWriter(r *lingerRun) (outcomeWrites [][]uint64, summaries int) {
	for _, w := range r.writes {
		if w.Outcomes != nil {
			var ids []uint64
			for _, o := range w.Outcomes {
				ids = append(ids, o.ID)
			}
			outcomeWrites = append(outcomeWrites, ids)
		}
		if w.Summary != nil { // after the group's last outcomes, if it carries them
			summaries++
		}
	}
	r.writes = nil
	return outcomeWrites, summaries
}

// runningGroup has a worker of 8 slots, opens group g with n jobs (sealed if seal), and releases
// them: their IDs and jobs, in the same order.
func runningGroup(te *testEngine, n int, seal bool) (ids []uint64, jobs []*job) {
	te.t.Helper()
	te.worker("w", 8)
	te.open("g")
	for range n {
		ids = append(ids, te.job(wire.JobMeta{Group: "g"}))
	}
	if seal {
		te.seal("g")
	}
	if jobs = te.releases()["any"]; len(jobs) != n {
		te.t.Fatalf("released %d jobs, want %d", len(jobs), n)
	}
	return ids, jobs
}

func TestOutcomeLingerCoalescesABusyGroup(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{OutcomeLinger: 10 * time.Millisecond})
	r := newLingerRun(te, true)
	ctx := context.Background()
	ids, jobs := runningGroup(te, 4, true)

	// The group's first outcome after a quiet spell is written at once.
	te.report(jobs[0], wire.StatusOK, "")
	r.step(ctx)
	if w, _ := handedToWriter(r); len(w) != 1 || len(w[0]) != 1 || w[0][0] != ids[0] {
		t.Fatalf("first outcome: writes %v, want one write of job %d at once", w, ids[0])
	}

	// The next two, within the linger, wait: nothing is written until it has passed.
	te.now = te.now.Add(3 * time.Millisecond)
	te.report(jobs[1], wire.StatusOK, "")
	r.step(ctx)
	te.now = te.now.Add(3 * time.Millisecond)
	te.report(jobs[2], wire.StatusOK, "")
	r.step(ctx)
	if w, _ := handedToWriter(r); len(w) != 0 {
		t.Fatalf("outcomes within the linger were written at once: %v", w)
	}
	// The loop wakes when they are due even if nothing else happens.
	if due := te.e.NextDue(te.now); len(te.e.ol.lingering) != 1 || !due.Equal(te.now.Add(4*time.Millisecond)) {
		t.Fatalf("lingering %d groups due %v, want 1 due %v", len(te.e.ol.lingering), due, te.now.Add(4*time.Millisecond))
	}

	// Once it has passed, both go in one write.
	te.now = te.now.Add(4 * time.Millisecond)
	r.step(ctx)
	if w, _ := handedToWriter(r); len(w) != 1 || len(w[0]) != 2 || w[0][0] != ids[1] || w[0][1] != ids[2] {
		t.Fatalf("after the linger: writes %v, want one write of jobs %d and %d", w, ids[1], ids[2])
	}

	// The last outcome completes the group: written at once, before the summary.
	te.now = te.now.Add(time.Millisecond)
	te.report(jobs[3], wire.StatusOK, "")
	r.step(ctx)
	if w, sums := handedToWriter(r); len(w) != 1 || len(w[0]) != 1 || w[0][0] != ids[3] || sums != 1 {
		t.Fatalf("completing outcome: writes %v and %d summaries, want job %d then the summary at once", w, sums, ids[3])
	}
	if len(te.e.ol.lingering) != 0 {
		t.Fatalf("%d groups still lingering after the group completed", len(te.e.ol.lingering))
	}
}

func TestOutcomeLingerCompleteGroupWritesWhatLingered(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{OutcomeLinger: time.Hour})
	r := newLingerRun(te, true)
	ctx := context.Background()
	ids, jobs := runningGroup(te, 3, true)
	a, b, c := ids[0], ids[1], ids[2]
	te.report(jobs[0], wire.StatusOK, "")
	r.step(ctx)
	te.report(jobs[1], wire.StatusOK, "")
	r.step(ctx) // lingers for an hour
	te.report(jobs[2], wire.StatusOK, "")
	r.step(ctx) // completes the group: what lingered goes first, then the summary
	w, sums := handedToWriter(r)
	if len(w) != 2 || len(w[0]) != 1 || w[0][0] != a || len(w[1]) != 2 || w[1][0] != b || w[1][1] != c || sums != 1 {
		t.Fatalf("writes %v and %d summaries, want [%d] then [%d %d] then the summary", w, sums, a, b, c)
	}
}

func TestOutcomeLingerNegativeWritesAtOnce(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{OutcomeLinger: -1})
	r := newLingerRun(te, true)
	ctx := context.Background()
	_, jobs := runningGroup(te, 3, false)
	for _, j := range jobs {
		te.report(j, wire.StatusOK, "")
		r.step(ctx)
	}
	if w, _ := handedToWriter(r); len(w) != 3 {
		t.Fatalf("%d outcome writes for 3 outcomes in 3 steps with the linger off, want 3", len(w))
	}
}

// TestOutcomeLingerOnlyUnderLoad: under a light load outcomes go at once however recent the
// group's last message; above lingerAbove writes per linger they wait; once the load is gone,
// what waited goes and nothing waits any more.
func TestOutcomeLingerOnlyUnderLoad(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{OutcomeLinger: 10 * time.Millisecond})
	r := newLingerRun(te, false)
	ctx := context.Background()
	ids, jobs := runningGroup(te, 4, false)

	te.report(jobs[0], wire.StatusOK, "")
	r.step(ctx)
	te.now = te.now.Add(time.Millisecond)
	te.report(jobs[1], wire.StatusOK, "")
	r.step(ctx)
	if w, _ := handedToWriter(r); len(w) != 2 {
		t.Fatalf("under a light load an outcome waited: writes %v, want 2", w)
	}

	// Other groups' outcomes make the load heavy: the next one lingers.
	te.e.ol.thisRun = lingerAbove + 1
	te.now = te.now.Add(time.Millisecond)
	te.report(jobs[2], wire.StatusOK, "")
	r.step(ctx)
	if w, _ := handedToWriter(r); len(w) != 0 {
		t.Fatalf("under load an outcome within the linger was written at once: %v", w)
	}

	// The load is gone: what lingered goes when due, and the next outcome at once.
	te.now = te.now.Add(25 * time.Millisecond)
	r.step(ctx)
	if w, _ := handedToWriter(r); len(w) != 1 || len(w[0]) != 1 || w[0][0] != ids[2] {
		t.Fatalf("after the linger: %v, want job %d written", w, ids[2])
	}
	te.now = te.now.Add(time.Millisecond)
	te.report(jobs[3], wire.StatusOK, "")
	r.step(ctx)
	if w, _ := handedToWriter(r); len(w) != 1 || len(w[0]) != 1 || w[0][0] != ids[3] {
		t.Fatalf("after the load: %v, want job %d written at once", w, ids[3])
	}
}

// TestOutcomeLingerStretchesWithManyGroups: with more groups lingering than lingerAbove, each
// waits longer, so that together they write about lingerAbove messages per OutcomeLinger.
func TestOutcomeLingerStretchesWithManyGroups(t *testing.T) {
	t.Parallel()
	const groups = 3 * lingerAbove // a linger of 3 × OutcomeLinger
	te := newTestEngine(t, Config{OutcomeLinger: 10 * time.Millisecond, Prefetch: -1})
	r := newLingerRun(te, true)
	ctx := context.Background()
	te.worker("w", 2*groups)
	for g := range groups {
		name := "g" + string(rune('A'+g))
		te.open(name)
		te.job(wire.JobMeta{Group: name})
		te.job(wire.JobMeta{Group: name})
	}
	jobs := te.releases()["any"]
	if len(jobs) != 2*groups {
		t.Fatalf("released %d jobs, want %d", len(jobs), 2*groups)
	}
	first := map[*group]bool{}
	var seconds []*job
	for _, j := range jobs {
		if g := j.g; !first[g] {
			first[g] = true
			te.report(j, wire.StatusOK, "") // each group's first outcome: written at once
		} else {
			seconds = append(seconds, j)
		}
	}
	r.step(ctx)
	if w, _ := handedToWriter(r); len(w) != groups {
		t.Fatalf("%d first outcome writes, want %d", len(w), groups)
	}
	te.now = te.now.Add(time.Millisecond)
	for _, j := range seconds {
		te.report(j, wire.StatusOK, "")
	}
	r.step(ctx)
	base := te.now.Add(-time.Millisecond) // the first outcomes' time
	for _, after := range []time.Duration{15 * time.Millisecond, 29 * time.Millisecond} {
		te.now = base.Add(after)
		r.step(ctx)
		if w, _ := handedToWriter(r); len(w) != 0 {
			t.Fatalf("%v after the first outcomes, with %d groups lingering: %d writes, want none before 30ms", after, groups, len(w))
		}
	}
	te.now = base.Add(30 * time.Millisecond)
	r.step(ctx)
	if w, _ := handedToWriter(r); len(w) != groups {
		t.Fatalf("after the stretched linger: %d writes, want %d", len(w), groups)
	}
}

// TestLastOutcomesGoWithSummary: a complete group's outcomes not yet written go in its summary's
// write: a single job ends with one message (the run splits what does not fit in one).
func TestLastOutcomesGoWithSummary(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{})
	r := newLingerRun(te, false)
	ctx := context.Background()
	te.worker("w", 4)
	id := te.job(wire.JobMeta{Group: "s", Single: true})
	te.report(te.releases()["any"][0], wire.StatusOK, "r")
	r.step(ctx)
	ops := r.writes
	if len(ops) != 1 || ops[0].Summary == nil || len(ops[0].Outcomes) != 1 || ops[0].Outcomes[0].ID != id || len(ops[0].EvSeqs) != 1 {
		t.Fatalf("a single job's end: %d writes %+v, want one with its outcome, the report behind it and the summary", len(ops), ops)
	}
}
