package engine

import (
	"slices"
	"testing"
	"time"

	"github.com/weavejobs/weave/internal/wire"
)

// countBy counts jobs per group.
func countBy(js []*job) map[string]int {
	n := map[string]int{}
	for _, j := range js {
		n[j.g.id]++
	}
	return n
}

// TestConcurrencyLimit: at most N jobs preferring a limited resource are released at once, the
// rest of the fleet runs other groups' jobs meanwhile (the held-back jobs hold no feeder slot:
// one is configured), and each job that ends lets one more start.
func TestConcurrencyLimit(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{Feeders: 1, Prefetch: -1})
	te.e.SetLimit(wire.Limit{Kind: wire.LimitResource, Name: "site", Concurrency: 2}, te.now)
	te.open("crawl")
	for range 10 {
		te.job(wire.JobMeta{Group: "crawl", Prefer: []string{"site"}})
	}
	te.seal("crawl")
	te.open("other")
	for range 10 {
		te.job(wire.JobMeta{Group: "other"})
	}
	te.seal("other")
	te.worker("w", 8)
	running := te.releases()["any"]
	if n := countBy(running); n["crawl"] != 2 || n["other"] != 6 {
		t.Fatalf("released %v, want 2 of the limited group and 6 of the other", n)
	}
	for range 8 {
		var j *job
		for i, r := range running {
			if r.g.id == "crawl" {
				j, running = r, append(running[:i:i], running[i+1:]...)
				break
			}
		}
		te.report(j, wire.StatusOK, "")
		got := te.releases()["any"]
		if n := countBy(got); n["crawl"] != 1 || len(got) != 1 {
			t.Fatalf("a limited job's end released %v, want one more of the limited group", n)
		}
		running = append(running, got...)
		if ls := te.e.limits.byKey[limitKey{wire.LimitResource, "site"}]; ls.running != 2 {
			t.Fatalf("limit counts %d running, want 2", ls.running)
		}
	}
}

// TestRateLimit: a rate of 4 per second with a burst of 2 releases nothing at first (a bucket
// starts empty), then a job every 250ms, and at most the burst after a pause.
func TestRateLimit(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{})
	te.e.SetLimit(wire.Limit{Kind: wire.LimitGroup, Name: "g", Rate: 4, Per: time.Second, Burst: 2}, te.now)
	te.open("g")
	for range 20 {
		te.job(wire.JobMeta{Group: "g"})
	}
	te.seal("g")
	te.worker("w", 8)
	released := func() int {
		te.worker("w", 8)
		te.e.Tick(te.now)
		got := te.releases()["any"]
		for _, j := range got {
			te.report(j, wire.StatusOK, "")
		}
		return len(got)
	}
	if n := released(); n != 0 {
		t.Fatalf("released %d with an empty bucket", n)
	}
	if next := te.e.limits.nextToken(te.now); !next.Equal(te.now.Add(250 * time.Millisecond)) {
		t.Fatalf("next token at %v, want 250ms on", next.Sub(te.now))
	}
	for i := range 4 {
		te.now = te.now.Add(250 * time.Millisecond)
		if n := released(); n != 1 {
			t.Fatalf("step %d: released %d after 250ms, want 1", i, n)
		}
	}
	te.now = te.now.Add(10 * time.Second)
	if n := released(); n != 2 {
		t.Fatalf("released %d after a pause, want the burst of 2", n)
	}
}

// TestLimitsAfterReplay: a coordinator that takes over counts the limited jobs in flight, so it
// releases no more of them than the limit allows.
func TestLimitsAfterReplay(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{})
	names, now := te.e.names, te.now
	e2 := te.restarted()
	e2.SetLimit(wire.Limit{Kind: wire.LimitResource, Name: "site", Concurrency: 2}, now)
	e2.Feed(names.GroupSubject("g"), 1, wire.GroupControl{Group: "g", Op: wire.OpOpen}.Header(), nil, time.Time{})
	for id := uint64(2); id <= 6; id++ {
		e2.Feed(names.JobSubject("g"), id, wire.JobMeta{Group: "g", Require: []string{"site"}}.Header(), nil, time.Time{})
	}
	e2.EndReplay(map[uint64]AliveJob{2: {Attempt: 1, Pool: "p"}}, now)
	e2.Heartbeat(names.HeartbeatSubject("p", "w"), wire.Heartbeat{Version: wire.Version, Worker: "w", Pool: "p", Resources: []string{"site"}, Concurrency: 8, IntervalMS: 1000}, now)
	e2.ReleaseAll()
	if len(e2.out.releases) != 1 || len(e2.out.releases[0].jobs) != 1 {
		t.Fatalf("after replay with one limited job in flight, released %+v; want one more", e2.out.releases)
	}
}

// TestRemovingALimitOffersItsJobs: the jobs a limit held back run once it is removed.
func TestRemovingALimitOffersItsJobs(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{Prefetch: -1})
	te.e.SetLimit(wire.Limit{Kind: wire.LimitGroup, Name: "g", Concurrency: 1}, te.now)
	te.open("g")
	for range 5 {
		te.job(wire.JobMeta{Group: "g"})
	}
	te.worker("w", 8)
	if n := len(te.releases()["any"]); n != 1 {
		t.Fatalf("released %d under a limit of 1", n)
	}
	te.e.SetLimit(wire.Limit{Kind: wire.LimitGroup, Name: "g"}, te.now)
	if n := len(te.releases()["any"]); n != 4 {
		t.Fatalf("released %d once the limit was removed, want the 4 held back", n)
	}
}

// TestRateLimitKeepsItsSchedule: a release a little after its token came does not push the next
// token back (a backlog runs at the rate, whatever the loop's delays), while after a pause
// longer than an interval the bucket counts from the release.
func TestRateLimitKeepsItsSchedule(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{})
	t0 := te.now
	te.e.SetLimit(wire.Limit{Kind: wire.LimitGroup, Name: "g", Rate: 10, Per: time.Second}, te.now)
	te.open("g")
	for range 5 {
		te.job(wire.JobMeta{Group: "g"})
	}
	te.worker("w", 8)
	step := func(at time.Time, want int) {
		t.Helper()
		te.now = at
		te.worker("w", 8)
		te.e.Tick(te.now)
		got := te.releases()["any"]
		for _, j := range got {
			te.report(j, wire.StatusOK, "")
		}
		if len(got) != want {
			t.Fatalf("at +%v released %d, want %d", at.Sub(t0), len(got), want)
		}
	}
	step(t0, 0)
	step(t0.Add(103*time.Millisecond), 1) // 3ms after its token
	if next := te.e.limits.nextToken(te.now); !next.Equal(t0.Add(200 * time.Millisecond)) {
		t.Fatalf("next token at +%v, want +200ms: the schedule, not the late release", next.Sub(t0))
	}
	step(t0.Add(199*time.Millisecond), 0)
	step(t0.Add(200*time.Millisecond), 1)
	step(t0.Add(time.Second), 1) // after a pause: one token (burst 1), the next an interval on
	if next := te.e.limits.nextToken(te.now); !next.Equal(t0.Add(1100 * time.Millisecond)) {
		t.Fatalf("after a pause the next token is at +%v, want +1.1s", next.Sub(t0))
	}
}

// TestPausedLimit: a paused group releases none of its jobs while the other group's take every
// slot; its jobs wait in the limit's line (no feeder slot: one is configured); a paused rate arms
// no timer; the resume offers them all at once under the limit's concurrency.
func TestPausedLimit(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{Feeders: 1, Prefetch: -1})
	te.e.SetLimit(wire.Limit{Kind: wire.LimitGroup, Name: "held", Paused: true, Concurrency: 3, Rate: 100, Per: time.Second, Burst: 100}, te.now)
	te.open("held")
	for range 5 {
		te.job(wire.JobMeta{Group: "held"})
	}
	te.seal("held")
	te.open("other")
	for range 4 {
		te.job(wire.JobMeta{Group: "other"})
	}
	te.seal("other")
	te.worker("w", 8)
	got := te.releases()["any"]
	if n := countBy(got); n["held"] != 0 || n["other"] != 4 {
		t.Fatalf("released %v while paused, want only the other group's 4", n)
	}
	ls := te.e.limits.byKey[limitKey{wire.LimitGroup, "held"}]
	if ls.held != 5 || ls.entries != 5 {
		t.Fatalf("%d jobs in the paused limit's line (%d entries), want 5", ls.held, ls.entries)
	}
	te.now = te.now.Add(time.Hour) // the rate's bucket is full: a token changes nothing
	te.worker("w", 8)              // a heartbeat: the worker is live at the new time
	if next := te.e.limits.nextToken(te.now); !next.IsZero() {
		t.Fatalf("a paused rate limit asks for a wakeup at %v", next)
	}
	te.e.Tick(te.now)
	if n := countBy(te.releases()["any"]); n["held"] != 0 {
		t.Fatalf("released %v of the paused group after its rate refilled", n)
	}
	te.e.SetLimit(wire.Limit{Kind: wire.LimitGroup, Name: "held", Concurrency: 3, Rate: 100, Per: time.Second, Burst: 100}, te.now)
	if n := countBy(te.releases()["any"]); n["held"] != 3 {
		t.Fatalf("the resume released %v, want 3 of the held group (its concurrency)", n)
	}
	want := []wire.HeldBack{{Kind: wire.LimitGroup, Name: "held", Jobs: 2}}
	if hb := te.e.heldBack(te.e.group("held").openSeq)[te.e.group("held").openSeq]; !slices.Equal(hb, want) {
		t.Fatalf("heldBack after the resume: %+v, want %+v (the two its concurrency holds)", hb, want)
	}
}

// TestHeldJobsCanceledInAPause: jobs canceled while a paused limit holds them are counted out of
// its line at once (status, heldBack), and a line mostly of ended jobs is compacted, so a long
// pause does not keep them.
func TestHeldJobsCanceledInAPause(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{Prefetch: -1})
	te.e.SetLimit(wire.Limit{Kind: wire.LimitResource, Name: "api", Paused: true}, te.now)
	te.open("a")
	var ids []uint64
	for range 200 {
		ids = append(ids, te.job(wire.JobMeta{Group: "a", Prefer: []string{"api"}}))
	}
	te.seal("a")
	te.worker("w", 4)
	for range 60 { // the worker's 4 slots take a decision at a time: every job comes to the line
		te.releases()
	}
	ls := te.e.limits.byKey[limitKey{wire.LimitResource, "api"}]
	held := func() int {
		for _, l := range te.e.Status().Limits {
			if l.Name == "api" {
				return l.Waiting
			}
		}
		return -1
	}
	if held() != 200 || ls.entries != 200 {
		t.Fatalf("held %d (line of %d), want all 200", held(), ls.entries)
	}
	te.control(wire.GroupControl{Group: "a", Op: wire.OpCancel, Jobs: ids[:150]})
	if held() != 50 {
		t.Fatalf("held %d after 150 of them were canceled, want 50", held())
	}
	if hb := te.e.heldBack(0)[te.e.group("a").openSeq]; len(hb) != 1 || hb[0].Jobs != 50 {
		t.Fatalf("heldBack %+v, want 50 by resource api", hb)
	}
	if ls.entries > 2*50+64 || len(ls.line[te.e.group("a")]) != ls.entries {
		t.Fatalf("the paused line keeps %d entries (%d counted) for 50 jobs held", len(ls.line[te.e.group("a")]), ls.entries)
	}
	te.control(wire.GroupControl{Group: "a", Op: wire.OpCancel})
	if held() != 0 || len(te.e.heldBack(0)) != 0 || len(ls.byGroup) != 0 {
		t.Fatalf("held %d (heldBack %v, per group %v) after the group was canceled, want none", held(), te.e.heldBack(0), ls.byGroup)
	}
}
