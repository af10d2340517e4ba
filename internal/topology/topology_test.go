package topology_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/integration/jstest"
	"github.com/weavejobs/weave/internal/config"
	"github.com/weavejobs/weave/internal/topology"
	"github.com/weavejobs/weave/internal/wire"
)

// setupServer starts an embedded server and returns a JetStream client of it and a context for
// the test's requests.
func setupServer(t *testing.T) (jetstream.JetStream, context.Context) {
	t.Helper()
	srv := jstest.New(t)
	js, err := jetstream.New(jstest.NewConn(t, srv.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return js, ctx
}

// TestInitUpgradesResults: a RESULTS stream an earlier release created, without the outcome
// transform and message TTLs, gets them from Init (and only those); an outcome published to a
// reply token is then stored under its group's subject, and one with a TTL is accepted.
func TestInitUpgradesResults(t *testing.T) {
	t.Parallel()
	js, ctx := setupServer(t)
	names, _ := wire.NewNames("upgrade")
	var old jetstream.StreamConfig
	for _, cfg := range topology.Streams(names, config.StreamOptions{}) {
		if cfg.Name == names.ResultsStream() {
			old = cfg
			old.SubjectTransform, old.AllowMsgTTL = nil, false
		}
	}
	if _, err := js.CreateStream(ctx, old); err != nil {
		t.Fatal(err)
	}
	sts, err := topology.Init(ctx, js, names, config.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range sts {
		if upgraded := len(st.Upgraded) > 0; upgraded != (st.Name == names.ResultsStream()) || len(st.Differences) > 0 {
			t.Fatalf("Init's status of %s: %+v; want only RESULTS upgraded, nothing different", st.Name, st)
		}
		if st.Name == names.ResultsStream() && (len(st.Upgraded) != 2 || !st.AllowMsgTTL) {
			t.Fatalf("RESULTS upgraded with %v (message TTLs %v), want the transform and message TTLs", st.Upgraded, st.AllowMsgTTL)
		}
	}
	if _, err := js.Publish(ctx, names.OutcomeSubject("ttl"), []byte("y"), jetstream.WithMsgTTL(time.Hour)); err != nil {
		t.Fatalf("a message with a TTL, after the upgrade: %v", err)
	}
	if _, err := js.Publish(ctx, names.OutcomeSubjectTo("g", "producer-1"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, names.ResultsStream())
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctx, names.OutcomeSubject("g"))
	if err != nil || string(m.Data) != "x" {
		t.Fatalf("the outcome published to a reply token, read under its group's subject: %v, %v", m, err)
	}
	again, err := topology.Init(ctx, js, names, config.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range again {
		if len(st.Upgraded) > 0 {
			t.Fatalf("a second Init upgraded %s again: %v", st.Name, st.Upgraded)
		}
		if st.Name == names.ResultsStream() && !st.AllowMsgTTL {
			t.Fatalf("RESULTS after the upgrade: %+v, want message TTLs", st)
		}
	}
}

// TestInitIsIdempotent: the first call creates the streams; later calls (even with other
// options) accept them as they are.
func TestInitIsIdempotent(t *testing.T) {
	t.Parallel()
	js, ctx := setupServer(t)
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
	js, ctx := setupServer(t)
	names, _ := wire.NewNames("acme")
	err := topology.Check(ctx, js, names, names.JobsStream())
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
	} // Options left unset are not compared: a coordinator started without --replicas on a
	// namespace created with 3 has nothing to be warned about, and learns the replicas.
	sts, err = topology.Init(ctx, js, names, config.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range sts {
		if st.Created || len(st.Differences) != 0 || st.Replicas != 1 {
			t.Errorf("Init with unset options: %+v, want no differences and replicas 1", st)
		}
	}
}

// TestRetry: Retry tries again after errors that pass by themselves, pausing longer each time,
// gives each try its own deadline, and stops at the first other error or when ctx ends.
func TestRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var pauses []time.Duration
		retrying := func(_ error, p time.Duration) { pauses = append(pauses, p) }
		tries := 0
		start := time.Now()
		err := topology.Retry(t.Context(), time.Second, func(ctx context.Context) error {
			if dl, ok := ctx.Deadline(); !ok || time.Until(dl) != time.Second {
				t.Errorf("try %d: deadline %v (set %v), want 1s from now", tries, time.Until(dl), ok)
			}
			if tries++; tries < 7 {
				return nats.ErrTimeout
			}
			return nil
		}, retrying)
		want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond,
			800 * time.Millisecond, 1600 * time.Millisecond, 2 * time.Second}
		if err != nil || !slices.Equal(pauses, want) || time.Since(start) != 5100*time.Millisecond {
			t.Fatalf("err %v, pauses %v after %v; want nil, %v after 5.1s", err, pauses, time.Since(start), want)
		}

		pauses, tries = nil, 0
		denied := errors.New("permissions violation")
		err = topology.Retry(t.Context(), time.Second, func(context.Context) error {
			if tries++; tries == 1 {
				return jetstream.ErrNoStreamResponse
			}
			return denied
		}, retrying)
		if err != denied || tries != 2 {
			t.Fatalf("err %v after %d tries, want %v after 2", err, tries, denied)
		}

		ctx, cancel := context.WithTimeout(t.Context(), 250*time.Millisecond)
		defer cancel()
		tries = 0
		err = topology.Retry(ctx, time.Second, func(context.Context) error { tries++; return nats.ErrNoResponders }, retrying)
		if !errors.Is(err, nats.ErrNoResponders) || tries != 2 {
			t.Fatalf("err %v after %d tries, want the last try's error after 2 (ctx ended in the second pause)", err, tries)
		}
	})
}

// TestTransientPlacement: a replicated stream that cannot be placed because a peer is offline
// passes by itself (the node restarts, or a new cluster hears from it); one that cannot be placed
// because the cluster is too small does not.
func TestTransientPlacement(t *testing.T) {
	offline := &jetstream.APIError{Code: 400, ErrorCode: 10005, Description: "no suitable peers for placement, peer offline"}
	tooSmall := &jetstream.APIError{Code: 400, ErrorCode: 10005, Description: "no suitable peers for placement, insufficient resources"}
	if !topology.Transient(fmt.Errorf("create stream: %w", offline)) {
		t.Error("a peer offline is not taken as transient")
	}
	if topology.Transient(tooSmall) {
		t.Error("a cluster too small for the replicas is taken as transient")
	}
}
