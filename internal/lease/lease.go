// Package lease holds the coordinator's lease: one key in a KV bucket with a TTL. The holder
// renews it by revision; the revision at acquisition is the holder's epoch, a fencing token that
// only grows, so records written by an older holder can be told apart and ignored.
package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrLost reports that the lease was taken over or expired while held.
var ErrLost = errors.New("weave: coordinator lease lost")

const key = "coordinator"

// Lease is a held lease. It is renewed by Keep until its context ends or the lease is lost.
type Lease struct {
	kv    jetstream.KeyValue
	ttl   time.Duration
	rev   uint64
	epoch uint64
}

// Epoch is the fencing token of this holder.
func (l *Lease) Epoch() uint64 { return l.epoch }

// Acquire blocks until it holds the lease in bucket (created if missing) or ctx ends. holder is
// written as the value, for operators. While another holder keeps the lease, Acquire waits
// (standby) and takes over once the key expires. Errors that pass by themselves (the bucket's
// stream has no leader yet, as in a cluster that is still electing one) are waited out too.
func Acquire(ctx context.Context, js jetstream.JetStream, bucket, holder string, ttl time.Duration, replicas int) (*Lease, error) {
	// Poll at a fraction of the TTL: a standby takes over at most ttl/4 after expiry.
	tick := time.NewTicker(max(ttl/4, 10*time.Millisecond))
	defer tick.Stop()
	wait := func() error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			return nil
		}
	}
	var kv jetstream.KeyValue
	for kv == nil {
		var err error
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:         bucket,
			Description:    "Weave coordinator lease",
			TTL:            ttl,
			LimitMarkerTTL: max(ttl, time.Second), // the server's minimum
			Replicas:       max(replicas, 1),
			History:        1,
		})
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, bucket)
		}
		if err != nil && (!transient(err) || ctx.Err() != nil) {
			return nil, fmt.Errorf("weave: lease bucket %s: %w", bucket, err)
		}
		if err != nil {
			kv = nil
			if err := wait(); err != nil {
				return nil, err
			}
		}
	}
	for {
		rev, err := kv.Create(ctx, key, []byte(holder))
		if err == nil {
			return &Lease{kv: kv, ttl: ttl, rev: rev, epoch: rev}, nil
		}
		if !taken(err) && (!transient(err) || ctx.Err() != nil) {
			return nil, fmt.Errorf("weave: acquire lease: %w", err)
		}
		if err := wait(); err != nil {
			return nil, err
		}
	}
}

// taken reports whether err says that the key exists: someone holds the lease. Besides
// ErrKeyExists, that is a "wrong last sequence" answer to the write that replaces a deleted key:
// the key was written again in between (possibly by an earlier attempt of ours whose answer timed
// out, in which case the lease is ours again once its TTL has passed).
func taken(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrKeyExists) || (errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant))
}

// transient reports whether err may pass by itself: no stream leader to answer (a cluster
// electing one, a server restarting), or a request that timed out.
func transient(err error) bool {
	return errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded)
}

// Keep renews the lease every ttl/3 until ctx ends (then it releases the lease and returns nil)
// or a renewal fails (then it returns an error wrapping ErrLost). A renewal that fails for a
// reason that passes by itself (no stream leader for a moment) is tried again at the next tick,
// as long as the lease would still be alive then; a renewal refused because someone else holds
// the key is lost at once.
func (l *Lease) Keep(ctx context.Context) error {
	tick := time.NewTicker(l.ttl / 3)
	defer tick.Stop()
	renewed := time.Now()
	for {
		select {
		case <-ctx.Done():
			rctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			// Deleting by revision lets a standby take over at once; failure only delays it.
			_ = l.kv.Delete(rctx, key, jetstream.LastRevision(l.rev))
			return nil
		case <-tick.C:
			rctx, cancel := context.WithTimeout(ctx, l.ttl/3)
			rev, err := l.kv.Update(rctx, key, []byte("renewed"), l.rev)
			cancel()
			if err != nil {
				if ctx.Err() != nil {
					continue
				}
				if transient(err) && time.Since(renewed)+l.ttl/3 < l.ttl {
					continue // the next tick is still within the TTL
				}
				return fmt.Errorf("%w: %v", ErrLost, err)
			}
			l.rev, renewed = rev, time.Now()
		}
	}
}
