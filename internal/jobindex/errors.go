package jobindex

import (
	"errors"
	"fmt"
)

// Sentinel errors. Errors returned by the index wrap one of these, so callers branch with
// [errors.Is].
var (
	// ErrIllegalTransition: the move is not in the state machine. The error is a
	// [*TransitionError] naming the job and both states.
	ErrIllegalTransition = errors.New("jobindex: illegal transition")
	// ErrUnknownJob: no job with this ID is in the index.
	ErrUnknownJob = errors.New("jobindex: unknown job")
	// ErrDuplicateJob: a job with this ID is already in the index.
	ErrDuplicateJob = errors.New("jobindex: duplicate job")
	// ErrInvalidJob: the job cannot be indexed (reserved ID, empty group or resource name).
	ErrInvalidJob = errors.New("jobindex: invalid job")
	// ErrInvalidState: a state value or name outside the state machine.
	ErrInvalidState = errors.New("jobindex: invalid state")
	// ErrUnknownGroup: no job of this group is in the index.
	ErrUnknownGroup = errors.New("jobindex: unknown group")
	// ErrGroupActive: the group still has pending, running or retrying jobs, so it cannot be
	// forgotten.
	ErrGroupActive = errors.New("jobindex: group has active jobs")
)

// TransitionError reports a move the state machine does not allow. It wraps
// [ErrIllegalTransition].
type TransitionError struct {
	ID   uint64
	From State // the job's state when the move was refused
	To   State
}

func (e *TransitionError) Error() string {
	return fmt.Sprintf("jobindex: job %d: illegal transition %s -> %s", e.ID, e.From, e.To)
}

// Unwrap returns [ErrIllegalTransition].
func (e *TransitionError) Unwrap() error { return ErrIllegalTransition }
