package spreader

import (
	"errors"

	"github.com/weavejobs/weave/internal/config"
)

// Errors returned by the Scheduler and by policy parsing, wrapped with context.
// Test for them with errors.Is.
var (
	// ErrInvalidConfig means a Config field is out of range. It is one value shared by every
	// Weave package (coordinator.ErrInvalidConfig, worker.ErrInvalidConfig and
	// dispatcher.ErrInvalidConfig are the same error).
	ErrInvalidConfig = config.ErrInvalid
	// ErrUnknownPolicy means a policy name is neither "least-in-flight" nor
	// "round-robin".
	ErrUnknownPolicy = errors.New("spreader: unknown policy")
	// ErrDuplicateGroup means AddGroup was given a group the scheduler already
	// tracks.
	ErrDuplicateGroup = errors.New("spreader: duplicate group")
	// ErrUnknownGroup means the group was never added, or was canceled or has
	// finished.
	ErrUnknownGroup = errors.New("spreader: unknown group")
	// ErrSealed means the group is sealed and takes no more jobs.
	ErrSealed = errors.New("spreader: group sealed")
	// ErrNotWaiting means OpenSlot was given a group that is not waiting for a slot.
	ErrNotWaiting = errors.New("spreader: group not waiting for a slot")
	// ErrInvalidPriority means a job's priority is outside 0..MaxPriority.
	ErrInvalidPriority = errors.New("spreader: invalid priority")
)
