package spreader

// This file holds the slot bookkeeping: groups entering and leaving slots, and
// the ready set that follows each group's queue and in-flight count.

// enter gives idle grp, which has jobs queued now, the lowest vacant slot, or a
// place at the back of the line.
func (s *Scheduler[G, J]) enter(grp *group[G, J]) {
	if slot := s.vacant.next(0); slot >= 0 {
		s.vacant.remove(slot)
		s.activate(slot, grp)
		return
	}
	grp.state = waiting
	s.line.Push(grp)
}

// activate puts grp into the vacant slot. A group that moves in while Offers
// ranges is not offered before the next range (see Offers), even if its rank
// is still ahead in this one, as it can be for a group that went idle with
// jobs in flight and came back.
func (s *Scheduler[G, J]) activate(slot int, grp *group[G, J]) {
	grp.offered = s.offers
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
		switch {
		case grp.state != waiting:
			s.stale--
			continue
		case grp.jobs.Len() == 0:
			grp.state = idle // emptied by Remove while it waited
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

// emptied handles grp after a job left its queue: a group with nothing queued
// leaves its slot, idle if more jobs may come, retired if it is sealed. A
// waiting group stays in the line (fill skips it if it is still empty then).
func (s *Scheduler[G, J]) emptied(grp *group[G, J]) {
	switch {
	case grp.jobs.Len() > 0:
		s.reindex(grp)
	case grp.sealed:
		s.retire(grp)
	case grp.state == active:
		s.leave(grp, idle)
	}
}

// retire handles grp, sealed and with an empty queue: it has nothing more to
// hand out. It leaves its slot or the line, and is forgotten once nothing of it
// is in flight.
func (s *Scheduler[G, J]) retire(grp *group[G, J]) {
	if grp.inFlight > 0 {
		s.leave(grp, draining)
		return
	}
	s.forget(grp)
}

// forget stops tracking grp.
func (s *Scheduler[G, J]) forget(grp *group[G, J]) {
	delete(s.groups, grp.key)
	s.leave(grp, gone)
}

// leave takes grp out of its slot, or the line, into state to.
func (s *Scheduler[G, J]) leave(grp *group[G, J], to state) {
	from := grp.state
	grp.state = to
	switch from {
	case active:
		s.vacate(grp)
	case waiting:
		// grp stays in the line as a stale entry. Compacting when stale entries
		// outnumber live ones keeps the line within twice its live length. Each
		// compaction costs no more than the departures that made it necessary.
		s.stale++
		if s.stale >= 32 && 2*s.stale > s.line.Len() {
			s.line.DeleteFunc(func(g *group[G, J]) bool { return g.state != waiting })
			s.stale = 0
		}
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
