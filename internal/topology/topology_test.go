package topology_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/integration/jstest"
	"github.com/weavejobs/weave/internal/config"
	"github.com/weavejobs/weave/internal/topology"
	"github.com/weavejobs/weave/internal/wire"
)

// TestInitIsIdempotent: the first call creates the streams; later calls (even with other
// options) accept them as they are.
func TestInitIsIdempotent(t *testing.T) {
	t.Parallel()
	srv := jstest.New(t)
	js, err := jetstream.New(jstest.NewConn(t, srv.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	names, _ := wire.NewNames("topo")
	if _, err := topology.Init(ctx, js, names, config.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := topology.Init(ctx, js, names, config.StreamOptions{DedupWindow: time.Minute}); err != nil {
		t.Fatalf("second Init: %v", err)
	}
	for _, cfg := range topology.Streams(names, config.StreamOptions{}) {
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

// TestCheckAndInit: Check names a namespace without streams; Init creates them, then finds them
// and reports how an existing stream differs from the options, changing nothing.
func TestCheckAndInit(t *testing.T) {
	t.Parallel()
	srv := jstest.New(t)
	js, err := jetstream.New(jstest.NewConn(t, srv.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	names, _ := wire.NewNames("acme")
	err = topology.Check(ctx, js, names, names.JobsStream())
	if !errors.Is(err, topology.ErrNamespaceNotFound) || !strings.Contains(err.Error(), `namespace "acme" is not initialised (stream acme_JOBS not found)`) {
		t.Fatalf("Check before Init: %v", err)
	}
	sts, err := topology.Init(ctx, js, names, config.StreamOptions{})
	if err != nil || len(sts) != 7 {
		t.Fatalf("Init: %v %+v", err, sts)
	}
	for _, st := range sts {
		if !st.Created || len(st.Differences) != 0 {
			t.Errorf("first Init: %+v", st)
		}
	}
	if err := topology.Check(ctx, js, names, names.JobsStream(), names.WorkStream()); err != nil {
		t.Fatalf("Check after Init: %v", err)
	}
	sts, err = topology.Init(ctx, js, names, config.StreamOptions{Replicas: 3, DedupWindow: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range sts {
		want := []string{"replicas 1, want 3"}
		if st.Name == names.JobsStream() {
			want = append(want, "dedup window 2m0s, want 1m0s")
		}
		if st.Created || !slices.Equal(st.Differences, want) {
			t.Errorf("Init with other options: %+v, want differences %q", st, want)
		}
	}
	s, err := js.Stream(ctx, names.JobsStream())
	if err != nil {
		t.Fatal(err)
	}
	if c := s.CachedInfo().Config; c.Replicas != 1 || c.Duplicates != config.DefaultDedupWindow {
		t.Errorf("Init changed an existing stream: %+v", c)
	}
}
