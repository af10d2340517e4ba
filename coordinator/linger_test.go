package coordinator

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/weavejobs/weave/internal/journal"
	"github.com/weavejobs/weave/internal/wire"
)

// lingerRun is a run around te's engine whose writer is a buffered channel the test reads; busy
// starts it under load, as if other groups' outcomes had just been written.
func lingerRun(te *testEngine, busy bool) *run {
	r := &run{e: te.e, cfg: te.e.cfg, names: te.e.names, log: zerolog.Nop(), writeQ: make(chan writeOp, 64)}
	if busy {
		r.outWindow, r.outThis = te.now, lingerAbove+1
	}
	return r
}

// handedToWriter drains what the loop handed the writer: the outcome IDs of each outcome write
// (a summary's last outcomes included), and whether a summary was written after them.
func handedToWriter(r *run) (outcomeWrites [][]uint64, summaries int) {
	for {
		select {
		case op := <-r.writeQ:
			if op.outcomes != nil {
				var ids []uint64
				for _, o := range op.outcomes {
					ids = append(ids, o.ID)
				}
				outcomeWrites = append(outcomeWrites, ids)
			}
			if op.summary != nil { // after the group's last outcomes, if it carries them
				summaries++
			}
		default:
			return outcomeWrites, summaries
		}
	}
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
	r := lingerRun(te, true)
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
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	r.armRetry(timer) // the loop wakes when they are due even if nothing else happens
	if len(r.lingering) != 1 || !r.lingerDue.Equal(te.now.Add(4*time.Millisecond)) {
		t.Fatalf("lingering %d groups due %v, want 1 due %v", len(r.lingering), r.lingerDue, te.now.Add(4*time.Millisecond))
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
	if len(r.lingering) != 0 {
		t.Fatalf("%d groups still lingering after the group completed", len(r.lingering))
	}
}

func TestOutcomeLingerCompleteGroupWritesWhatLingered(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{OutcomeLinger: time.Hour})
	r := lingerRun(te, true)
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
	r := lingerRun(te, true)
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
	r := lingerRun(te, false)
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
	r.outThis = lingerAbove + 1
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
	r := lingerRun(te, true)
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
// write (a single job ends with one message), unless there are more than one message holds:
// then they are written first, and the summary alone.
func TestLastOutcomesGoWithSummary(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{})
	r := lingerRun(te, false)
	ctx := context.Background()
	te.worker("w", 4)
	id := te.job(wire.JobMeta{Group: "s", Single: true})
	te.report(te.releases()["any"][0], wire.StatusOK, "r")
	r.step(ctx)
	var ops []writeOp
	for len(r.writeQ) > 0 {
		ops = append(ops, <-r.writeQ)
	}
	if len(ops) != 1 || ops[0].summary == nil || len(ops[0].outcomes) != 1 || ops[0].outcomes[0].ID != id || len(ops[0].evSeqs) != 1 {
		t.Fatalf("a single job's end: %d writes %+v, want one with its outcome, the report behind it and the summary", len(ops), ops)
	}

	n := maxOutcomesPerMsg + 1
	te.open("big")
	for range n {
		te.job(wire.JobMeta{Group: "big"})
	}
	te.seal("big")
	te.control(wire.GroupControl{Group: "big", Op: wire.OpCancel})
	r.step(ctx)
	ops = ops[:0]
	for len(r.writeQ) > 0 {
		ops = append(ops, <-r.writeQ)
	}
	if len(ops) != 2 || len(ops[0].outcomes) != n || ops[0].summary != nil || ops[1].summary == nil || ops[1].outcomes != nil {
		t.Fatalf("a group ending with %d outcomes: writes %+v, want the outcomes, then the summary alone", n, ops)
	}
}

// TestOutcomesFitting: an outcome message holds at most maxOutcomesPerMsg outcomes and, past
// its first, none that would take it over the server's max payload; a complete group's last
// outcomes that do not fit in one message are written before its summary.
func TestOutcomesFitting(t *testing.T) {
	t.Parallel()
	r := &run{msgBytes: 1 << 20}
	outs := func(n, size int) []wire.Outcome {
		o := make([]wire.Outcome, n)
		for i := range o {
			o[i] = wire.Outcome{ID: uint64(i + 1), Key: "k", State: wire.FinalDone, Attempts: 1, Data: make([]byte, size)}
		}
		return o
	}
	for _, c := range []struct{ n, size, want int }{
		{300, 10, maxOutcomesPerMsg},
		{64, 60 << 10, 17},
		{3, 2 << 20, 1}, // larger than a message: alone (a worker's MaxResultSize prevents it)
		{1, 10, 1},
	} {
		got := r.outcomesFitting(outs(c.n, c.size))
		if got != c.want {
			t.Errorf("%d outcomes of %d bytes: %d fit, want %d", c.n, c.size, got, c.want)
		}
		if o := outs(c.n, c.size)[:got]; got > 1 && len(wire.AppendLast(nil, o, wire.GroupSummary{Jobs: uint64(got), Done: uint64(got)})) > r.msgBytes {
			t.Errorf("%d outcomes of %d bytes: the message is over %d bytes", got, c.size, r.msgBytes)
		}
	}

	te := newTestEngine(t, Config{})
	lr := lingerRun(te, false)
	ids, jobs := runningGroup(te, 8, true)
	for _, j := range jobs {
		te.report(j, wire.StatusOK, string(make([]byte, 150<<10))) // 1.2 MB in all
	}
	lr.step(context.Background())
	var ops []writeOp
	for len(lr.writeQ) > 0 {
		ops = append(ops, <-lr.writeQ)
	}
	if len(ops) != 2 || len(ops[0].outcomes) != len(ids) || ops[0].summary != nil || ops[1].summary == nil || ops[1].outcomes != nil {
		t.Fatalf("writes %+v, want the 8 outcomes (too large for one message) then the summary alone", ops)
	}
}

// TestJournalRecordsFit: retry decisions too many for one message go in several journal
// records, each within the server's max payload, in order.
func TestJournalRecordsFit(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{})
	r := &run{e: te.e, msgBytes: 1 << 20, writeQ: make(chan writeOp, 16)}
	entries := make([]journal.Entry, 100_000)
	for i := range entries {
		entries[i] = journal.Entry{ID: 1<<52 + uint64(i), Attempt: 1 << 20, At: time.Now().Add(time.Hour)}
	}
	r.writeJournal(context.Background(), journal.KindRetry, entries)
	next := uint64(1 << 52)
	records := 0
	for len(r.writeQ) > 0 {
		op := <-r.writeQ
		records++
		if n := len(journal.Append(nil, *op.journal)); n > r.msgBytes {
			t.Fatalf("record %d is %d bytes, over %d", records, n, r.msgBytes)
		}
		for _, e := range op.journal.Entries {
			if e.ID != next {
				t.Fatalf("entry %d where %d was next", e.ID, next)
			}
			next++
		}
	}
	if records < 2 || next != 1<<52+100_000 {
		t.Fatalf("%d records, up to entry %d", records, next)
	}
}
