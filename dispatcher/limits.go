package dispatcher

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/internal/wire"
)

// Limit is a limit on the jobs of one resource (those that require or prefer it) or of one group
// ID (every incarnation of it), enforced by the coordinator across the whole fleet, and kept in
// the namespace (its LIMITS stream) across restarts and failovers:
//
//   - Concurrency: at most this many of its jobs released at once (running, or in a worker's
//     hands); 0 for none.
//   - Rate, Per, Burst: at most Rate starts per Per, from a bucket of Burst tokens (default 1:
//     starts evenly spaced, Per/Rate apart); Rate 0 for none.
//
// A job under several limits (its group's and its resources') starts only when all of them
// allow it. Jobs a limit holds back wait outside the scheduler: they hold no worker slot and no
// feeder slot, so they block neither their group's other jobs nor other groups. A limited job is
// released only to a free slot (never queued at a worker ahead of time), so it starts when it is
// released.
type Limit = wire.Limit

// LimitKind says what a Limit applies to.
type LimitKind = wire.LimitKind

// The kinds of Limit.
const (
	LimitResource = wire.LimitResource
	LimitGroup    = wire.LimitGroup
)

// SetLimit stores a limit, replacing the one on the same resource or group; the coordinator
// applies it at once. A Limit with neither Concurrency nor Rate removes the limit (as
// RemoveLimit does). An invalid limit returns an error wrapping ErrInvalidOption. Writing limits
// needs the coordinator's NATS permissions (internal/auth): they are the operator's.
func (d *Dispatcher) SetLimit(ctx context.Context, l Limit) error {
	if err := l.Validate(); err != nil {
		return fmt.Errorf("%w: limit: %w", ErrInvalidOption, err)
	}
	if err := d.ensure(ctx); err != nil {
		return err
	}
	rctx, cancel := d.requestContext(ctx)
	defer cancel()
	msg := &nats.Msg{Subject: d.names.LimitSubject(l.Kind, l.Name), Data: wire.AppendLimit(nil, l)}
	if _, err := d.js.PublishMsg(rctx, msg, jetstream.WithRetryAttempts(noLeaderRetries), jetstream.WithRetryWait(50*time.Millisecond)); err != nil {
		return fmt.Errorf("weave: store limit of %s %q: %w", l.Kind, l.Name, err)
	}
	return nil
}

// RemoveLimit removes the limit on a resource or group ID, if there is one.
func (d *Dispatcher) RemoveLimit(ctx context.Context, kind LimitKind, name string) error {
	return d.SetLimit(ctx, Limit{Kind: kind, Name: name})
}
