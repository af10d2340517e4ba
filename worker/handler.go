package worker

import (
	"context"
	"errors"
	"time"

	"github.com/weavejobs/weave/internal/wire"
)

// Job is one attempt of a job, as a handler sees it.
type Job struct {
	// ID is the job's ID: unique and increasing within a namespace, the same on every attempt.
	ID uint64
	// Group is the ID of the job's group.
	Group string
	// Key is the job's key within its group; empty if the producer gave none.
	Key string
	// Payload is the job's body. The handler may keep it; it must not modify it.
	Payload []byte
	// Attempt counts the attempts of this job, 1 for the first.
	Attempt int
	// Timeout is the job's own timeout, 0 if it set none. The handler's context carries the
	// deadline actually in force (this, else Config.DefaultTimeout).
	Timeout time.Duration
	// After is how the groups the job's group ran after ended (a follow-up's jobs read the group
	// they follow here), one per dependency; nil for a group without dependencies.
	After []AfterResult
}

// AfterResult is how a group that the job's group ran after ended: its incarnation, its counts
// and its failed job IDs (at most 1,000; More says there were more, which Dispatcher.Failed
// lists). FailedIDs is empty, with More set, for a group that had completed before the job's
// group was published.
type AfterResult = wire.AfterResult

// afterResults decodes a batch's dependency results for one job; the coordinator checked them.
func afterResults(s string) []AfterResult {
	if s == "" {
		return nil
	}
	rs, _ := wire.ParseAfterResults([]byte(s))
	return rs
}

// Handler runs jobs. Handle is called on one of the worker's Concurrency goroutines; it returns
// the job's result, or an error to fail the attempt.
//
// The context is canceled when the attempt's deadline passes and when the worker stops without
// waiting any longer (see Config.DrainTimeout). A handler that ignores it holds its slot until it
// returns, although its attempt is reported failed after Config.TimeoutGrace.
//
// An error fails the attempt; the coordinator retries it later unless it was wrapped with
// Permanent or attempts are exhausted. RetryAfter asks for a delay. A panic fails the attempt
// like an error. The result must be at most Config.MaxResultSize bytes and must not be modified
// after Handle returns.
type Handler interface {
	Handle(ctx context.Context, j *Job) ([]byte, error)
}

// HandlerFunc adapts a function to the Handler interface.
type HandlerFunc func(ctx context.Context, j *Job) ([]byte, error)

// Handle calls f(ctx, j).
func (f HandlerFunc) Handle(ctx context.Context, j *Job) ([]byte, error) { return f(ctx, j) }

// Permanent marks err as a failure that retrying cannot fix: the job fails at once, whatever its
// attempts left. The result still matches err with errors.Is and errors.As, and has err's text.
// Permanent(nil) is a permanent failure with the text "permanent failure".
func Permanent(err error) error {
	if err == nil {
		err = errors.New("permanent failure")
	}
	return &permanentError{err: err}
}

// RetryAfter marks err as a failure to retry no sooner than d from now (rounded up to a
// millisecond; at most 7 days). The coordinator's policy applies when d <= 0. The result matches
// err with errors.Is and errors.As and has err's text. RetryAfter(d, nil) is a failure with the
// text "retry requested".
func RetryAfter(d time.Duration, err error) error {
	if err == nil {
		err = errors.New("retry requested")
	}
	return &retryAfterError{err: err, after: d}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

type retryAfterError struct {
	err   error
	after time.Duration
}

func (e *retryAfterError) Error() string { return e.err.Error() }
func (e *retryAfterError) Unwrap() error { return e.err }
