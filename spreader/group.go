package spreader

// state is where a group is in its life in the scheduler.
type state uint8

const (
	// waiting: in the line, waiting for a slot.
	waiting state = iota
	// active: holds a slot, and its queued jobs can be offered.
	active
	// draining: left its slot (sealed and empty), but jobs it released are
	// still in flight. The group is kept so that InFlight stays exact and the
	// key cannot be reused until those jobs are done.
	draining
	// gone: canceled or finished and no longer tracked. A group that went while
	// waiting can still sit in the line until the line is compacted.
	gone
	// idle: open, with nothing queued. It holds no slot and is not in the line,
	// so a group whose producer is slow, stalled or gone blocks nobody. Jobs
	// pushed to it put it back in the line (or in a vacant slot).
	idle
)

// group is the scheduler's record of one group.
type group[G comparable, J any] struct {
	key      G
	jobs     jobQueue[J] // pushed and not yet released: the highest priority first, then push order
	state    state
	sealed   bool
	slot     int    // the slot held while active
	rank     int    // rank in the ready set, or -1 while it has nothing to offer
	inFlight int    // released and not yet done
	offered  uint64 // the Offers range that last offered this group
}
