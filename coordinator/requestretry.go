package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Every request the coordinator depends on (a write, a purge, a read during replay) is tried
// again until it succeeds or the term ends: a NATS cluster that loses a node answers nothing, or
// "no responders", for the few seconds it takes to elect new stream leaders, and a coordinator
// that gave up then would leave groups without their outcomes or summary until its next
// restart. A coordinator that cannot get a request through for longer than its lease TTL ends
// its term (Run returns the error) instead of running on blindly: by then another coordinator
// may hold the lease, and a new term starts from the streams.

// ErrStalled reports that the coordinator could not get a request it depends on through for
// longer than its lease TTL, and ended its term. Running it again (as `weave coordinator` does)
// makes it a standby that takes the lease once it is free, and rebuilds the state from the
// streams.
var ErrStalled = errors.New("weave: coordinator stalled")

const (
	// requestTimeout bounds one request to the server: a publish ack, a purge, a stream lookup.
	requestTimeout = 5 * time.Second
	retryFirst     = 50 * time.Millisecond // the first wait between tries
	retryMax       = time.Second           // the longest wait between tries
)

// retry calls try until it returns nil, ctx ends (it returns ctx's error), or it has failed for
// longer than the lease TTL: then the term ends with an error wrapping ErrStalled, which retry
// returns too. Each call gets a context bounded by requestTimeout.
func (r *run) retry(ctx context.Context, what string, try func(context.Context) error) error {
	var failingSince time.Time
	wait := retryFirst
	for {
		tctx, cancel := context.WithTimeout(ctx, requestTimeout)
		err := try(tctx)
		cancel()
		if err == nil {
			if !failingSince.IsZero() {
				r.log.Debug().Str("op", what).Stringer("after", time.Since(failingSince)).Msg("request went through again")
				r.outage.End(time.Now())
			}
			return nil
		}
		if ctx.Err() != nil {
			if !failingSince.IsZero() {
				r.outage.End(time.Now())
			}
			return ctx.Err()
		}
		if failingSince.IsZero() {
			failingSince = time.Now()
			r.outage.Begin(what, err, failingSince)
		} else {
			r.outage.Again(err)
		}
		if time.Since(failingSince) > r.cfg.LeaseTTL {
			r.outage.End(time.Now())
			err = fmt.Errorf("%w: %s failing for over %v: %w", ErrStalled, what, r.cfg.LeaseTTL, err)
			r.fail(err)
			return err
		}
		// Logged once per outage, not per try (see transient): a node loss that a cluster
		// mends by itself made a warning of every try.
		r.log.Debug().Err(err).Str("op", what).Stringer("retry_in", wait).Msg("request failed; trying again")
		sleepCtx(ctx, wait)
		wait = min(2*wait, retryMax)
	}
}
