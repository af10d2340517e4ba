package jstest

import (
	"context"
	"fmt"
	"time"
)

// DefaultTimeout bounds how long Start, StartCluster, Restart and the Wait methods wait for
// a condition when their context has no deadline.
const DefaultTimeout = 30 * time.Second

// pollInterval is how often poll checks. The checks read server state in memory, so this
// is cheap, and short enough that waiting adds little to a test.
const pollInterval = 10 * time.Millisecond

// withDefaultTimeout gives ctx a DefaultTimeout deadline unless it has one.
func withDefaultTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, DefaultTimeout)
}

// poll calls check until it reports nothing left to wait for, returns an error, or ctx is
// done. check returns what it is still waiting for, "" when the condition holds; that
// reason goes into the error when ctx ends first.
func poll(ctx context.Context, check func() (waiting string, err error)) error {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		waiting, err := check()
		if err != nil {
			return err
		}
		if waiting == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("still waiting for %s: %w", waiting, context.Cause(ctx))
		case <-t.C:
		}
	}
}
