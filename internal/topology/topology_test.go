package topology_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/integration/jstest"
	"github.com/weavejobs/weave/internal/topology"
	"github.com/weavejobs/weave/internal/wire"
)

// TestEnsureIsIdempotent: whoever starts first creates the streams; later calls (even with other
// options) accept them as they are.
func TestEnsureIsIdempotent(t *testing.T) {
	t.Parallel()
	srv := jstest.New(t)
	js, err := jetstream.New(jstest.NewConn(t, srv.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	names, _ := wire.NewNames("topo")
	if err := topology.Ensure(ctx, js, names, topology.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := topology.Ensure(ctx, js, names, topology.Options{DedupWindow: time.Minute}); err != nil {
		t.Fatalf("second Ensure: %v", err)
	}
	for _, cfg := range topology.Streams(names, topology.Options{}) {
		s, err := js.Stream(ctx, cfg.Name)
		if err != nil {
			t.Fatalf("stream %s: %v", cfg.Name, err)
		}
		if got := s.CachedInfo().Config.Retention; got != cfg.Retention {
			t.Fatalf("stream %s retention %v, want %v", cfg.Name, got, cfg.Retention)
		}
	}
	work, _ := js.Stream(ctx, names.WorkStream())
	if _, err := work.CreateOrUpdateConsumer(ctx, topology.WorkConsumer(names, "any", time.Second)); err != nil {
		t.Fatalf("work consumer: %v", err)
	}
}
