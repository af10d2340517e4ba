package coordinator

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rs/zerolog"
)

// errUnavailable stands for a request that found no stream leader.
var errUnavailable = errors.New("no responders")

// TestRetrySchedule: a failing request is tried again after 50ms, doubling up to 1s between
// tries, each try bounded by requestTimeout; once it goes through, retry returns nil and the
// term goes on. Exact, on synctest's fake clock.
func TestRetrySchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, fail := context.WithCancelCause(context.Background())
		defer fail(nil)
		r := &run{cfg: Config{LeaseTTL: 10 * time.Second}, log: zerolog.Nop(), fail: fail}
		start := time.Now()
		var tries []time.Duration
		err := r.retry(ctx, "write", func(tctx context.Context) error {
			tries = append(tries, time.Since(start))
			if d, ok := tctx.Deadline(); !ok || time.Until(d) != requestTimeout {
				t.Errorf("try's deadline %v ahead, want %v", time.Until(d), requestTimeout)
			}
			if len(tries) < 7 {
				return errUnavailable
			}
			return nil
		})
		if err != nil || context.Cause(ctx) != nil {
			t.Fatalf("retry: %v, term cause %v; want nil, nil", err, context.Cause(ctx))
		}
		ms := time.Millisecond
		want := []time.Duration{0, 50 * ms, 150 * ms, 350 * ms, 750 * ms, 1550 * ms, 2550 * ms}
		if !slices.Equal(tries, want) {
			t.Fatalf("tries at %v, want %v", tries, want)
		}
	})
}

// TestRetryStalls: a request failing for longer than the lease TTL ends the term with
// ErrStalled, at the first try after the TTL has passed; a try that hangs counts its whole
// requestTimeout.
func TestRetryStalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, fail := context.WithCancelCause(context.Background())
		defer fail(nil)
		r := &run{cfg: Config{LeaseTTL: 10 * time.Second}, log: zerolog.Nop(), fail: fail}
		start := time.Now()
		var tries []time.Duration
		err := r.retry(ctx, "write", func(tctx context.Context) error {
			tries = append(tries, time.Since(start))
			if len(tries) == 2 {
				<-tctx.Done() // hangs until its deadline
				return tctx.Err()
			}
			return errUnavailable
		})
		if !errors.Is(err, ErrStalled) || !errors.Is(context.Cause(ctx), ErrStalled) {
			t.Fatalf("retry: %v, term cause %v; want ErrStalled for both", err, context.Cause(ctx))
		}
		// 0 fails; 50ms hangs until 5.05s; then 5.15s, 5.35s, 5.75s, 6.55s, 7.55s, 8.55s, 9.55s,
		// 10.55s: failing since 0 for over 10s, the term ends there.
		ms := time.Millisecond
		want := []time.Duration{0, 50 * ms, 5150 * ms, 5350 * ms, 5750 * ms, 6550 * ms, 7550 * ms, 8550 * ms, 9550 * ms, 10550 * ms}
		if !slices.Equal(tries, want) {
			t.Fatalf("tries at %v, want %v", tries, want)
		}
	})
}
