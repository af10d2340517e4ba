package engine

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/weavejobs/weave/internal/jobindex"
	"github.com/weavejobs/weave/internal/wire"
	"github.com/weavejobs/weave/spreader"
)

// TestSettledChoiceIsTheFullChoice checks candidates' early stop against the whole list: over
// random workloads (both policies, weights, retries, jobs requiring a resource, more groups
// than candidates), whenever candidates settles a choice, the choice is the one the full list
// gives (the least loaded tier, then the first fit, as releaseAll picks without the stop).
func TestSettledChoiceIsTheFullChoice(t *testing.T) {
	t.Parallel()
	settled := 0
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 7))
		policy := spreader.LeastInFlight
		if seed%4 == 3 {
			policy = spreader.RoundRobin
		}
		te := newTestEngine(t, Config{Policy: policy, RetryBase: time.Second, RetryMax: time.Second})
		te.worker("w0", 1+rng.IntN(8))
		te.worker("w1", 1+rng.IntN(8))
		te.worker("g0", 1+rng.IntN(4), "gpu")
		for g := range 10 + rng.IntN(90) {
			group := fmt.Sprint("g", g)
			te.control(wire.GroupControl{Group: group, Op: wire.OpOpen, Weight: 1 + rng.IntN(3)})
			for range 1 + rng.IntN(30) {
				m := wire.JobMeta{Group: group}
				if rng.IntN(10) == 0 {
					m.Require = []string{"gpu"}
				}
				te.job(m)
			}
			te.seal(group)
		}
		var running []*job
		for step := range 300 {
			for _, p := range te.e.fleet.poolOrder {
				cands, ids, ok := te.e.candidates(nil, nil, p.held)
				if !ok {
					continue
				}
				settled++
				got := ids[len(ids)-1]
				want, wantOK := fullChoice(te.e, p.held)
				if !wantOK || got != want {
					t.Fatalf("seed %d step %d, pool %s: settled on job %d (of %d candidates), the full list chooses %d (%v)", seed, step, p.key, got, len(cands), want, wantOK)
				}
			}
			for _, js := range te.releases() {
				running = append(running, js...)
			}
			rng.Shuffle(len(running), func(i, j int) { running[i], running[j] = running[j], running[i] })
			n := rng.IntN(len(running) + 1)
			for _, j := range running[:n] {
				st := wire.StatusOK
				if rng.IntN(5) == 0 {
					st = wire.StatusError
				}
				te.report(j, st, "")
			}
			running = running[n:]
			te.now = te.now.Add(time.Duration(rng.IntN(1500)) * time.Millisecond)
			te.e.Tick(te.now)
			for _, w := range []string{"w0", "w1"} {
				te.worker(w, 4)
			}
			te.worker("g0", 2, "gpu")
		}
	}
	if settled == 0 {
		t.Fatal("no choice settled early: the test checks nothing")
	}
}

// fullChoice is releaseAll's choice for a pool holding held from the whole list of candidates
// (at most maxCandidates): the first pending fit of the least loaded tier, else the first fit.
func fullChoice(e *Engine, held *jobindex.ResourceSet) (uint64, bool) {
	var cands []candidate
	var ids []uint64
	for _, j := range e.retries.ready {
		if len(cands) < maxCandidates && !e.sched.Capped(j.g) {
			cands, ids = append(cands, candidate{g: j.g, id: j.id, retry: j}), append(ids, j.id)
		}
	}
	for g, id := range e.sched.Offers() {
		if len(cands) == maxCandidates {
			break
		}
		cands, ids = append(cands, candidate{g: g, id: id}), append(ids, id)
	}
	e.loads = e.loads[:0]
	for _, c := range cands {
		e.loads = append(e.loads, e.load(c.g))
	}
	id, _, ok := e.idx.Select(held, e.leastLoaded(cands, ids))
	if !ok {
		id, _, ok = e.idx.Select(held, ids)
	}
	return id, ok
}
