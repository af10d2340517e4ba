package spreader

// This file holds the slot bookkeeping: groups entering and leaving slots, and
// the ready set that follows each group's queue and in-flight count.

// activate puts grp into the vacant slot.
func (s *Scheduler[G, J]) activate(slot int, grp *group[G, J]) {
	grp.state = active
	grp.slot = slot
	s.slots[slot] = grp
	s.active++
	s.reindex(grp)
}

// vacate takes active grp out of its slot and lets the slot take the next group.
// The caller decides what becomes of grp.
func (s *Scheduler[G, J]) vacate(grp *group[G, J]) {
	if grp.rank >= 0 {
		s.ready.remove(grp.slot, grp.rank)
		grp.rank = -1
	}
	s.slots[grp.slot] = nil
	s.active--
	s.fill(grp.slot)
}

// fill gives a vacant slot the next waiting group, or marks it vacant if none is
// waiting. A retiring slot, at feeders or above, closes instead.
func (s *Scheduler[G, J]) fill(slot int) {
	if slot >= s.feeders {
		s.trim()
		return
	}
	for {
		grp, ok := s.line.Pop()
		if !ok {
			s.vacant.add(slot)
			return
		}
		if grp.state == gone {
			s.stale--
			continue
		}
		s.activate(slot, grp)
		return
	}
}

// trim drops the vacant slots at the end that are at feeders or above.
func (s *Scheduler[G, J]) trim() {
	for n := len(s.slots); n > s.feeders && s.slots[n-1] == nil; n-- {
		s.slots = s.slots[:n-1]
	}
}

// retire handles grp, sealed and with an empty queue: it has nothing more to
// hand out. It leaves its slot or the line, and is forgotten once nothing of it
// is in flight.
func (s *Scheduler[G, J]) retire(grp *group[G, J]) {
	if grp.state == active {
		s.vacate(grp)
	}
	if grp.inFlight > 0 {
		grp.state = draining
		return
	}
	s.forget(grp)
}

// forget stops tracking grp.
func (s *Scheduler[G, J]) forget(grp *group[G, J]) {
	delete(s.groups, grp.key)
	wasWaiting := grp.state == waiting
	grp.state = gone
	if !wasWaiting {
		return
	}
	// grp stays in the line as a stale entry. Compacting when stale entries
	// outnumber live ones keeps the line within twice its live length. Each
	// compaction costs no more than the forgets that made it necessary.
	s.stale++
	if s.stale >= 32 && 2*s.stale > s.line.Len() {
		s.line.DeleteFunc(func(g *group[G, J]) bool { return g.state == gone })
		s.stale = 0
	}
}

// reindex puts grp in the ready set at the rank the policy gives it, or takes
// it out when it has nothing to offer: not active, nothing queued, or at the
// in-flight cap.
func (s *Scheduler[G, J]) reindex(grp *group[G, J]) {
	rank := -1
	if grp.state == active && grp.jobs.Len() > 0 && (s.maxGroup == 0 || grp.inFlight < s.maxGroup) {
		rank = 0
		if s.policy == LeastInFlight {
			rank = grp.inFlight
		}
	}
	if rank == grp.rank {
		return
	}
	if grp.rank >= 0 {
		s.ready.remove(grp.slot, grp.rank)
	}
	if rank >= 0 {
		s.ready.add(grp.slot, rank)
	}
	grp.rank = rank
}
