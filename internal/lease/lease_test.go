package lease_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/integration/jstest"
	"github.com/weavejobs/weave/internal/config"
	"github.com/weavejobs/weave/internal/lease"
	"github.com/weavejobs/weave/internal/testwait"
)

// TestStandbyTakesOver: while one holder keeps the lease a second waits; when the first lets go
// the second takes it, with a higher epoch.
func TestStandbyTakesOver(t *testing.T) {
	t.Parallel()
	srv := jstest.New(t)
	js, err := jetstream.New(jstest.NewConn(t, srv.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const ttl = time.Second
	first, err := lease.Acquire(ctx, js, "L", "a", ttl, 1)
	if err != nil {
		t.Fatal(err)
	}
	keepCtx, stopKeeping := context.WithCancel(ctx)
	kept := make(chan error, 1)
	go func() { kept <- first.Keep(keepCtx) }()

	// A standby cannot take it while it is kept, several TTLs long.
	short, cancelShort := context.WithTimeout(ctx, 3*ttl)
	defer cancelShort()
	if _, err := lease.Acquire(short, js, "L", "b", ttl, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("standby acquired a kept lease: %v", err)
	}
	stopKeeping()
	if err := <-kept; err != nil {
		t.Fatalf("Keep: %v", err)
	}
	second, err := lease.Acquire(ctx, js, "L", "b", ttl, 1)
	if err != nil {
		t.Fatal(err)
	}
	if second.Epoch() <= first.Epoch() {
		t.Fatalf("epochs %d then %d: not increasing", first.Epoch(), second.Epoch())
	}
}

// TestAcquireWaitsOutLostQuorum: with two of a 3-node cluster's servers down, the lease bucket's
// stream has no leader and every request fails; Acquire keeps waiting instead of returning the
// error, and takes the lease once a server is back. (A coordinator starting while a cluster
// elects leaders hit exactly this.)
func TestAcquireWaitsOutLostQuorum(t *testing.T) {
	t.Parallel()
	c := jstest.NewCluster(t, 3)
	srvs := c.Servers()
	// Short requests: without quorum each one fails fast, as often as Acquire makes it.
	js, err := jetstream.New(jstest.NewConn(t, srvs[0].ClientURL()), jetstream.WithDefaultTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	// A context without a deadline, so each request is bounded by the short default timeout
	// (a deadline would be every request's timeout), canceled if the test runs too long.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	time.AfterFunc(60*time.Second, cancel)
	const ttl = time.Second
	first, err := lease.Acquire(ctx, js, "Q", "a", ttl, 3)
	if err != nil {
		t.Fatal(err)
	}
	released, release := context.WithCancel(ctx)
	release()
	if err := first.Keep(released); err != nil { // a canceled Keep deletes the key
		t.Fatal(err)
	}

	srvs[1].Stop()
	srvs[2].Stop()
	type result struct {
		l   *lease.Lease
		err error
	}
	done := make(chan result, 1)
	go func() {
		l, err := lease.Acquire(ctx, js, "Q", "b", ttl, 3)
		done <- result{l, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("Acquire returned without quorum: %v, %v", r.l, r.err)
	case <-time.After(2 * time.Second): // four request timeouts: it is waiting, not failing
	}
	if err := srvs[1].Restart(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil || r.l.Epoch() <= first.Epoch() {
			t.Fatalf("Acquire after quorum came back: %v, %v", r.l, r.err)
		}
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
}

// TestKeepOutlastsLeaderLoss: the node leading the lease bucket's stream goes down while the
// lease is kept. Renewals fail until the cluster elects a new leader ("no response from
// stream", timeouts); Keep tries again until one goes through, so the holder keeps its lease and
// its epoch, and a standby cannot take it.
func TestKeepOutlastsLeaderLoss(t *testing.T) {
	t.Parallel()
	c := jstest.NewCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	js, err := jetstream.New(jstest.NewConn(t, c.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 3 * time.Second
	l, err := lease.Acquire(ctx, js, "N", "a", ttl, 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WaitStreamReady(ctx, "KV_N"); err != nil {
		t.Fatal(err)
	}
	keepCtx, stopKeeping := context.WithCancel(ctx)
	kept := make(chan error, 1)
	go func() { kept <- l.Keep(keepCtx) }()

	leader := c.StreamLeader("KV_N")
	var others []*jstest.Server
	for _, s := range c.Servers() {
		if s != leader {
			others = append(others, s)
		}
	}
	// Watch the key from a node that stays up.
	kv, err := jetstream.New(jstest.NewConn(t, others[0].ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	bucket, err := kv.KeyValue(ctx, "N")
	if err != nil {
		t.Fatal(err)
	}
	before, err := bucket.Get(ctx, "coordinator")
	if err != nil {
		t.Fatal(err)
	}
	leader.Stop()
	// Two renewals after the loss: the holder renewed through the election and went on.
	// Read the key every 50 ms, not faster: the reads go to the cluster while it elects a leader.
	renewals := 0
	err = testwait.Until(ctx, 50*time.Millisecond, func() (string, error) {
		select {
		case err := <-kept:
			return "", fmt.Errorf("Keep returned after the leader's loss: %v", err)
		default:
		}
		// Each read has its own deadline: one sent while the old leader's interest still routes
		// to it is never answered, and would otherwise hold the wait until ctx ends.
		gctx, cancel := context.WithTimeout(ctx, time.Second)
		e, err := bucket.Get(gctx, "coordinator")
		cancel()
		if err == nil && e.Revision() > before.Revision() {
			before, renewals = e, renewals+1
		}
		if renewals == 2 {
			return "", nil
		}
		return fmt.Sprintf("two renewals after the leader's loss (%d so far)", renewals), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, ttl)
	defer cancelShort()
	if _, err := lease.Acquire(short, kv, "N", "b", ttl, 3); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("standby acquired a kept lease: %v", err)
	}
	stopKeeping()
	if err := <-kept; err != nil {
		t.Fatalf("Keep: %v", err)
	}
}

// TestAcquireRefusesBadReplicas: the lease follows the one rule for replica counts
// (config.Replicas) instead of clamping a bad one; it refuses before any I/O.
func TestAcquireRefusesBadReplicas(t *testing.T) {
	t.Parallel()
	for _, n := range []int{-1, 6} {
		if _, err := lease.Acquire(context.Background(), nil, "L", "a", time.Second, n); !errors.Is(err, config.ErrInvalid) {
			t.Errorf("Acquire with %d replicas: %v, want an error wrapping config.ErrInvalid", n, err)
		}
	}
}
