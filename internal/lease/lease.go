// Package lease holds the coordinator's lease: one key in a KV bucket with a TTL. The holder
// renews it by revision; the revision at acquisition is the holder's epoch, a fencing token that
// only grows, so records written by an older holder can be told apart and ignored.
package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

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
// (standby) and takes over once the key expires.
func Acquire(ctx context.Context, js jetstream.JetStream, bucket, holder string, ttl time.Duration, replicas int) (*Lease, error) {
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
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
	if err != nil {
		return nil, fmt.Errorf("weave: lease bucket %s: %w", bucket, err)
	}
	// Poll at a fraction of the TTL: a standby takes over at most ttl/4 after expiry.
	tick := time.NewTicker(max(ttl/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		rev, err := kv.Create(ctx, key, []byte(holder))
		if err == nil {
			return &Lease{kv: kv, ttl: ttl, rev: rev, epoch: rev}, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return nil, fmt.Errorf("weave: acquire lease: %w", err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
}

// Keep renews the lease every ttl/3 until ctx ends (then it releases the lease and returns nil)
// or a renewal fails (then it returns an error wrapping ErrLost).
func (l *Lease) Keep(ctx context.Context) error {
	tick := time.NewTicker(l.ttl / 3)
	defer tick.Stop()
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
				return fmt.Errorf("%w: %v", ErrLost, err)
			}
			l.rev = rev
		}
	}
}
