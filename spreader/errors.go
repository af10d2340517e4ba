package spreader

import "errors"

// Errors returned by the Scheduler and by policy parsing, wrapped with context.
// Test for them with errors.Is.
var (
	// ErrInvalidConfig means a Config field is out of range.
	ErrInvalidConfig = errors.New("spreader: invalid config")
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
)
