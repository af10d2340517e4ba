package engine

import (
	"maps"
	"slices"
	"time"

	"github.com/weavejobs/weave/internal/jobindex"
)

// Learned affinity: a pool that runs a job by fallback (it holds none of the resources the job
// prefers) learns those resources for Config.LearnAffinity: later jobs preferring them rank it
// above pools that ran none of them (jobindex.MatchLearned), below pools that hold them, so
// they find the caches it warmed. One pool at a time knows a resource: the one that last ran a
// job preferring it by fallback (if the warm pool was busy, the job's new pool is now the warm
// one: keeping the first would let the first pools gather most resources, and they are busy). A job released to the warm pool renews it. Learning is per pool: the
// coordinator releases to a pool, whose workers share its work subject, so with several workers
// in a pool the warm one is the pool's, not a worker's.

// learnAffinity records what releasing job id to p, a match of kind m, teaches the fleet.
func (e *Engine) learnAffinity(p *pool, id uint64, m jobindex.Match, now time.Time) {
	if e.cfg.LearnAffinity <= 0 || m == jobindex.MatchPreferred {
		return
	}
	until := now.Add(e.cfg.LearnAffinity)
	for name := range e.idx.JobPrefers(id) {
		old := e.fleet.learnedBy[name]
		switch {
		case old == p:
			p.learned[name] = until // renewed
			continue
		case m == jobindex.MatchLearned:
			continue // the match was for another resource it learned: this one is another's
		case old != nil:
			delete(old.learned, name)
			e.compileHeld(old)
		}
		if e.fleet.learnedBy == nil {
			e.fleet.learnedBy = map[string]*pool{}
		}
		if p.learned == nil {
			p.learned = map[string]time.Time{}
		}
		e.fleet.learnedBy[name] = p
		p.learned[name] = until
		e.compileHeld(p)
	}
}

// forgetAffinity drops the resources pools learned longer than LearnAffinity ago.
func (e *Engine) forgetAffinity(now time.Time) {
	for _, p := range e.fleet.poolOrder {
		n := len(p.learned)
		maps.DeleteFunc(p.learned, func(name string, until time.Time) bool {
			if now.Before(until) {
				return false
			}
			delete(e.fleet.learnedBy, name)
			return true
		})
		if len(p.learned) != n {
			e.compileHeld(p)
		}
	}
}

// compileHeld compiles the resources a pool holds and those it learned for selection.
func (e *Engine) compileHeld(p *pool) {
	p.held = e.idx.CompileLearned(p.resources, slices.Collect(maps.Keys(p.learned)))
}
