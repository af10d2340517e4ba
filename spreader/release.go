package spreader

import "iter"

// This file holds the release side: choosing and handing out jobs.

// Next releases the best job: the head job of the first group that Offers
// would yield. It counts the job in flight for its group and returns the group
// with it. It reports false if no active group has a job ready now.
func (s *Scheduler[G, J]) Next() (G, J, bool) {
	slot := s.ready.first(s.rotation)
	if slot < 0 {
		var (
			g   G
			job J
		)
		return g, job, false
	}
	grp := s.slots[slot]
	return grp.key, s.release(grp), true
}

// Offers yields the head job of each active group that has a job ready and is
// below MaxInFlightPerGroup, best first by policy. It yields at most one offer
// per group, and builds the offers lazily, so a caller that finds its pick
// early stops early at little cost. An offer is a look, not a release: call
// Take to release it.
//
// Offers reads the scheduler as it goes, so the caller may call Take while
// ranging. Each offer is valid when it is yielded, and each group is offered at
// most once per range. Taking offered groups leaves the rest of the range in the
// order it would have had: a group taken from moves up in rank but is not
// offered again, and a group that moves into a freed slot waits for the next
// range. Other changes made while ranging may or may not show in the rest of
// it.
func (s *Scheduler[G, J]) Offers() iter.Seq2[G, J] {
	return func(yield func(G, J) bool) {
		s.offers++
		stamp := s.offers
		for slot := range s.ready.ordered(s.rotation) {
			grp := s.slots[slot]
			if grp.offered == stamp {
				continue // taken from earlier in this range and ready again at a higher rank
			}
			grp.offered = stamp
			job, _ := grp.jobs.Peek()
			if !yield(grp.key, job) {
				return
			}
		}
	}
}

// Take releases g's head job, typically one chosen from Offers, and counts it
// in flight. It reports false, and releases nothing, if g would not be offered
// now: unknown, not active, nothing queued, or at MaxInFlightPerGroup.
func (s *Scheduler[G, J]) Take(g G) (J, bool) {
	grp := s.groups[g]
	if grp == nil || grp.rank < 0 {
		var job J
		return job, false
	}
	return s.release(grp), true
}

// release hands out the head job of grp, which must be in the ready set, and
// moves the rotation point past grp's slot.
func (s *Scheduler[G, J]) release(grp *group[G, J]) J {
	job, _ := grp.jobs.Pop()
	grp.inFlight++
	s.rotation = grp.slot + 1
	s.emptied(grp)
	return job
}

// Drop removes g's head job without releasing it, for a caller that sets the job aside (for
// example one that no live worker can run) and will run it outside the scheduler. Unlike Take it
// neither counts the job in flight nor moves the rotation point. It reports false if g would not
// be offered now.
func (s *Scheduler[G, J]) Drop(g G) (J, bool) {
	grp := s.groups[g]
	if grp == nil || grp.rank < 0 {
		var job J
		return job, false
	}
	job, _ := grp.jobs.Pop()
	s.emptied(grp)
	return job, true
}

// Begin counts in flight for g a job the caller releases outside the scheduler (a retry, or a
// job it set aside with Drop), so the policy and MaxInFlightPerGroup see it; Done ends it as
// usual. It reports false, counting nothing, if g is unknown (finished or canceled): the caller
// must then not call Done for that job either.
func (s *Scheduler[G, J]) Begin(g G) bool {
	grp := s.groups[g]
	if grp == nil {
		return false
	}
	grp.inFlight++
	s.reindex(grp)
	return true
}

// Capped reports whether g is at MaxInFlightPerGroup.
func (s *Scheduler[G, J]) Capped(g G) bool {
	grp := s.groups[g]
	return grp != nil && s.maxGroup > 0 && grp.inFlight >= s.maxGroup
}

// Remove takes job j out of g's queue without releasing it (the caller canceled it), and reports
// whether it was queued. It costs O(queued jobs of g).
func (s *Scheduler[G, J]) Remove(g G, j J, equal func(a, b J) bool) bool {
	grp := s.groups[g]
	if grp == nil {
		return false
	}
	before := grp.jobs.Len()
	grp.jobs.DeleteFunc(func(q J) bool { return equal(q, j) })
	if grp.jobs.Len() == before {
		return false
	}
	s.emptied(grp)
	return true
}
