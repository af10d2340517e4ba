package coordinator

import (
	"maps"
	"slices"
	"time"

	"github.com/weavejobs/weave/internal/jobindex"
)

// Learned affinity: a pool that runs a job by fallback (it holds none of the resources the job
// prefers) learns those resources for Config.LearnAffinity: later jobs preferring them rank it
// above pools that ran none of them (jobindex.MatchLearned), below pools that hold them, so
// they find the caches it warmed. A job released to a pool for a resource it learned renews
// it. Learning is per pool: the coordinator releases to a pool, whose workers share its work
// subject, so with several workers in a pool the warm one is the pool's, not a worker's.

// learnAffinity records what releasing job id to p, a match of kind m, teaches the pool.
func (e *engine) learnAffinity(p *pool, id uint64, m jobindex.Match, now time.Time) {
	if e.cfg.LearnAffinity <= 0 || m == jobindex.MatchPreferred {
		return
	}
	until, changed := now.Add(e.cfg.LearnAffinity), false
	for name := range e.idx.JobPrefers(id) {
		if _, known := p.learned[name]; !known {
			if m == jobindex.MatchLearned {
				continue // renew only what it learned; the match was for one of those
			}
			if p.learned == nil {
				p.learned = map[string]time.Time{}
			}
			changed = true
		}
		p.learned[name] = until
	}
	if changed {
		e.compileHeld(p)
	}
}

// forgetAffinity drops the resources pools learned longer than LearnAffinity ago.
func (e *engine) forgetAffinity(now time.Time) {
	for _, p := range e.fleet.poolOrder {
		n := len(p.learned)
		maps.DeleteFunc(p.learned, func(_ string, until time.Time) bool { return !now.Before(until) })
		if len(p.learned) != n {
			e.compileHeld(p)
		}
	}
}

// compileHeld compiles the resources a pool holds and those it learned for selection.
func (e *engine) compileHeld(p *pool) {
	p.held = e.idx.CompileLearned(p.resources, slices.Collect(maps.Keys(p.learned)))
}
