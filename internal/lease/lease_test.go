package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/integration/jstest"
	"github.com/weavejobs/weave/internal/lease"
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
