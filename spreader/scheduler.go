package spreader

import (
	"fmt"
	"iter"
	"slices"

	"github.com/weavejobs/weave/feeder"
)

// Scheduler is the live form of [Spread]. It runs the feeder model over groups
// that arrive over time and jobs that become ready over time, and it decides
// the order of releases at the last moment, when a worker is free.
//
// Groups, identified by keys of type G, join a line when they have jobs ready,
// in the order they got them. Each of F feeder slots holds one active group and
// takes the next group from the line when its group leaves. A group leaves its
// slot when its queue is empty, or when it is canceled. A group that is not
// sealed and has nothing queued is idle: it holds no slot, so a producer that is
// slow, stalled or gone cannot keep others waiting, and it joins the line again
// when jobs are pushed to it. Among the active groups with a job ready and below
// MaxInFlightPerGroup, the Policy picks the order of offers. Every job handed
// out counts as in flight for its group until the caller reports it Done.
//
// A Scheduler is not safe for concurrent use. One goroutine owns it: in Weave,
// the coordinator's state goroutine.
type Scheduler[G comparable, J any] struct {
	policy   Policy
	maxGroup int // MaxInFlightPerGroup; 0 means no cap
	feeders  int // slots that take groups; slots at feeders and above only drain

	groups map[G]*group[G, J] // every group that is not gone
	// line holds the waiting groups in the order they joined it. It also holds
	// stale entries, groups that left the line while waiting (canceled, or
	// sealed and emptied). Those are skipped when popped, and compacted away once
	// they outnumber the live entries. A group is in the line at most once: only
	// an idle group joins it, and a waiting group never becomes idle before it is
	// popped.
	line  feeder.Queue[*group[G, J]]
	stale int // entries in line whose group is no longer waiting

	slots  []*group[G, J] // the group each slot holds; nil when vacant
	vacant bitset         // vacant slots below feeders; empty while any group waits
	active int            // slots holding a group

	ready    readySet // slots whose group has a job to offer, by policy rank
	rotation int      // the slot after the one that last released: where round-robin order starts
	offers   uint64   // Offers ranges started; stamps each group offered
}

// NewScheduler returns an empty scheduler, or an error wrapping
// ErrInvalidConfig if cfg is out of range.
func NewScheduler[G comparable, J any](cfg Config) (*Scheduler[G, J], error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Scheduler[G, J]{
		policy:   cfg.Policy,
		maxGroup: cfg.MaxInFlightPerGroup,
		feeders:  cfg.Feeders,
		groups:   map[G]*group[G, J]{},
		slots:    make([]*group[G, J], cfg.Feeders),
	}
	for i := range cfg.Feeders {
		s.vacant.add(i)
	}
	return s, nil
}

// AddGroup starts tracking g, idle: it takes a slot, or a place in the line,
// once jobs are pushed to it. It returns an error wrapping ErrDuplicateGroup if
// g is already tracked: idle, waiting, active, or draining with jobs in flight.
func (s *Scheduler[G, J]) AddGroup(g G) error {
	if _, ok := s.groups[g]; ok {
		return fmt.Errorf("%w: %v", ErrDuplicateGroup, g)
	}
	s.groups[g] = &group[G, J]{key: g, rank: -1, state: idle}
	return nil
}

// Push appends ready jobs to g's queue, at priority 0. An idle g takes a vacant
// slot at once, the lowest one, if there is one, and otherwise joins the line.
// It returns an error wrapping ErrUnknownGroup or ErrSealed if g cannot take
// jobs.
func (s *Scheduler[G, J]) Push(g G, jobs ...J) error { return s.PushAt(g, 0, jobs...) }

// PushAt is Push at priority p (0–MaxPriority): g releases its queued jobs of the
// highest priority first, each priority's in push order. A priority orders jobs
// within their group only; which group is offered is the policy's choice. It
// returns an error wrapping ErrInvalidPriority if p is out of range.
func (s *Scheduler[G, J]) PushAt(g G, p int, jobs ...J) error {
	if p < 0 || p > MaxPriority {
		return fmt.Errorf("%w: %d, want 0..%d", ErrInvalidPriority, p, MaxPriority)
	}
	grp, err := s.unsealed(g)
	if err != nil {
		return err
	}
	for _, job := range jobs {
		grp.jobs.Push(p, job)
	}
	if grp.state == idle && grp.jobs.Len() > 0 {
		s.enter(grp)
		return nil
	}
	s.reindex(grp)
	return nil
}

// Seal records that no more jobs will be pushed to g. g leaves its slot, or the
// line, as soon as its queue is empty, which may be right away. It returns an
// error wrapping ErrUnknownGroup or ErrSealed if g is not an open group.
func (s *Scheduler[G, J]) Seal(g G) error {
	grp, err := s.unsealed(g)
	if err != nil {
		return err
	}
	grp.sealed = true
	if grp.jobs.Len() == 0 {
		s.retire(grp)
	}
	return nil
}

// Cancel removes g wherever it is: in the line, in a slot (which takes the next
// group at once), or draining. It returns g's queued jobs, the ones never
// released, in the order they would have been released. The scheduler then forgets g, including its jobs in
// flight: later Done calls for g are ignored, and g may be added again. Cancel
// on an unknown group returns nil.
func (s *Scheduler[G, J]) Cancel(g G) []J {
	grp := s.groups[g]
	if grp == nil {
		return nil
	}
	var jobs []J
	if grp.jobs.Len() > 0 {
		jobs = slices.Collect(grp.jobs.All())
	}
	s.forget(grp)
	return jobs
}

// Done records that one released job of g has finished, whatever its outcome.
// g may have left its slot already. Done on an unknown group, or on one with
// nothing in flight, does nothing, so a late or repeated report cannot corrupt
// the counts.
func (s *Scheduler[G, J]) Done(g G) {
	grp := s.groups[g]
	if grp == nil || grp.inFlight == 0 {
		return
	}
	grp.inFlight--
	switch grp.state {
	case active:
		s.reindex(grp)
	case draining:
		if grp.inFlight == 0 {
			s.forget(grp)
		}
	}
}

// SetFeeders changes the number of feeder slots while the scheduler runs. n < 1
// counts as 1, because a scheduler with no slot would hold every group back
// forever. The number of live workers can fall to zero, but work must still be
// offered when they return.
//
// Growing fills the new slots from the line at once. Shrinking evicts no group.
// Slots numbered n and above keep their groups until those leave naturally, and
// then close. Until then more than n groups may be active.
func (s *Scheduler[G, J]) SetFeeders(n int) {
	n = max(n, 1)
	old := s.feeders
	s.feeders = n
	if n < old {
		for i := n; i < old; i++ {
			s.vacant.remove(i)
		}
		s.trim()
		return
	}
	for i := old; i < n; i++ {
		if i == len(s.slots) {
			s.slots = append(s.slots, nil)
		}
		if s.slots[i] == nil {
			s.fill(i)
		}
	}
}

// OpenSlot gives g, which waits in the line, a slot of its own beyond the
// Feeders, at once: for urgent work that may not wait for a slot to free. The
// slot closes when g leaves it. It returns an error wrapping ErrNotWaiting if g
// is not waiting for a slot.
func (s *Scheduler[G, J]) OpenSlot(g G) error {
	grp := s.groups[g]
	if grp == nil || grp.state != waiting {
		return fmt.Errorf("%w: %v", ErrNotWaiting, g)
	}
	s.leave(grp, idle) // its entry in the line goes stale
	slot := s.feeders
	for slot < len(s.slots) && s.slots[slot] != nil {
		slot++
	}
	if slot == len(s.slots) {
		s.slots = append(s.slots, nil)
	}
	s.activate(slot, grp)
	return nil
}

// Extra returns the number of groups in slots beyond the Feeders: those OpenSlot
// gave a slot, and those that keep theirs after SetFeeders shrank.
func (s *Scheduler[G, J]) Extra() int {
	n := 0
	for _, grp := range s.slots[min(s.feeders, len(s.slots)):] {
		if grp != nil {
			n++
		}
	}
	return n
}

// Holders returns the groups that hold a slot, in slot order.
func (s *Scheduler[G, J]) Holders() iter.Seq[G] {
	return func(yield func(G) bool) {
		for _, grp := range s.slots {
			if grp != nil && !yield(grp.key) {
				return
			}
		}
	}
}

// InFlight returns the number of g's released jobs not yet done, or 0 if g is
// unknown.
func (s *Scheduler[G, J]) InFlight(g G) int {
	if grp := s.groups[g]; grp != nil {
		return grp.inFlight
	}
	return 0
}

// Queued returns the number of g's jobs pushed and not yet released, or 0 if g
// is unknown.
func (s *Scheduler[G, J]) Queued(g G) int {
	if grp := s.groups[g]; grp != nil {
		return grp.jobs.Len()
	}
	return 0
}

// Upcoming appends to dst up to n of g's queued jobs, the next to be released first, and returns
// the result. It releases nothing: the coordinator uses it to read ahead the payloads of the jobs
// about to go.
func (s *Scheduler[G, J]) Upcoming(dst []J, g G, n int) []J {
	grp := s.groups[g]
	if grp == nil || n <= 0 {
		return dst
	}
	for j := range grp.jobs.All() {
		dst = append(dst, j)
		if n--; n == 0 {
			break
		}
	}
	return dst
}

// HasVacant reports whether a slot is vacant: the next group given jobs takes it at once. A
// caller that keeps its own line of groups waiting (in Weave, groups not yet given their jobs)
// hands it the next one while HasVacant holds.
func (s *Scheduler[G, J]) HasVacant() bool { return s.vacant.next(0) >= 0 }

// Entered reports whether g holds a slot or waits in the line for one: jobs pushed to it are
// offered in turn. It reports false for an idle, draining or unknown group.
func (s *Scheduler[G, J]) Entered(g G) bool {
	grp := s.groups[g]
	return grp != nil && (grp.state == active || grp.state == waiting)
}

// Active returns the number of groups holding a slot.
func (s *Scheduler[G, J]) Active() int { return s.active }

// Waiting returns the number of groups waiting for a slot. Idle groups, open
// with nothing queued, do not count.
func (s *Scheduler[G, J]) Waiting() int { return s.line.Len() - s.stale }

// Feeders returns the number of feeder slots, as last set.
func (s *Scheduler[G, J]) Feeders() int { return s.feeders }

// unsealed returns g's record if g is known and not sealed.
func (s *Scheduler[G, J]) unsealed(g G) (*group[G, J], error) {
	grp := s.groups[g]
	switch {
	case grp == nil:
		return nil, fmt.Errorf("%w: %v", ErrUnknownGroup, g)
	case grp.sealed:
		return nil, fmt.Errorf("%w: %v", ErrSealed, g)
	}
	return grp, nil
}
