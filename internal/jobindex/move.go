package jobindex

import (
	"fmt"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
)

// Move changes the state of job id to to and returns the state it left.
//
// An illegal move returns a [*TransitionError] (wrapping [ErrIllegalTransition]) and the job's
// current state, so a caller applying an at-least-once report can tell "already done" from a
// real conflict. An unknown job returns an error wrapping [ErrUnknownJob].
func (x *Index) Move(id uint64, to State) (from State, err error) {
	return x.move(id, to)
}

// MoveMany moves every job in ids to state to, all or nothing: if any move is illegal (also a
// job listed twice), or a job unknown, it returns that error and changes nothing.
func (x *Index) MoveMany(ids []uint64, to State) error {
	if !to.valid() {
		return fmt.Errorf("%w %d", ErrInvalidState, to)
	}
	var seen *roaring64.Bitmap
	if len(ids) > 1 {
		seen = x.w.bitmap
		seen.Clear()
	}
	for _, id := range ids {
		from, ok := x.stateOf(id)
		if !ok {
			return fmt.Errorf("%w %d", ErrUnknownJob, id)
		}
		if !transitions[from][to] {
			return &TransitionError{ID: id, From: from, To: to}
		}
		if seen != nil && !seen.CheckedAdd(id) {
			return &TransitionError{ID: id, From: to, To: to} // the second listing would find it moved
		}
	}
	for _, id := range ids {
		if _, err := x.move(id, to); err != nil {
			panic("jobindex: validated move failed: " + err.Error()) // unreachable: every move was checked above
		}
	}
	return nil
}

func (x *Index) move(id uint64, to State) (State, error) {
	if !to.valid() {
		return 0, fmt.Errorf("%w %d for job %d", ErrInvalidState, to, id)
	}
	// Only a legal predecessor can hold the job; CheckedRemove finds and removes in one step.
	for _, from := range predecessors[to] {
		if x.states[from].CheckedRemove(id) {
			x.apply(id, from, to)
			return from, nil
		}
	}
	from, ok := x.stateOf(id)
	if !ok {
		return 0, fmt.Errorf("%w %d", ErrUnknownJob, id)
	}
	return from, &TransitionError{ID: id, From: from, To: to}
}

// apply completes a move whose removal from states[from] is done.
func (x *Index) apply(id uint64, from, to State) {
	x.states[to].Add(id)
	x.counts.move(from, to)
	gid, pid, _ := x.catalog.lookup(id) // every indexed job is in the catalog
	if gid != aloneGroup {
		x.groups[gid].counts.move(from, to)
	}
	x.profiles[pid].counts.move(from, to)
	switch {
	case from == Pending:
		x.removePending(pid, id)
	case to == Pending:
		x.addPending(pid, id)
	}
}
