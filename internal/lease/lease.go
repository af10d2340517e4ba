// Package lease holds the coordinator's lease: one key in a KV bucket with a TTL. The holder
// renews it by revision; the revision at acquisition is the holder's epoch, a fencing token that
// only grows, so records written by an older holder can be told apart and ignored.
package lease

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/weavejobs/weave/internal/config"
	"github.com/weavejobs/weave/internal/topology"
)

// ErrLost reports that the lease was taken over or expired while held.
var ErrLost = errors.New("weave: coordinator lease lost")

const key = "coordinator"

// Lease is a held lease. It is renewed by Keep until its context ends or the lease is lost.
type Lease struct {
	kv     jetstream.KeyValue
	ttl    time.Duration
	holder string
	rev    uint64
	epoch  uint64
}

// Epoch is the fencing token of this holder.
func (l *Lease) Epoch() uint64 { return l.epoch }

// Acquire blocks until it holds the lease in bucket (created if missing) or ctx ends. holder is
// written as the value, for operators. While another holder keeps the lease, Acquire waits
// (standby) and takes over once the key expires. Errors that pass by themselves (the bucket's
// stream has no leader yet, as in a cluster that is still electing one) are waited out too.
// replicas follows config.Replicas (0: one); a count out of range is an error wrapping
// config.ErrInvalid.
func Acquire(ctx context.Context, js jetstream.JetStream, bucket, holder string, ttl time.Duration, replicas int) (*Lease, error) {
	if err := config.Replicas("lease replicas", replicas); err != nil {
		return nil, err
	}
	if replicas == 0 {
		replicas = config.DefaultReplicas
	}
	// Poll often enough that a standby takes over within pollMax of the key's expiry.
	tick := time.NewTicker(min(max(ttl/4, 10*time.Millisecond), pollMax))
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
			Replicas:       replicas,
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
			return &Lease{kv: kv, ttl: ttl, holder: holder, rev: rev, epoch: rev}, nil
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
func transient(err error) bool { return topology.Transient(err) }

// pollMax bounds the pause between a standby's attempts to take the lease, and between a
// holder's attempts to renew it after a renewal that failed for a reason that may pass.
const pollMax = 500 * time.Millisecond

// Keep renews the lease every ttl/3 until ctx ends (then it releases the lease and returns nil)
// or the lease is lost (then it returns an error wrapping ErrLost). A renewal that fails for a
// reason that passes by itself (no stream leader while a cluster elects one, no response from
// the stream, a timeout) is tried again every pollMax for as long as the lease is still alive;
// a renewal refused because someone else holds the key is lost at once. Each renewal writes a
// value of its own, so a renewal that was stored although its answer was lost is recognised
// (the next one finds its own value there) instead of being taken for another holder's.
func (l *Lease) Keep(ctx context.Context) error {
	tick := time.NewTicker(l.ttl / 3)
	defer tick.Stop()
	renewed := time.Now()
	var n uint64                                // renewals tried
	ours := l.holder + " " + nuid.Next() + " #" // every value this Keep writes starts so
	doubt := false                              // a renewal's answer was lost since the last one stored
	for {
		select {
		case <-ctx.Done():
			rctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			// Deleting by revision lets a standby take over at once; failure only delays it.
			_ = l.kv.Delete(rctx, key, jetstream.LastRevision(l.rev))
			return nil
		case <-tick.C:
		}
		for {
			// The lease lives until renewed+ttl: a request may take until shortly before.
			left := time.Until(renewed.Add(l.ttl))
			if left <= 0 {
				return fmt.Errorf("%w: not renewed within %v", ErrLost, l.ttl)
			}
			n++
			value := ours + strconv.FormatUint(n, 10)
			rctx, cancel := context.WithTimeout(ctx, min(l.ttl/3, left))
			rev, err := l.kv.Update(rctx, key, []byte(value), l.rev)
			if err != nil && taken(err) && doubt {
				// Perhaps an earlier renewal was stored after all: then the key holds it.
				if e, gerr := l.kv.Get(rctx, key); gerr == nil && strings.HasPrefix(string(e.Value()), ours) {
					rev, err = e.Revision(), nil
				}
			}
			cancel()
			if err == nil {
				l.rev, renewed, doubt = rev, time.Now(), false
				break
			}
			if ctx.Err() != nil {
				break
			}
			if !transient(err) {
				return fmt.Errorf("%w: %v", ErrLost, err)
			}
			doubt = true
			select {
			case <-ctx.Done():
			case <-time.After(min(pollMax, time.Until(renewed.Add(l.ttl)))):
			}
		}
	}
}
