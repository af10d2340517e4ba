package engine

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/weavejobs/weave/internal/jobindex"
	"github.com/weavejobs/weave/internal/wire"
	"github.com/weavejobs/weave/spreader"
)

// TestGroupTable: records are found by open sequence and by ID (the latest incarnation), yielded
// in arrival order, and forgotten page by page, an emptied page going at once.
func TestGroupTable(t *testing.T) {
	t.Parallel()
	var tb groupTable
	const n = 3*recPageSize + 10
	for seq := uint64(1); seq <= n; seq++ {
		tb.add(groupRec{id: fmt.Sprint("g", seq%100), openSeq: 2 * seq})
	}
	if tb.len() != n || len(tb.pages) != 4 {
		t.Fatalf("%d records in %d pages, want %d in 4", tb.len(), len(tb.pages), n)
	}
	if r := tb.get(2 * 500); r == nil || r.id != "g0" {
		t.Fatalf("get(1000) = %+v", r)
	}
	if tb.get(3) != nil || tb.get(0) != nil || tb.get(2*n+2) != nil {
		t.Fatal("a sequence that opens nothing found a record")
	}
	last7 := uint64(n)
	for last7%100 != 7 {
		last7--
	}
	if r := tb.latest("g7"); r == nil || r.openSeq != 2*last7 {
		t.Fatalf("latest(g7) = %+v, want the one opened at %d", r, 2*last7)
	}
	// Forget every record of the first page, and most of the second.
	for seq := uint64(1); seq <= recPageSize+recPageSize/2+1; seq++ {
		tb.remove(2 * seq)
	}
	if tb.get(2) != nil || tb.get(2*(recPageSize+1)) != nil {
		t.Fatal("a forgotten record is still found")
	}
	if len(tb.pages) != 3 || len(tb.pages[0].recs) != recPageSize/2-1 {
		t.Fatalf("after forgetting a page and a half: %d pages, the first of %d records", len(tb.pages), len(tb.pages[0].recs))
	}
	var prev uint64
	count := 0
	for r := range tb.all() {
		if r.openSeq <= prev {
			t.Fatalf("records out of order: %d after %d", r.openSeq, prev)
		}
		prev = r.openSeq
		count++
	}
	if count != tb.len() {
		t.Fatalf("all yielded %d records, len %d", count, tb.len())
	}
	tb.add(groupRec{id: "late", openSeq: 2*n + 2})
	tb.add(groupRec{id: "out of order", openSeq: 2*n - 1}) // never expected; kept in its place
	if r := tb.get(2*n - 1); r == nil || r.id != "out of order" {
		t.Fatalf("a record added out of order is not found: %+v", r)
	}
	if r := tb.latest("late"); r == nil || r.openSeq != 2*n+2 {
		t.Fatalf("latest(late) = %+v", r)
	}
}

// TestIDIndexCollisions: IDs whose hashes collide are each found, replaced and removed, whichever
// goes first.
func TestIDIndexCollisions(t *testing.T) {
	t.Parallel()
	tb := groupTable{ids: idIndex{hashOf: func(id string) uint64 { return uint64(len(id)) }}}
	tb.add(groupRec{id: "a", openSeq: 1})
	tb.add(groupRec{id: "b", openSeq: 2}) // same hash as a
	tb.add(groupRec{id: "cc", openSeq: 3})
	tb.add(groupRec{id: "b", openSeq: 4}) // b's next incarnation
	for id, want := range map[string]uint64{"a": 1, "b": 4, "cc": 3} {
		if r := tb.latest(id); r == nil || r.openSeq != want {
			t.Fatalf("latest(%s) = %+v, want %d", id, r, want)
		}
	}
	if tb.latest("d") != nil {
		t.Fatal("an unknown ID colliding with a known one was found")
	}
	tb.remove(2) // b's earlier incarnation: b still maps to 4
	tb.remove(1) // a, holding the hash: b takes its place
	if r := tb.latest("b"); r == nil || r.openSeq != 4 || tb.latest("a") != nil {
		t.Fatalf("after removing a: latest(b) = %+v, latest(a) = %+v", r, tb.latest("a"))
	}
	if len(tb.ids.clash) != 0 || tb.ids.byHash[1] != 4 {
		t.Fatalf("index %+v %+v, want b in the hash map alone", tb.ids.byHash, tb.ids.clash)
	}
	tb.remove(4)
	if tb.latest("b") != nil || len(tb.ids.byHash) != 1 {
		t.Fatalf("after removing b: %+v", tb.ids.byHash)
	}
}

// TestTokenTable: a token is interned once while held, and its ID is reused once released.
func TestTokenTable(t *testing.T) {
	t.Parallel()
	var tt tokenTable
	a, b, a2 := tt.intern("a"), tt.intern("b"), tt.intern("a")
	if a == 0 || a != a2 || a == b || tt.intern("") != 0 {
		t.Fatalf("ids a=%d b=%d a again=%d", a, b, a2)
	}
	tt.release(a)
	if tt.get(a) != "a" {
		t.Fatal("a token still held was forgotten")
	}
	tt.release(a)
	if c := tt.intern("c"); c != a || tt.get(c) != "c" {
		t.Fatalf("a released ID was not reused: c=%d (a was %d)", c, a)
	}
}

// TestCompactGroupLifecycle: a group is a record until it takes a slot, a *group from then on;
// its counts, status and inspection read the same either way, and it completes with every
// count its jobs had. Another group, canceled while still a record, ends its jobs canceled.
func TestCompactGroupLifecycle(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{Feeders: 1})
	te.open("g")
	var ids []uint64
	for i := range 4 {
		ids = append(ids, te.job(wire.JobMeta{Group: "g", Key: fmt.Sprint("k", i)}))
	}
	te.seal("g")
	te.open("c")
	te.job(wire.JobMeta{Group: "c"})
	te.job(wire.JobMeta{Group: "c", RunAt: te.now.Add(time.Hour)})
	te.seal("c")
	for i := range 3 {
		te.job(wire.JobMeta{Group: fmt.Sprint("s", i), Single: true})
	}
	if n := len(te.e.groups.live); n != 0 {
		t.Fatalf("%d groups have a *group before any has a slot", n)
	}
	st := te.e.Status()
	if st.OpenGroups != 5 || len(st.Groups) != 5 {
		t.Fatalf("status: %d open groups, %d listed, want 5", st.OpenGroups, len(st.Groups))
	}
	if g := st.Groups[0]; g.ID != "g" || !g.Sealed || g.Queued != 4 || g.Jobs["pending"] != 4 || g.InFlight != 0 {
		t.Fatalf("status of g as a record: %+v", g)
	}
	if g := st.Groups[1]; g.ID != "c" || g.Queued != 1 || g.Jobs["delayed"] != 1 {
		t.Fatalf("status of c as a record: %+v", g)
	}
	if gl := te.e.Inspect(wire.InspectRequest{Group: "s1"}).Group; gl == nil || gl.Admitted != 1 || gl.Queued != 1 || !gl.Sealed || gl.Incarnation == 0 {
		t.Fatalf("inspection of a single job's record: %+v", gl)
	}
	if jl := te.e.Inspect(wire.InspectRequest{Job: ids[2]}).Job; jl == nil || jl.Group != "g" || jl.State != "pending" {
		t.Fatalf("inspection of a job of a record: %+v", jl)
	}

	// Cancel c while it is a record: its pending and delayed jobs end canceled at once.
	te.control(wire.GroupControl{Group: "c", Op: wire.OpCancel})
	if len(te.e.out.summaries) != 1 || te.e.out.summaries[0].id != "c" || te.e.out.summaries[0].canceled != 2 {
		t.Fatalf("cancel of a record: summaries %+v", te.e.out.summaries)
	}
	te.e.forget(te.e.out.summaries[0])
	te.e.out = Effects{}

	te.worker("w", 2)
	var done []*job
	for len(done) < 7 {
		got := te.releases()["any"]
		if len(got) == 0 {
			t.Fatalf("stalled after %d jobs", len(done))
		}
		for _, j := range got {
			if j.g.id == "g" && len(te.e.groups.live) > 3 {
				t.Fatalf("%d *groups with one slot, one in flight and a prefetch place", len(te.e.groups.live))
			}
			st := wire.StatusOK
			if j.id == ids[1] {
				st = wire.StatusPermanent
			}
			te.report(j, st, "r")
			done = append(done, j)
		}
		for _, g := range te.e.out.summaries {
			te.e.forget(g)
		}
	}
	var g *group
	for _, s := range te.e.out.summaries {
		if s.id == "g" {
			g = s
		}
	}
	if g == nil {
		for _, s := range done {
			if s.g.id == "g" {
				g = s.g
			}
		}
	}
	if !g.complete || g.admitted != 4 || g.done != 3 || g.failed != 1 || g.canceled != 0 {
		t.Fatalf("g completed with admitted %d, done %d, failed %d, canceled %d (complete %v)", g.admitted, g.done, g.failed, g.canceled, g.complete)
	}
	if te.e.groups.table.len() != 0 || len(te.e.groups.live) != 0 {
		t.Fatalf("%d records and %d *groups left once every group is forgotten", te.e.groups.table.len(), len(te.e.groups.live))
	}
}

// TestLineAfterWaitingGroups: a group that left its slot with nothing queued (its producer is
// slow) and gets a job again waits behind the groups that were waiting already: one line, in the
// order groups got work, whether they have a *group or not.
func TestLineAfterWaitingGroups(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{Feeders: 1, Prefetch: -1})
	te.worker("w", 1)
	te.open("slow")
	first := te.job(wire.JobMeta{Group: "slow"})
	rel := te.releases()["any"]
	if len(rel) != 1 || rel[0].id != first {
		t.Fatalf("released %v, want slow's job", ids(rel))
	}
	for _, g := range []string{"a", "b"} {
		te.open(g)
		te.job(wire.JobMeta{Group: g})
		te.seal(g)
	}
	second := te.job(wire.JobMeta{Group: "slow"})
	te.seal("slow")
	var order []string
	j := rel[0]
	for range 3 {
		te.report(j, wire.StatusOK, "")
		got := te.releases()["any"]
		if len(got) != 1 {
			t.Fatalf("released %v, want one job", ids(got))
		}
		j = got[0]
		order = append(order, j.g.id)
	}
	if want := []string{"a", "b", "slow"}; !slices.Equal(order, want) || j.id != second {
		t.Fatalf("groups served in order %v, want %v", order, want)
	}
}

// TestDelayedJobOfDrainingGroup: a sealed group with a job in flight and nothing queued, whose
// last delayed job comes due, gets it released: it is not sealed in the scheduler while that job
// waits for its turn in the line.
func TestDelayedJobOfDrainingGroup(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{Feeders: 2, Prefetch: -1})
	te.worker("w", 2)
	te.open("g")
	now := te.job(wire.JobMeta{Group: "g"})
	later := te.job(wire.JobMeta{Group: "g", RunAt: te.now.Add(time.Second)})
	te.seal("g")
	rel := te.releases()["any"]
	if len(rel) != 1 || rel[0].id != now {
		t.Fatalf("released %v, want %d", ids(rel), now)
	}
	te.now = te.now.Add(2 * time.Second)
	te.e.Tick(te.now)
	got := te.releases()["any"]
	if len(got) != 1 || got[0].id != later {
		t.Fatalf("after the delayed job came due: released %v, want %d", ids(got), later)
	}
	te.report(rel[0], wire.StatusOK, "")
	te.report(got[0], wire.StatusOK, "")
	if len(te.e.out.summaries) != 1 {
		t.Fatal("the group did not complete")
	}
}

// TestSinglesBesideLargeGroups: a backlog of single jobs and large groups share the feeder slots
// as any groups do: each active group is one unit of the fair share, so with F slots and least
// in-flight no group has two jobs in flight while F groups remain, each large group keeps its
// slot and gets about 1/F of the releases while singles wait, and the singles take the other
// slots in arrival order.
func TestSinglesBesideLargeGroups(t *testing.T) {
	t.Parallel()
	const feeders, singles = 4, 200
	te := newTestEngine(t, Config{Feeders: feeders, Prefetch: -1, Policy: spreader.LeastInFlight})
	for _, g := range []string{"big1", "big2"} {
		te.open(g)
		for range 100 {
			te.job(wire.JobMeta{Group: g})
		}
		te.seal(g)
	}
	var singleIDs []uint64
	for i := range singles {
		singleIDs = append(singleIDs, te.job(wire.JobMeta{Group: fmt.Sprint("s", i), Single: true}))
	}
	te.worker("w", feeders)
	var running []*job
	released := map[string]int{} // while single jobs wait
	var singlesOrder []uint64
	for step := 0; ; step++ {
		for _, j := range te.releases()["any"] {
			running = append(running, j)
			if strings.HasPrefix(j.g.id, "s") {
				singlesOrder = append(singlesOrder, j.id)
			}
			if len(singlesOrder) < singles {
				released[strings.TrimRight(j.g.id, "0123456789")]++
			}
		}
		if len(running) == 0 {
			break
		}
		if te.e.groups.table.len() >= feeders {
			inFlight := map[string]int{}
			for _, j := range running {
				if inFlight[j.g.id]++; inFlight[j.g.id] > 1 {
					t.Fatalf("step %d: group %s has two jobs in flight with %d groups left", step, j.g.id, te.e.groups.table.len())
				}
			}
		}
		te.report(running[0], wire.StatusOK, "") // the first released ends first
		running = running[1:]
		for _, g := range te.e.out.summaries {
			te.e.forget(g)
		}
		te.e.out.summaries = nil
	}
	if !slices.Equal(singlesOrder, singleIDs) {
		t.Fatalf("single jobs released out of arrival order: %v", singlesOrder[:min(10, len(singlesOrder))])
	}
	total := released["big"] + released["s"]
	// Both large groups count under "big": together about 2/F of the releases.
	if share := float64(released["big"]) / float64(total); share < 0.4 || share > 0.6 {
		t.Fatalf("the large groups got %d of %d releases while single jobs waited (%.2f), want about 2/%d", released["big"], total, share, feeders)
	}
	if te.e.groups.table.len() != 0 {
		t.Fatalf("%d groups left", te.e.groups.table.len())
	}
}

// TestMakingGroupsChangesNothing: whether a group gets its *group when it takes a slot (as
// live) or at once, every decision is the same: a random workload of groups, single jobs,
// delayed jobs, cancels, failures and retries, run twice, the second time making every
// record's *group after each step, releases the same jobs in the same order and ends them the
// same way.
func TestMakingGroupsChangesNothing(t *testing.T) {
	t.Parallel()
	for seed := range uint64(20) {
		a := runWorkload(t, seed, false)
		b := runWorkload(t, seed, true)
		if !slices.Equal(a, b) {
			i := 0
			for i < min(len(a), len(b)) && a[i] == b[i] {
				i++
			}
			t.Fatalf("seed %d: the runs part at event %d of %d/%d:\n  as live: %v\n  at once: %v", seed, i, len(a), len(b), a[i:min(i+5, len(a))], b[i:min(i+5, len(b))])
		}
	}
}

// runWorkload runs a random workload and returns what it released and ended, step by step. eager
// makes every record's *group after each step.
func runWorkload(t *testing.T, seed uint64, eager bool) []string {
	rng := rand.New(rand.NewPCG(seed, 7))
	policy := spreader.LeastInFlight
	if seed%3 == 0 {
		policy = spreader.RoundRobin
	}
	var errs strings.Builder // a bug the engine logs (an illegal transition, a group it cannot forget) fails the run
	te := newTestEngine(t, Config{Feeders: 2 + rng.IntN(4), Policy: policy, MaxInFlightPerGroup: rng.IntN(3), MaxAttempts: 2, RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond,
		Logger: zerolog.New(&errs).Level(zerolog.ErrorLevel)})
	defer func() {
		if errs.Len() > 0 {
			t.Fatalf("seed %d (eager %v): the engine logged errors: %s", seed, eager, errs.String())
		}
	}()
	te.worker("w", 3)
	var trace []string
	var running []*job
	open := []string{}
	groups := 0
	for step := range 400 {
		switch r := rng.IntN(10); {
		case r == 0 && len(open) < 4:
			name := fmt.Sprint("g", groups)
			groups++
			te.open(name)
			open = append(open, name)
		case r <= 2 && len(open) > 0:
			g := open[rng.IntN(len(open))]
			m := wire.JobMeta{Group: g}
			if rng.IntN(5) == 0 {
				m.RunAt = te.now.Add(time.Duration(1+rng.IntN(20)) * time.Millisecond)
			}
			te.job(m)
		case r == 3 && len(open) > 0:
			i := rng.IntN(len(open))
			te.seal(open[i])
			open = slices.Delete(open, i, i+1)
		case r == 4:
			te.job(wire.JobMeta{Group: fmt.Sprint("s", step), Single: true})
		case r == 5 && rng.IntN(4) == 0:
			if rec := randomRec(te.e, rng); rec != nil {
				c := wire.GroupControl{Group: rec.id, Op: wire.OpCancel}
				if rng.IntN(2) == 0 {
					if ids := slices.Collect(te.e.groupJobs(rec.openSeq, rec.flags&recSingle != 0, jobindex.Pending)); len(ids) > 0 {
						c.Jobs = []uint64{ids[rng.IntN(len(ids))]}
					}
				}
				te.control(c)
			}
		case r == 6:
			te.now = te.now.Add(time.Duration(rng.IntN(10)) * time.Millisecond)
			te.e.Tick(te.now)
		default:
			if len(running) > 0 {
				i := rng.IntN(len(running))
				j := running[i]
				running = slices.Delete(running, i, i+1)
				if st, _ := te.e.idx.State(j.id); st == jobindex.Running {
					status := wire.StatusOK
					if rng.IntN(4) == 0 {
						status = wire.StatusError
					}
					// A run as long as its cycle: every busy share stays 1, the share a group
					// starts from whenever it gets its *group.
					r := proven(te.e, poolOf(j), j.rel, wire.Report{ID: j.id, Attempt: j.attempt, Status: status, Duration: time.Hour})
					te.evSeq++
					te.e.Report(poolOf(j), "w", te.evSeq, r, te.now)
				}
			}
		}
		for _, j := range te.releases()["any"] {
			running = append(running, j)
			trace = append(trace, fmt.Sprintf("release %d/%d", j.id, j.attempt))
		}
		var ended []string
		for _, g := range te.e.out.outcomes {
			for _, o := range g.outcomes {
				ended = append(ended, fmt.Sprintf("end %d %v", o.ID, o.State))
			}
			g.outcomes, g.outcomeSeqs = nil, nil
		}
		for _, g := range te.e.out.summaries {
			for _, o := range g.outcomes {
				ended = append(ended, fmt.Sprintf("end %d %v", o.ID, o.State))
			}
			ended = append(ended, fmt.Sprintf("complete %s %d/%d/%d/%d", g.id, g.admitted, g.done, g.failed, g.canceled))
			te.e.forget(g)
		}
		slices.Sort(ended)
		trace = append(trace, ended...)
		te.e.out = Effects{}
		if eager {
			var recs []*groupRec
			for r := range te.e.groups.table.all() {
				recs = append(recs, r)
			}
			for _, r := range recs {
				te.e.live(r)
			}
		}
	}
	return trace
}

// randomRec returns a random tracked record, or nil.
func randomRec(e *Engine, rng *rand.Rand) *groupRec {
	n := e.groups.table.len()
	if n == 0 {
		return nil
	}
	k := rng.IntN(n)
	for r := range e.groups.table.all() {
		if k == 0 {
			return r
		}
		k--
	}
	return nil
}

// TestReplayKeepsRecordsAndLine: a restart rebuilds the same groups from the streams: those that
// were records stay records (no *group), one with jobs in flight gets its *group back with them,
// and status, the line and the releases that follow are as before the restart.
func TestReplayKeepsRecordsAndLine(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{Feeders: 1, Prefetch: -1})
	type fed struct {
		subject string
		seq     uint64
		h       nats.Header
	}
	var stream []fed
	feed := func(subject string, h nats.Header) uint64 {
		te.seq++
		stream = append(stream, fed{subject, te.seq, h})
		te.e.Feed(subject, te.seq, h, nil, time.Time{})
		return te.seq
	}
	names := te.e.names
	group := func(g string, jobs int) {
		feed(names.GroupSubject(g), wire.GroupControl{Group: g, Op: wire.OpOpen}.Header())
		for range jobs {
			feed(names.JobSubject(g), wire.JobMeta{Group: g}.Header())
		}
		feed(names.GroupSubject(g), wire.GroupControl{Group: g, Op: wire.OpSeal}.Header())
	}
	group("first", 3)
	group("second", 2)
	feed(names.JobSubject("s"), wire.JobMeta{Group: "s", Single: true}.Header())
	group("third", 2)
	te.worker("w", 2)
	running := te.releases()["any"] // the first group's first two jobs: it holds the one slot
	if len(running) != 2 || running[0].g.id != "first" {
		t.Fatalf("released %v, want two jobs of the first group", ids(running))
	}
	before := te.e.Status()

	e2 := te.restarted()
	for _, m := range stream {
		e2.Feed(m.subject, m.seq, m.h, nil, time.Time{})
	}
	alive := map[uint64]AliveJob{}
	for _, j := range running {
		alive[j.id] = AliveJob{Attempt: 1, Pool: "any"}
	}
	e2.EndReplay(alive, te.now)
	if n := len(e2.groups.live); n != 1 || e2.groups.live[running[0].g.openSeq] == nil {
		t.Fatalf("%d *groups after replay, want the first group's alone (its jobs run)", n)
	}
	after := e2.Status()
	if len(after.Groups) != len(before.Groups) {
		t.Fatalf("%d groups after replay, %d before", len(after.Groups), len(before.Groups))
	}
	for i, b := range before.Groups {
		a := after.Groups[i]
		if a.ID != b.ID || a.Sealed != b.Sealed || a.Queued != b.Queued || a.InFlight != b.InFlight || fmt.Sprint(a.Jobs) != fmt.Sprint(b.Jobs) {
			t.Fatalf("group %d after replay %+v, before %+v", i, a, b)
		}
	}
	// The line as before: the first group finishes, then second, s and third in turn.
	joinAny(e2, te.now)
	var order []string
	for _, j := range running {
		e2.Report("any", "w", uint64(100+len(order)), proven(e2, "any", 0, wire.Report{ID: j.id, Attempt: 1, Status: wire.StatusOK}), te.now)
	}
	for range 10 {
		e2.ReleaseAll()
		for _, r := range e2.out.releases {
			for _, j := range r.jobs {
				order = append(order, j.g.id)
				e2.Report("any", "w", uint64(100+len(order)), proven(e2, "any", 0, wire.Report{ID: j.id, Attempt: 1, Status: wire.StatusOK}), te.now)
			}
		}
		e2.out = Effects{}
	}
	if want := []string{"first", "second", "second", "s", "third", "third"}; !slices.Equal(order, want) {
		t.Fatalf("after replay the groups ran in order %v, want %v", order, want)
	}
}

// TestRedriveOfSingleJob: a single job's group is refused a redrive while it waits as a record
// (running, naming its incarnation), and accepted once it failed, completed and is retained.
func TestRedriveOfSingleJob(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{})
	id := te.job(wire.JobMeta{Group: "s", Single: true})
	te.control(wire.GroupControl{Group: "s", Op: wire.OpRedrive, Reply: "t"})
	wantRefusal(t, takeRedrives(te.e), wire.AnswerRunning, id)
	if len(te.e.groups.live) != 0 {
		t.Fatal("a redrive request made the waiting single job's *group")
	}
	te.worker("w", 1)
	rel := te.releases()["any"]
	if len(rel) != 1 || rel[0].id != id {
		t.Fatalf("released %v, want the single job %d", ids(rel), id)
	}
	te.report(rel[0], wire.StatusPermanent, "bad")
	if len(te.e.out.summaries) != 1 {
		t.Fatal("the failed single job's group did not complete")
	}
	g := te.e.out.summaries[0]
	if !te.e.keepsJobs(g) || g.failed != 1 || g.admitted != 1 {
		t.Fatalf("completed single job: failed %d, admitted %d, keeps its job %v", g.failed, g.admitted, te.e.keepsJobs(g))
	}
	te.e.retain(g.id, g.openSeq, 50, true, g.lastSeq, te.now, g.summary(), false)
	te.e.forget(g)
	req := te.control(wire.GroupControl{Group: "s", Op: wire.OpRedrive, Reply: "t"})
	got := takeRedrives(te.e)
	if len(got) != 1 || got[0].Refuse != nil || got[0].Ask.Seq != req || !slices.Equal(got[0].PrevOpens, []uint64{id}) {
		t.Fatalf("decisions %+v, want the acceptance of request %d for incarnation %d", got, req, id)
	}
	if te.e.groups.table.len() != 0 || te.e.idx.Len() != 0 {
		t.Fatalf("%d records and %d indexed jobs left once the single job is forgotten", te.e.groups.table.len(), te.e.idx.Len())
	}
}

// TestCancelFailedJob: a cancel naming a failed job of the group answers it ended already, and
// cancels the others.
func TestCancelFailedJob(t *testing.T) {
	t.Parallel()
	var errs strings.Builder
	te := newTestEngine(t, Config{Prefetch: -1, Logger: zerolog.New(&errs).Level(zerolog.ErrorLevel)})
	te.open("g")
	failed := te.job(wire.JobMeta{Group: "g"})
	pending := te.job(wire.JobMeta{Group: "g"})
	te.seal("g")
	te.worker("w", 1)
	rel := te.releases()["any"]
	te.report(rel[0], wire.StatusPermanent, "bad")
	seq := te.control(wire.GroupControl{Group: "g", Op: wire.OpCancel, Jobs: []uint64{failed, pending}, Reply: "t"})
	want := wire.ControlAnswer{Seq: seq, Op: wire.OpCancel, Group: "g", OK: true, Canceled: 1, Final: []uint64{failed}}
	if a := te.answers(); len(a) != 1 || fmt.Sprint(a[0].Reply) != fmt.Sprint(want) {
		t.Fatalf("answers %+v, want %+v", a, want)
	}
	if errs.Len() > 0 {
		t.Fatalf("the engine logged errors: %s", errs.String())
	}
}
