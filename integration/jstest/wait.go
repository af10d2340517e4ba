package jstest

import (
	"context"
	"time"
)

// DefaultTimeout bounds how long Start, StartCluster, Restart and the Wait methods wait for
// a condition when their context has no deadline.
const DefaultTimeout = 30 * time.Second

// withDefaultTimeout gives ctx a DefaultTimeout deadline unless it has one.
func withDefaultTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, DefaultTimeout)
}
