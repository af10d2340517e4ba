package coordinator

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/internal/config"
	"github.com/weavejobs/weave/internal/wire"
)

// releaseKeyName is the key bucket's entry that holds the release key.
const releaseKeyName = "release"

// readReleaseKey returns the namespace's release key (wire.ReleaseKey), which the first
// coordinator to start creates at random. It lives in a bucket without TTL of its own: the
// lease bucket's entries expire, and a key that changed would leave every proof issued before
// unverifiable. Only the coordinator role may read the bucket (internal/auth).
func (r *run) readReleaseKey(ctx context.Context) (wire.ReleaseKey, error) {
	var key wire.ReleaseKey
	err := r.retry(ctx, "release key", func(ctx context.Context) error {
		replicas := r.cfg.Streams.Replicas
		if replicas == 0 {
			replicas = config.DefaultReplicas
		}
		kv, err := r.c.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      r.names.KeyBucket(),
			Description: "Weave coordinators' release key",
			History:     1,
			Replicas:    replicas,
		})
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = r.c.js.KeyValue(ctx, r.names.KeyBucket())
		}
		if err != nil {
			return err
		}
		var fresh wire.ReleaseKey
		_, _ = rand.Read(fresh[:]) // crypto/rand does not fail: it crashes the program instead
		_, err = kv.Create(ctx, releaseKeyName, fresh[:])
		switch {
		case err == nil:
			key = fresh
			return nil
		case !errors.Is(err, jetstream.ErrKeyExists):
			return err // a Create whose answer was lost finds its own key on the next try
		}
		e, err := kv.Get(ctx, releaseKeyName)
		if err != nil {
			return err
		}
		if len(e.Value()) != wire.ReleaseKeySize {
			return fmt.Errorf("release key in %s is %d bytes, want %d", r.names.KeyBucket(), len(e.Value()), wire.ReleaseKeySize)
		}
		copy(key[:], e.Value())
		return nil
	})
	return key, err
}
