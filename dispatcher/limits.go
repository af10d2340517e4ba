package dispatcher

import (
	"context"
	"encoding/json"
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

// SetLimit stores a limit's concurrency and rate, replacing those on the same resource or group.
// A pause in place stays (Resume ends it; l.Paused set
// pauses too). A Limit with neither Concurrency nor Rate leaves only a pause, if there is one,
// else removes the limit (as RemoveLimit does, without its check that there is one). An
// invalid limit returns an error wrapping ErrInvalidOption. Writing limits needs the
// coordinator's NATS permissions (internal/auth): they are the operator's.
//
// SetLimit, RemoveLimit, Pause and Resume return once the running coordinator has applied the
// change, so the jobs published afterwards are released under it; with none running, at once
// (the next one reads the limits before it releases anything). A coordinator that has not
// applied it within Config.RequestTimeout gives an error wrapping ErrNoAnswer: the change is
// stored, and applied once a coordinator reads it.
func (d *Dispatcher) SetLimit(ctx context.Context, l Limit) error {
	if err := l.Validate(); err != nil {
		return fmt.Errorf("%w: limit: %w", ErrInvalidOption, err)
	}
	cur, seq, err := d.storedLimit(ctx, l.Kind, l.Name)
	if err != nil {
		return err
	}
	l.Paused = l.Paused || cur.Paused
	return d.replaceLimit(ctx, l, seq, "set")
}

// storeLimit stores l and returns its sequence in the LIMITS stream.
func (d *Dispatcher) storeLimit(ctx context.Context, l Limit, opts ...jetstream.PublishOpt) (uint64, error) {
	rctx, cancel := d.requestContext(ctx)
	defer cancel()
	msg := &nats.Msg{Subject: d.names.LimitSubject(l.Kind, l.Name), Data: wire.AppendLimit(nil, l)}
	opts = append(opts, jetstream.WithRetryAttempts(noLeaderRetries), jetstream.WithRetryWait(50*time.Millisecond))
	ack, err := d.js.PublishMsg(rctx, msg, opts...)
	if err != nil {
		return 0, fmt.Errorf("weave: store limit of %s %q: %w", l.Kind, l.Name, err)
	}
	return ack.Sequence, nil
}

// awaitLimits waits until the running coordinator has applied the LIMITS stream up to seq (its
// status's LimitsSeq), so that a limit set, a pause or a removal is in force when the call
// returns: the jobs published after it are released under it. With no coordinator running it
// returns at once: the next one reads the limits before it releases anything. A coordinator
// that answers without having applied it within Config.RequestTimeout (it is replaying after a
// start, or older than limits_seq) gives an error wrapping ErrNoAnswer: the limit is stored,
// and applied once a coordinator reads it.
func (d *Dispatcher) awaitLimits(ctx context.Context, seq uint64) error {
	rctx, cancel := d.requestContext(ctx)
	defer cancel()
	for wait := 2 * time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		resp, err := d.nc.RequestWithContext(rctx, d.names.StatusSubject(), nil)
		switch {
		case errors.Is(err, nats.ErrNoResponders):
			return nil
		case err != nil:
			return fmt.Errorf("%w: the limit is stored (LIMITS sequence %d) and applies once a coordinator reads it: %w", ErrNoAnswer, seq, err)
		}
		var st struct {
			LimitsSeq uint64 `json:"limits_seq"`
		}
		if json.Unmarshal(resp.Data, &st) == nil && st.LimitsSeq >= seq {
			return nil
		}
		t := time.NewTimer(wait)
		select {
		case <-rctx.Done():
			t.Stop()
			return fmt.Errorf("%w: the limit is stored (LIMITS sequence %d), but the coordinator had not applied it within %v", ErrNoAnswer, seq, d.cfg.RequestTimeout)
		case <-t.C:
		}
	}
}

// RemoveLimit removes the limit on a resource or group ID (a pause included). With no limit set
// there it returns an error wrapping ErrLimitNotFound, so a misspelt name is not taken for a
// removal.
func (d *Dispatcher) RemoveLimit(ctx context.Context, kind LimitKind, name string) error {
	cur, seq, err := d.storedLimit(ctx, kind, name)
	switch {
	case err != nil:
		return err
	case cur.Removes():
		return fmt.Errorf("%w on %s %q", ErrLimitNotFound, kind, name)
	}
	return d.replaceLimit(ctx, Limit{Kind: kind, Name: name}, seq, "removed")
}

// ErrNotPaused is returned by Resume when the resource or group ID is not paused, and by
// ResumeSchedule when the schedule is not.
var ErrNotPaused = errors.New("weave: not paused")

// Pause holds back every job of a resource (the jobs that require or prefer it) or of a group ID
// across the whole fleet: the coordinator releases none of them until Resume, while the jobs
// released before go on and other work runs. A limit set there keeps its concurrency and rate
// for the resume. A pause is a limit: it is kept in the LIMITS stream across restarts and
// failovers, listed by `weave limit list`, and setting it needs the coordinator's NATS
// permissions. Pausing what is paused already changes nothing.
func (d *Dispatcher) Pause(ctx context.Context, kind LimitKind, name string) error {
	return d.setPaused(ctx, kind, name, true)
}

// Resume ends a Pause: the jobs it held back are offered again at once, under the limit's
// concurrency and rate if it has them. One not paused returns an error wrapping ErrNotPaused.
func (d *Dispatcher) Resume(ctx context.Context, kind LimitKind, name string) error {
	return d.setPaused(ctx, kind, name, false)
}

func (d *Dispatcher) setPaused(ctx context.Context, kind LimitKind, name string, paused bool) error {
	cur, seq, err := d.storedLimit(ctx, kind, name)
	if err != nil {
		return err
	}
	verb, done, err := pauseChange(cur.Paused, paused, fmt.Sprintf("%s %q", kind, name))
	if done || err != nil {
		return err
	}
	cur.Paused = paused
	return d.replaceLimit(ctx, cur, seq, verb)
}

// pauseChange decides a pause (pause set) or a resume of what (a limit, a schedule) whose pause
// is was now: done when there is nothing to store (pausing what is paused), an error wrapping
// ErrNotPaused when resuming what is not, else the change's verb.
func pauseChange(was, pause bool, what string) (verb string, done bool, err error) {
	switch {
	case was && pause:
		return "", true, nil
	case !was && !pause:
		return "", true, fmt.Errorf("%w: %s", ErrNotPaused, what)
	case pause:
		return "paused", false, nil
	}
	return "resumed", false, nil
}

// LimitOf returns the limit stored on a resource or group ID, as the coordinator applies it:
// with none, a Limit whose Removes() is true. Reading limits needs the coordinator's NATS
// permissions, as writing them does (the status API, `weave limit list`, shows them to any role
// with their use).
func (d *Dispatcher) LimitOf(ctx context.Context, kind LimitKind, name string) (Limit, error) {
	l, _, err := d.storedLimit(ctx, kind, name)
	return l, err
}

// storedLimit reads the limit stored on a resource or group ID, and the sequence of its message
// (0 if none; the Limit is then a removal, as it is when a removal is stored).
func (d *Dispatcher) storedLimit(ctx context.Context, kind LimitKind, name string) (Limit, uint64, error) {
	none := Limit{Kind: kind, Name: name}
	if err := none.Validate(); err != nil {
		return none, 0, fmt.Errorf("%w: limit: %w", ErrInvalidOption, err)
	}
	if err := d.ensure(ctx); err != nil {
		return none, 0, err
	}
	rctx, cancel := d.requestContext(ctx)
	defer cancel()
	m, err := directget.Last(rctx, d.nc, d.names.LimitsStream(), d.names.LimitSubject(kind, name))
	switch {
	case errors.Is(err, directget.ErrNotFound):
		return none, 0, nil
	case err != nil:
		return none, 0, fmt.Errorf("weave: read the limit of %s %q: %w", kind, name, err)
	}
	cur, err := d.names.ParseLimit(m.Subject, m.Data)
	if err != nil { // refused by the coordinator too: as if none were stored
		return none, m.Seq, nil
	}
	return cur, m.Seq, nil
}

// replaceLimit stores l if the limit's message is still the one at seq (0: none): a limit
// changed meanwhile by someone else is not overwritten unseen.
// Once stored, it waits for the running coordinator to apply it (awaitLimits).
func (d *Dispatcher) replaceLimit(ctx context.Context, l Limit, seq uint64, verb string) error {
	stored, err := d.storeLimit(ctx, l, jetstream.WithExpectLastSequencePerSubject(seq))
	switch {
	case isWrongLastSequence(err):
		return fmt.Errorf("weave: the limit of %s %q changed while it was being %s; nothing done, try again", l.Kind, l.Name, verb)
	case err != nil:
		return err
	}
	return d.awaitLimits(ctx, stored)
}

// isWrongLastSequence reports whether err is JetStream's refusal of a write whose
// Nats-Expected-Last-Subject-Sequence did not hold.
func isWrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
