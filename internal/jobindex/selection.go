package jobindex

import (
	"slices"
	"strconv"
)

// Match says why a selected job suits a worker pool.
type Match uint8

const (
	// MatchNone: nothing was selected.
	MatchNone Match = iota
	// MatchPreferred: the job prefers a resource the pool holds, and the pool holds everything
	// it requires.
	MatchPreferred
	// MatchRequired: the job requires resources, the pool holds all of them, and the job
	// prefers none of the pool's resources.
	MatchRequired
	// MatchFallback: the job requires nothing and prefers nothing the pool holds; any pool may
	// run it.
	MatchFallback
	// MatchLearned: the job prefers none of the pool's resources but one the pool has learned
	// (see [Index.CompileLearned]), and the pool holds everything it requires. It ranks below
	// MatchPreferred and above MatchRequired and MatchFallback.
	MatchLearned
)

var matchNames = [...]string{"none", "preferred", "required", "fallback", "learned"}

func (m Match) String() string {
	if int(m) < len(matchNames) {
		return matchNames[m]
	}
	return "Match(" + strconv.Itoa(int(m)) + ")"
}

// ResourceSet is the set of resources a worker pool holds, prepared for repeated selection.
//
// It stores names, so it may name resources no job mentions yet, and it stays valid as jobs
// come and go: the first selection after the index's resource or profile tables change
// recompiles it (O(held + profiles)); selections in between reuse the compiled form. It may be
// used with several indexes, and like an [Index] it belongs to one goroutine: the index's owner.
type ResourceSet struct {
	names    []string // sorted, no duplicates
	learned  []string // sorted, no duplicates: preferred-only (see CompileLearned)
	compiled *compiledSet
}

// compiledSet is a ResourceSet resolved against one index at one epoch.
type compiledSet struct {
	index uint64 // Index.id
	epoch uint64
	// verdict[p] is how a pending job with profile p suits the pool; MatchNone if the pool
	// lacks one of its required resources.
	verdict []Match
	// preferred lists the profiles with verdict MatchPreferred, learned those with
	// MatchLearned, fitting those with MatchRequired or MatchFallback: the profiles SelectAny
	// takes minimums over.
	preferred, learned, fitting []uint32
}

// NewResourceSet returns the resource set holding held. Names are case-sensitive; duplicates
// and empty names are ignored.
func NewResourceSet(held ...string) *ResourceSet {
	names := slices.DeleteFunc(slices.Clone(held), func(n string) bool { return n == "" })
	slices.Sort(names)
	return &ResourceSet{names: slices.Compact(names)}
}

// Names returns the held resource names, sorted.
func (w *ResourceSet) Names() []string { return slices.Clone(w.names) }

// Compile returns the resource set holding held, compiled for x so that the first selection
// is as cheap as the rest. It is [NewResourceSet] plus a warm-up.
func (x *Index) Compile(held []string) *ResourceSet {
	w := NewResourceSet(held...)
	w.compile(x)
	return w
}

// CompileLearned is [Index.Compile] for a pool that also learned resources: a job preferring a
// learned resource suits the pool better than one that prefers nothing it holds
// ([MatchLearned]), but a learned resource never meets a requirement. It serves affinity
// learned from where jobs ran: a pool that ran a job preferring r by fallback has r's data warm.
func (x *Index) CompileLearned(held, learned []string) *ResourceSet {
	w := NewResourceSet(held...)
	w.learned = NewResourceSet(learned...).names
	w.compile(x)
	return w
}

// compile returns w resolved against x, compiling it again if x's tables changed since.
func (w *ResourceSet) compile(x *Index) *compiledSet {
	if c := w.compiled; c != nil && c.index == x.id && c.epoch == x.epoch {
		return c
	}
	held := make([]bool, len(x.resources))
	for _, name := range w.names {
		if rid, ok := x.resourceIDs[name]; ok {
			held[rid] = true
		}
	}
	var learned []bool
	if len(w.learned) > 0 {
		learned = make([]bool, len(x.resources))
		for _, name := range w.learned {
			if rid, ok := x.resourceIDs[name]; ok {
				learned[rid] = true
			}
		}
	}
	c := &compiledSet{index: x.id, epoch: x.epoch, verdict: make([]Match, len(x.profiles))}
	for pid := range x.profiles {
		p := &x.profiles[pid]
		if p.key == "" {
			continue
		}
		m := verdict(p, held, learned)
		c.verdict[pid] = m
		switch m {
		case MatchPreferred:
			c.preferred = append(c.preferred, uint32(pid))
		case MatchLearned:
			c.learned = append(c.learned, uint32(pid))
		case MatchRequired, MatchFallback:
			c.fitting = append(c.fitting, uint32(pid))
		}
	}
	w.compiled = c
	return c
}

func verdict(p *profile, held, learned []bool) Match {
	for _, rid := range p.require {
		if !held[rid] {
			return MatchNone
		}
	}
	for _, rid := range p.prefer {
		if held[rid] {
			return MatchPreferred
		}
	}
	for _, rid := range p.prefer {
		if learned != nil && learned[rid] {
			return MatchLearned
		}
	}
	if len(p.require) > 0 {
		return MatchRequired
	}
	return MatchFallback
}

// Select picks a job for a pool holding w among candidates, the jobs the scheduler offers in
// priority order. It returns the first pending candidate that prefers a resource in w (and
// whose requirements w meets); if there is none, the first that prefers a resource w learned;
// if there is none, the first pending candidate whose requirements w meets. Candidates that are
// not pending or not indexed are skipped. ok is false when no candidate fits.
//
// Select does not change the job's state: the caller moves it to [Running] when it releases it.
// The cost is O(len(candidates) × log spans per block).
func (x *Index) Select(w *ResourceSet, candidates []uint64) (id uint64, m Match, ok bool) {
	c := w.compile(x)
	if len(c.preferred) == 0 && len(c.learned) == 0 {
		// Nothing can beat the first fit (a pool holding nothing, say): it is the answer.
		for _, cand := range candidates {
			if _, pid, known := x.catalog.lookup(cand); known && c.verdict[pid] != MatchNone && x.states[Pending].Contains(cand) {
				return cand, c.verdict[pid], true
			}
		}
		return 0, MatchNone, false
	}
	for _, cand := range candidates {
		_, pid, known := x.catalog.lookup(cand)
		if !known {
			continue
		}
		v := c.verdict[pid]
		if v == MatchNone || ok && (m == MatchLearned || v != MatchLearned) && v != MatchPreferred {
			continue // cannot run here, or cannot beat the one already found
		}
		if !x.states[Pending].Contains(cand) {
			continue
		}
		if v == MatchPreferred {
			return cand, v, true
		}
		id, m, ok = cand, v, true
	}
	return id, m, ok
}

// MayPrefer reports whether some job profile of x prefers a resource w holds or learned (and
// has its requirements met by w): if not, no selection for w finds a [MatchPreferred] or
// [MatchLearned] job, and a caller looking only for those need not ask. O(1) once w is compiled.
func (x *Index) MayPrefer(w *ResourceSet) bool {
	c := w.compile(x)
	return len(c.preferred) > 0 || len(c.learned) > 0
}

// SelectAny is [Index.Select] over all pending jobs: the lowest-ID pending job that prefers a
// resource in w (and whose requirements w meets), else the lowest-ID pending job whose
// requirements w meets. The cost is O(profiles fitting w), independent of the backlog.
func (x *Index) SelectAny(w *ResourceSet) (id uint64, m Match, ok bool) {
	c := w.compile(x)
	best := uint64(noJob)
	for _, pid := range c.preferred {
		best = min(best, x.minPending[pid])
	}
	if best != noJob {
		return best, MatchPreferred, true
	}
	for _, pid := range c.learned {
		best = min(best, x.minPending[pid])
	}
	if best != noJob {
		return best, MatchLearned, true
	}
	bestProfile := uint32(0)
	for _, pid := range c.fitting {
		if v := x.minPending[pid]; v < best {
			best, bestProfile = v, pid
		}
	}
	if best == noJob {
		return 0, MatchNone, false
	}
	return best, c.verdict[bestProfile], true
}
