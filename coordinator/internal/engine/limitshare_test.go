package engine

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/weavejobs/weave/internal/jobindex"
	"github.com/weavejobs/weave/internal/wire"
	"github.com/weavejobs/weave/spreader"
)

// limitShares runs groups sharing a concurrency limit of 4 on resource eu, on a worker with
// slots to spare: the first group opens with a backlog and fills the limit's line alone, the
// others join later. After they joined, a random running job ends at each step and the next
// starts; it returns each group's share of the starts after they joined.
func limitShares(t *testing.T, seed uint64, weights map[string]int, order []string) map[string]float64 {
	t.Helper()
	te := newTestEngine(t, Config{Policy: spreader.LeastInFlight, Prefetch: -1})
	te.e.SetLimit(wire.Limit{Kind: wire.LimitResource, Name: "eu", Concurrency: 4}, te.now)
	te.worker("w", 16, "eu")
	var running []*job
	join := func(g string) {
		te.control(wire.GroupControl{Group: g, Op: wire.OpOpen, Weight: weights[g]})
		for range 1000 { // more than any group starts: none runs out
			te.job(wire.JobMeta{Group: g, Prefer: []string{"eu"}})
		}
		te.seal(g)
		for _, rel := range te.releases() {
			running = append(running, rel...)
		}
	}
	rng := rand.New(rand.NewPCG(seed, 31))
	step := func() []*job {
		i := rng.IntN(len(running))
		j := running[i]
		running = append(running[:i], running[i+1:]...)
		te.now = te.now.Add(time.Millisecond)
		te.evSeq++ // the handler ran from its release to its report: every group's busy share is 1
		te.e.Report(poolOf(j), "w", te.evSeq, wire.Report{ID: j.id, Attempt: j.attempt, Status: wire.StatusOK, Duration: te.now.Sub(j.since)}, te.now)
		te.worker("w", 16, "eu")
		var got []*job
		for _, rel := range te.releases() {
			got = append(got, rel...)
		}
		running = append(running, got...)
		return got
	}
	join(order[0])
	for range 20 { // the first group runs alone a while: its backlog is in the limit's line
		step()
	}
	for _, g := range order[1:] {
		join(g)
	}
	starts := map[string]int{}
	total := 0
	for range 600 {
		for _, j := range step() {
			starts[j.g.id]++
			total++
		}
	}
	if len(running) != 4 {
		t.Fatalf("%d jobs running under a limit of 4", len(running))
	}
	shares := map[string]float64{}
	for g, n := range starts {
		shares[g] = float64(n) / float64(total)
	}
	return shares
}

// TestLimitLineSharesFairly: groups that share a concurrency limit share its starts as they share
// the fleet, least in-flight first and in proportion to their weights, whatever order their jobs
// came to the limit's line in. Each share must lie within four standard deviations of a
// binomial draw of the starts around the fair share; first come, first served gives the first
// group nearly all of them.
func TestLimitLineSharesFairly(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		weights map[string]int
		want    map[string]float64
	}{
		{"equal", map[string]int{"a": 1, "b": 1, "c": 1}, map[string]float64{"a": 1.0 / 3, "b": 1.0 / 3, "c": 1.0 / 3}},
		{"weighted", map[string]int{"a": 1, "b": 3}, map[string]float64{"a": 0.25, "b": 0.75}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			order := []string{"a", "b", "c"}[:len(tc.weights)]
			for seed := range uint64(3) {
				shares := limitShares(t, seed, tc.weights, order)
				for g, want := range tc.want {
					bound := 4 * math.Sqrt(want*(1-want)/600)
					if got := shares[g]; math.Abs(got-want) > bound {
						t.Errorf("seed %d: group %s took %.2f of the limited starts, want %.2f ± %.2f (shares %v)", seed, g, got, want, bound, shares)
					}
				}
			}
		})
	}
}

// BenchmarkLimitLineShares reports the shares of a limit's starts (TestLimitLineSharesFairly's
// equal case) as figures: early-share is the group that filled the line first, late-share the
// mean of the two that joined later; a third each is fair. One op is one whole run.
func BenchmarkLimitLineShares(b *testing.B) {
	var shares map[string]float64
	for b.Loop() {
		shares = limitShares(&testing.T{}, 1, map[string]int{"a": 1, "b": 1, "c": 1}, []string{"a", "b", "c"})
	}
	b.ReportMetric(shares["a"], "early-share")
	b.ReportMetric((shares["b"]+shares["c"])/2, "late-share")
}

// TestStatusCountsLimitedGroups: a group whose jobs a limit holds back shows, in status and in
// inspection, the jobs it has running and those held. A paused limit holds every job of the
// group, so the scheduler hands out its last job with none in flight and forgets it; the jobs
// the resume releases were counted as none in flight.
func TestStatusCountsLimitedGroups(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{Prefetch: -1})
	te.e.SetLimit(wire.Limit{Kind: wire.LimitResource, Name: "eu", Concurrency: 3, Paused: true}, te.now)
	te.worker("w", 16, "eu")
	te.open("g")
	for range 10 {
		te.job(wire.JobMeta{Group: "g", Prefer: []string{"eu"}})
	}
	te.seal("g")
	if n := len(te.releases()); n != 0 {
		t.Fatalf("released to %d pools under a paused limit", n)
	}
	te.e.SetLimit(wire.Limit{Kind: wire.LimitResource, Name: "eu", Concurrency: 3}, te.now)
	if n := len(te.releases()[wire.PoolKey([]string{"eu"})]); n != 3 {
		t.Fatalf("the resume released %d, want 3", n)
	}
	st := te.e.Status()
	if len(st.Groups) != 1 || st.Groups[0].InFlight != 3 || st.Groups[0].Held != 7 {
		t.Fatalf("status groups %+v, want g with 3 in flight and 7 held", st.Groups)
	}
	r := te.e.groups.table.latest("g")
	if gl := te.e.groupLive(r, te.e.groupWaits(r.openSeq), te.e.aside()); gl.InFlight != 3 {
		t.Fatalf("inspection: %d in flight, want 3", gl.InFlight)
	}
}

// TestLimitLinesKeepTheirCounts drives random workloads through limits (both policies,
// weights, limits set, paused, resumed and removed, cancels, failures and retries) and checks
// after every step what the lines and counts promise: no limit runs more than its concurrency,
// each line's counts match the jobs it holds and has offered, and each group's in-flight count
// matches its jobs released and not reported. Every job ends once the limits are removed.
func TestLimitLinesKeepTheirCounts(t *testing.T) {
	t.Parallel()
	for seed := range uint64(30) {
		rng := rand.New(rand.NewPCG(seed, 11))
		policy := spreader.LeastInFlight
		if seed%3 == 2 {
			policy = spreader.RoundRobin
		}
		te := newTestEngine(t, Config{Policy: policy, RetryBase: time.Millisecond, RetryMax: time.Millisecond, Prefetch: -1})
		te.worker("w", 2+rng.IntN(10), "eu")
		limits := []wire.Limit{
			{Kind: wire.LimitResource, Name: "eu", Concurrency: 1 + rng.IntN(4)},
			{Kind: wire.LimitGroup, Name: "g1", Concurrency: 1 + rng.IntN(3)},
		}
		for _, l := range limits {
			te.e.SetLimit(l, te.now)
		}
		var ids []uint64
		for g := range 6 {
			group := fmt.Sprint("g", g)
			te.control(wire.GroupControl{Group: group, Op: wire.OpOpen, Weight: 1 + rng.IntN(3)})
			for range 5 + rng.IntN(40) {
				m := wire.JobMeta{Group: group, MaxAttempts: 2}
				if rng.IntN(3) > 0 {
					m.Prefer = []string{"eu"}
				}
				ids = append(ids, te.job(m))
			}
			te.seal(group)
		}
		var running []*job
		check := func(step int) {
			t.Helper()
			inFlight := map[*group]int{}
			for _, j := range te.e.jobs {
				if j.pool != nil {
					inFlight[j.g]++
				}
			}
			for _, g := range te.e.groups.live {
				if g.inFlight != inFlight[g] {
					t.Fatalf("seed %d step %d: group %s counts %d in flight, has %d", seed, step, g.id, g.inFlight, inFlight[g])
				}
			}
			for k, ls := range te.e.limits.byKey {
				running := ls.running
				te.e.countRunning(ls)
				if ls.running != running || (ls.Concurrency > 0 && running > ls.Concurrency) {
					t.Fatalf("seed %d step %d: limit %v counts %d running, has %d (concurrency %d)", seed, step, k, running, ls.running, ls.Concurrency)
				}
				held, entries, offered := 0, 0, 0
				for g, q := range ls.line {
					live := 0
					for _, j := range q {
						if j.heldBy == ls {
							live++
						}
					}
					if live != ls.byGroup[g] || live == 0 || !slices.Contains(ls.order, g) {
						t.Fatalf("seed %d step %d: limit %v holds %d jobs of %s, counts %d (in order: %v)", seed, step, k, live, g.id, ls.byGroup[g], slices.Contains(ls.order, g))
					}
					held, entries = held+live, entries+len(q)
				}
				for _, j := range te.e.retries.ready {
					if j.offeredBy == ls {
						offered++
					}
				}
				if held != ls.held || entries != ls.entries || len(ls.order) != len(ls.line) || offered != ls.offered {
					t.Fatalf("seed %d step %d: limit %v: %d held (counts %d), %d entries (%d), %d groups in order of %d, %d offered (%d)",
						seed, step, k, held, ls.held, entries, ls.entries, len(ls.order), len(ls.line), offered, ls.offered)
				}
			}
		}
		for step := range 400 {
			te.now = te.now.Add(time.Millisecond)
			te.worker("w", 2+rng.IntN(10), "eu")
			te.e.Tick(te.now)
			for _, js := range te.releases() {
				running = append(running, js...)
			}
			check(step)
			switch r := rng.IntN(20); {
			case r == 0:
				l := limits[rng.IntN(len(limits))]
				l.Paused = rng.IntN(2) == 0
				te.e.SetLimit(l, te.now)
			case r == 1:
				id := ids[rng.IntN(len(ids))]
				for _, g := range te.e.groups.live {
					te.control(wire.GroupControl{Group: g.id, Op: wire.OpCancel, Jobs: []uint64{id}})
					break
				}
			case len(running) > 0:
				i := rng.IntN(len(running))
				j := running[i]
				running = append(running[:i], running[i+1:]...)
				if st, _ := te.e.idx.State(j.id); st == jobindex.Running {
					status := wire.StatusOK
					if rng.IntN(4) == 0 {
						status = wire.StatusError
					}
					te.report(j, status, "")
				}
			}
			check(step)
		}
		for _, l := range limits {
			te.e.SetLimit(wire.Limit{Kind: l.Kind, Name: l.Name}, te.now) // removed
		}
		for step := 0; te.e.groups.table.len() > 0; step++ {
			if step > 10_000 {
				t.Fatalf("seed %d: %d groups left once the limits were removed", seed, te.e.groups.table.len())
			}
			te.now = te.now.Add(time.Millisecond)
			te.worker("w", 8, "eu")
			te.e.Tick(te.now)
			for _, js := range te.releases() {
				running = append(running, js...)
			}
			for _, j := range running {
				if st, _ := te.e.idx.State(j.id); st == jobindex.Running {
					te.report(j, wire.StatusOK, "")
				}
			}
			running = running[:0]
			for _, g := range te.e.out.summaries {
				te.e.forget(g)
			}
			te.e.out = Effects{}
		}
	}
}
