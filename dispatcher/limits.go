package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/internal/directget"
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

// ErrLimitNotFound is returned by RemoveLimit when the resource or group has no limit set.
var ErrLimitNotFound = errors.New("weave: no such limit")

// SetLimit stores a limit, replacing the one on the same resource or group; the coordinator
// applies it at once. A Limit with neither Concurrency nor Rate removes the limit (as
// RemoveLimit does, without its check that there is one). An invalid limit returns an error
// wrapping ErrInvalidOption. Writing limits needs the coordinator's NATS permissions
// (internal/auth): they are the operator's.
func (d *Dispatcher) SetLimit(ctx context.Context, l Limit) error {
	if err := l.Validate(); err != nil {
		return fmt.Errorf("%w: limit: %w", ErrInvalidOption, err)
	}
	if err := d.ensure(ctx); err != nil {
		return err
	}
	return d.storeLimit(ctx, l)
}

func (d *Dispatcher) storeLimit(ctx context.Context, l Limit, opts ...jetstream.PublishOpt) error {
	rctx, cancel := d.requestContext(ctx)
	defer cancel()
	msg := &nats.Msg{Subject: d.names.LimitSubject(l.Kind, l.Name), Data: wire.AppendLimit(nil, l)}
	opts = append(opts, jetstream.WithRetryAttempts(noLeaderRetries), jetstream.WithRetryWait(50*time.Millisecond))
	if _, err := d.js.PublishMsg(rctx, msg, opts...); err != nil {
		return fmt.Errorf("weave: store limit of %s %q: %w", l.Kind, l.Name, err)
	}
	return nil
}

// RemoveLimit removes the limit on a resource or group ID. With no limit set there it returns
// an error wrapping ErrLimitNotFound, so a misspelt name is not taken for a removal.
func (d *Dispatcher) RemoveLimit(ctx context.Context, kind LimitKind, name string) error {
	l := Limit{Kind: kind, Name: name}
	if err := l.Validate(); err != nil {
		return fmt.Errorf("%w: limit: %w", ErrInvalidOption, err)
	}
	if err := d.ensure(ctx); err != nil {
		return err
	}
	rctx, cancel := d.requestContext(ctx)
	m, err := directget.Last(rctx, d.nc, d.names.LimitsStream(), d.names.LimitSubject(kind, name))
	cancel()
	if err == nil {
		if cur, perr := d.names.ParseLimit(m.Subject, m.Data); perr != nil || cur.Removes() {
			err = directget.ErrNotFound
		}
	}
	switch {
	case errors.Is(err, directget.ErrNotFound):
		return fmt.Errorf("%w on %s %q", ErrLimitNotFound, kind, name)
	case err != nil:
		return fmt.Errorf("weave: read the limit of %s %q: %w", kind, name, err)
	}
	// Only if the limit read is still the latest: one set again meanwhile stays.
	if err := d.storeLimit(ctx, l, jetstream.WithExpectLastSequencePerSubject(m.Seq)); isWrongLastSequence(err) {
		return fmt.Errorf("weave: the limit of %s %q changed while it was being removed; nothing removed, try again", kind, name)
	} else if err != nil {
		return err
	}
	return nil
}

// isWrongLastSequence reports whether err is JetStream's refusal of a write whose
// Nats-Expected-Last-Subject-Sequence did not hold.
func isWrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
