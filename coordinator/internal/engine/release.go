package engine

import (
	"slices"
	"time"

	"github.com/weavejobs/weave/internal/jobindex"
	"github.com/weavejobs/weave/spreader"
)

// releasePass is one round of release decisions over all pools.
type releasePass struct {
	affinityOnly bool // only jobs requiring or preferring something the pool holds
	prefetch     bool // fill prefetch places too, not only free slots
}

// releasePasses: affinity first, so a job preferring r goes to a free holder of r when there
// is one; then any job a pool may run (fallback); then the prefetch places, last, so a job never
// queues behind a busy pool while another has a free slot.
var releasePasses = [...]releasePass{{affinityOnly: true}, {}, {prefetch: true}}

// maxCandidates bounds how many offers one selection looks at.
const maxCandidates = 64

// candidate is a job offered for release: a retry, or the head of an active group.
type candidate struct {
	g     *group
	id    uint64
	retry *job // non-nil for a retry
}

// ReleaseAll is the release decision: it releases jobs to every pool of the fleet with free
// capacity, in the passes of releasePasses, choosing among the ready retries (first) and the
// scheduler's offers, and records each batch as a release effect. Jobs no live pool can run are
// parked (see parkUnplaceable).
func (e *Engine) ReleaseAll() {
	if e.Replaying() || len(e.fleet.poolOrder) == 0 {
		return
	}
	// Rotate the pool order so no pool always gets first pick.
	e.fleet.poolOrder = append(e.fleet.poolOrder[1:], e.fleet.poolOrder[0])
	batches := make(map[*pool][]*job)
	var cands []candidate
	var ids []uint64
	outstanding := 0
	for _, p := range e.fleet.poolOrder {
		outstanding += p.outstanding
	}
	e.resizeFeeders()
	window := e.fleet.prefetch(&e.cfg)
	now := e.cfg.now()
	var limited []*limitState
	for _, pass := range releasePasses {
		prefetch := 0
		if pass.prefetch {
			prefetch = window
		}
		affinityOnly := pass.affinityOnly
		for _, p := range e.fleet.poolOrder {
			if affinityOnly && !e.idx.MayPrefer(p.held) {
				continue // no job prefers what it holds or learned: the affinity pass has nothing for it
			}
			// Prefetch places are a budget for the whole fleet, not per pool: released jobs stay
			// within slots + Prefetch, which is F by default, so groups stay spread.
			// Once the pool's slots are all taken, prefetched jobs may go to a worker beyond its
			// slots, to wait in its queue.
			extra := 0
			if pass.prefetch && p.free(0) <= 0 {
				extra = aheadPerSlot(&e.cfg, p)
			}
			bcap := p.batchCap(e.cfg.MaxBatch, extra)
			for p.free(prefetch) > 0 && len(batches[p]) < bcap && (!pass.prefetch || outstanding < e.fleet.slots+window) {
				var settled bool
				cands, ids, settled = e.candidates(cands[:0], ids[:0], p.held)
				if len(cands) == 0 {
					break
				}
				id, m, ok := ids[len(ids)-1], e.settledMatch, settled
				if !settled {
					id, m, ok = e.choose(p.held, cands, ids, affinityOnly)
					if !ok && !affinityOnly && e.parkUnplaceable(cands) {
						continue // the heads that blocked their groups are set aside: look again
					}
				}
				if !ok || (affinityOnly && m == jobindex.MatchFallback) {
					break
				}
				c := cands[slices.Index(ids, id)]
				if limited = e.limitsOf(limited[:0], c.id, c.g.id); len(limited) > 0 {
					if pass.prefetch {
						break // a limited job goes to a free slot only: it starts when released
					}
					if ls := holdingBack(limited, now); ls != nil {
						if !e.holdBack(c, ls) {
							break // a bug (the offer is not its group's head): look no further
						}
						continue
					}
					useLimits(limited, c.g, now)
				}
				batches[p] = append(batches[p], e.take(c, p, now))
				e.learnAffinity(p, c.id, m, now)
				outstanding++
				if len(batches[p]) == bcap {
					e.flushBatch(p, batches)
				}
			}
		}
	}
	for _, p := range e.fleet.poolOrder {
		e.flushBatch(p, batches)
	}
}

// free is how many more jobs the pool may be given, counting prefetch places or not.
func (p *pool) free(prefetch int) int {
	if p.workers == 0 {
		return 0
	}
	return p.slots + prefetch - p.outstanding
}

// batchCap is the most jobs one batch for the pool may hold: MaxBatch, and no more than one
// worker's share of the pool's slots, since one worker takes the whole batch, plus ahead jobs
// per slot of that share, which wait in the worker's queue (see fleet.aheadPerSlot).
func (p *pool) batchCap(maxBatch, ahead int) int {
	if p.workers == 0 {
		return 1
	}
	return max(1, min(maxBatch, (1+ahead)*((p.slots+p.workers-1)/p.workers)))
}

// candidates lists the jobs on offer: retries first (oldest first), then the scheduler's offers
// in policy order, with their loads in e.loads (under LeastInFlight).
//
// It stops early, settled, at a candidate that is the choice for a pool holding held whatever
// the rest of the list holds: when the pool prefers and learned nothing, Select takes the first
// pending fit of the least loaded tier, so the first fit with nothing in flight (no load is
// lower) under LeastInFlight, or the first fit under RoundRobin, is the answer. It is then the
// last candidate listed and its match is in e.settledMatch. Most releases settle within the
// first few offers instead of listing maxCandidates of them.
func (e *Engine) candidates(cands []candidate, ids []uint64, held *jobindex.ResourceSet) ([]candidate, []uint64, bool) {
	lif := e.cfg.Policy == spreader.LeastInFlight
	// The first candidate that fits may be taken without looking further only if no group has
	// a priority (choose ranks them) and no job prefers what the pool holds.
	quick := !e.idx.MayPrefer(held) && e.groups.prioritized == 0
	e.loads = e.loads[:0]
	e.fillSlots() // a group that left its slot since the last offers leaves it to the next waiting
	for _, j := range e.retries.ready {
		if len(cands) == maxCandidates {
			break // no room for offers either
		}
		if e.sched.Capped(j.g) {
			continue
		}
		cands = append(cands, candidate{g: j.g, id: j.id, retry: j})
		ids = append(ids, j.id)
		if lif {
			e.loads = append(e.loads, e.load(j.g))
		}
		if quick && e.settles(held, j.id, lif) {
			return cands, ids, true
		}
	}
	first := len(cands)
	for g, id := range e.sched.Offers() {
		if len(cands) == maxCandidates {
			break
		}
		cands = append(cands, candidate{g: g, id: id})
		ids = append(ids, id)
		if lif {
			e.loads = append(e.loads, e.load(g))
		}
		if quick && e.settles(held, id, lif) {
			return cands, ids, true
		}
	}
	if lif {
		e.preferLeastRunning(cands[first:], ids[first:], e.loads[first:])
	}
	return cands, ids, false
}

// settles reports whether the candidate just listed, id, is the choice for a pool holding held
// that prefers nothing (see candidates), and keeps its match in e.settledMatch.
func (e *Engine) settles(held *jobindex.ResourceSet, id uint64, lif bool) bool {
	if lif && e.loads[len(e.loads)-1] != 0 {
		return false
	}
	e.one[0] = id
	_, m, ok := e.idx.Select(held, e.one[:])
	e.settledMatch = m
	return ok
}

// preferLeastRunning moves to the front the offer whose group has the fewest jobs running as the
// handlers see them (released × busy share). The scheduler counts released jobs; between a
// completion and the next release a slot is not running anything, which costs short jobs a larger
// share of their slots than long ones, so raw counts favour groups with long jobs.
// loads[i] is cands[i]'s load; it is reordered with them.
func (e *Engine) preferLeastRunning(cands []candidate, ids []uint64, loads []float64) {
	best, bestLoad := -1, 0.0
	for i, load := range loads {
		if best < 0 || load < bestLoad {
			best, bestLoad = i, load
		}
	}
	if best > 0 {
		c, id, load := cands[best], ids[best], loads[best]
		copy(cands[1:best+1], cands[:best])
		copy(ids[1:best+1], ids[:best])
		copy(loads[1:best+1], loads[:best])
		cands[0], ids[0], loads[0] = c, id, load
	}
}

// choose picks the job to release to a pool holding held among the candidates, none of which
// settled: the highest priority first (a group's priority goes before fairness); within it, the
// least loaded groups, preference breaking ties, so a group preferring what a pool holds cannot
// take all of its slots; then any job of that priority the pool can run; then the next priority.
// ok is false when no candidate fits the pool (in the affinity pass: none fits by preference).
func (e *Engine) choose(held *jobindex.ResourceSet, cands []candidate, ids []uint64, affinityOnly bool) (uint64, jobindex.Match, bool) {
	top, low := 0, 0
	for i, c := range cands {
		if i == 0 || c.g.priority > top {
			top = c.g.priority
		}
		if i == 0 || c.g.priority < low {
			low = c.g.priority
		}
	}
	if top == low {
		id, m, ok := e.idx.Select(held, e.leastLoaded(cands, ids))
		if !ok && !affinityOnly {
			id, m, ok = e.idx.Select(held, ids) // nothing in the tier fits this pool
		}
		return id, m, ok
	}
	// Tiers by priority, each with its candidates' loads, in offer order.
	var tierCands []candidate
	var tierIDs []uint64
	var tierLoads []float64
	loads := e.loads
	for p := top; p >= low; p-- {
		tierCands, tierIDs, tierLoads = tierCands[:0], tierIDs[:0], tierLoads[:0]
		for i, c := range cands {
			if c.g.priority == p {
				tierCands, tierIDs = append(tierCands, c), append(tierIDs, ids[i])
				if len(loads) > i {
					tierLoads = append(tierLoads, loads[i])
				}
			}
		}
		if len(tierCands) == 0 {
			continue
		}
		e.loads = tierLoads
		id, m, ok := e.idx.Select(held, e.leastLoaded(tierCands, tierIDs))
		e.loads = loads
		if !ok && !affinityOnly {
			id, m, ok = e.idx.Select(held, tierIDs)
		}
		if ok {
			return id, m, true
		}
	}
	return 0, 0, false
}

// leastLoaded returns the IDs of the candidates whose group has the fewest jobs running as the
// handlers see them (in flight × busy share), in offer order, under LeastInFlight; under
// RoundRobin, whose order is the rotation, all of them. Groups with nothing in flight tie at
// zero, so with more groups than slots they are all in the tier. It reads the loads candidates
// computed (e.loads) and reuses e.tierBuf.
func (e *Engine) leastLoaded(cands []candidate, ids []uint64) []uint64 {
	if e.cfg.Policy != spreader.LeastInFlight {
		return ids
	}
	least := -1.0
	for _, l := range e.loads[:len(cands)] { // candidates computed them
		if least < 0 || l < least {
			least = l
		}
	}
	e.tierBuf = e.tierBuf[:0]
	for i, c := range cands {
		if e.loads[i] == least {
			e.tierBuf = append(e.tierBuf, c.id)
		}
	}
	return e.tierBuf
}

// load is a group's running jobs as the handlers see them (in flight × busy share) per unit of
// weight: least in-flight evens it out, so a group of weight 3 runs three times the jobs of one
// of weight 1. A group with nothing in flight is at 0 whatever its share and weight, so it
// always comes first: a low share or a high weight can never let a group with jobs in flight
// overtake one without (that would break the spread).
//
// The count is taken half a job up: a slot holds whole jobs, and comparing the counts as they
// are keeps a group at the count it has (the group whose job just ended is one lower, so it gets
// the slot back) even where its fair share lies half a job below; halfway between the count
// before and after the release, the choice alternates around the share. With weights 1 and 3 on
// 8 slots it is the difference between 0.30 and 0.25 of them (weave bench weights).
func (e *Engine) load(g *group) float64 {
	return shareLoad(g.inFlight, g) // not the scheduler's count: it misses the jobs of groups it forgot
}

// shareLoad is the load (see load) of g with n jobs in flight.
func shareLoad(n int, g *group) float64 {
	if n == 0 {
		return 0
	}
	// At least a small floor per job, so any job in flight weighs more than none.
	return (float64(n) + 0.5) * max(g.busy, minBusy) / g.weight
}

// minBusy is the least busy share load counts a job in flight for.
const minBusy = 1e-3

// take moves a chosen candidate to running in pool p, at now (the release's time).
func (e *Engine) take(c candidate, p *pool, now time.Time) *job {
	j := c.retry
	if j != nil {
		e.retries.ready = slices.DeleteFunc(e.retries.ready, func(r *job) bool { return r == j })
		unoffer(j)
		j.counted = e.sched.Begin(j.g)
	} else {
		got, _ := e.sched.Take(c.g)
		if got != c.id {
			e.log.Error().Uint64("want", c.id).Uint64("got", got).Msg("scheduler head changed under selection")
		}
		j = &job{id: c.id, g: c.g, counted: true}
		e.mx.released(e.pendingSince(c.id), now)
		e.jobs[j.id] = j
	}
	if !j.reuse {
		j.attempt++
		j.rel = 0 // the attempt's first release
	}
	j.reuse = false
	j.pool, j.since = p, now
	j.g.inFlight++
	j.evSeq = 0 // its latest attempt is in WORK from now on: no report is needed
	p.outstanding++
	p.lastRelease = now
	e.mustMove(j.id, jobindex.Running)
	e.stats.Released++
	return j
}

func (e *Engine) flushBatch(p *pool, batches map[*pool][]*job) {
	if b := batches[p]; len(b) > 0 {
		e.out.releases = append(e.out.releases, release{pool: p, jobs: b})
		batches[p] = nil
	}
}

// parkUnplaceable sets aside the candidates that no live pool can run, so a job requiring a
// resource nobody holds waits (pending, counted per resource in status) without blocking the
// rest of its group. It reports whether it parked any.
func (e *Engine) parkUnplaceable(cands []candidate) bool {
	parked := false
	for _, c := range cands {
		if e.placeable(c.id) {
			continue
		}
		j := c.retry
		if j == nil {
			if _, ok := e.sched.Drop(c.g); !ok {
				continue
			}
			j = &job{id: c.id, g: c.g, heapIdx: -1}
			e.jobs[j.id] = j
		} else {
			e.retries.ready = slices.DeleteFunc(e.retries.ready, func(r *job) bool { return r == j })
			unoffer(j)
		}
		e.retries.parked = append(e.retries.parked, j)
		parked = true
	}
	return parked
}

// placeable reports whether some live pool holds every resource the job requires.
func (e *Engine) placeable(id uint64) bool {
	one := []uint64{id}
	for _, p := range e.fleet.poolOrder {
		if p.workers > 0 {
			if _, _, ok := e.idx.Select(p.held, one); ok {
				return true
			}
		}
	}
	return false
}
