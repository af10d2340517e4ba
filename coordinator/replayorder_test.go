package coordinator

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/integration/jstest"
	"github.com/weavejobs/weave/internal/testwait"
	"github.com/weavejobs/weave/internal/wire"
	"github.com/weavejobs/weave/worker"
)

// TestReplayReportStoredDuringReplay: a job running when its coordinator stops reports, and its
// worker acks the batch, while the next coordinator replays, after that one has read EVENTS. The
// job must run once and end done: replay lists the jobs in WORK before it reads EVENTS, so the
// job is in flight and its report, read live, ends it. (Scanning WORK after EVENTS, replay found
// the job neither reported nor in WORK and released it again: it ran twice, and its report was
// refused as about a job never released.) Not parallel: it sets the package's replay hook.
func TestReplayReportStoredDuringReplay(t *testing.T) {
	const ns = "order"
	srv, _, js, ctx := onServer(t, ns)
	cfg := Config{Namespace: ns, LeaseTTL: time.Second, Logger: zerolog.Nop()}

	// Coordinator 1, a worker whose handler holds the job until released, and the job.
	run := func(cfg Config) (stop func()) {
		c, err := New(jstest.NewConn(t, srv.ClientURL()), cfg)
		if err != nil {
			t.Fatal(err)
		}
		cctx, ccancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- c.Run(cctx) }()
		return func() {
			ccancel()
			if err := <-done; err != nil && cctx.Err() == nil {
				t.Errorf("coordinator: %v", err)
			}
		}
	}
	names, _ := wire.NewNames(ns)
	stop1 := run(cfg)
	var runs atomic.Int32
	started, release := make(chan struct{}, 1), make(chan struct{})
	w, err := worker.New(jstest.NewConn(t, srv.ClientURL()), worker.Config{Namespace: ns, ID: "w", Concurrency: 1},
		worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
			runs.Add(1)
			started <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return nil, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	wdone := make(chan error, 1)
	go func() { wdone <- w.Run(wctx) }()
	defer func() {
		wcancel()
		<-wdone
	}()
	d, err := dispatcher.New(jstest.NewConn(t, srv.ClientURL()), dispatcher.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	h, err := d.Publish(ctx, "g", slices.Values([]dispatcher.Job{{Key: "k", Payload: []byte("p")}}))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the job never started")
	}
	stop1()

	// Coordinator 2: once it has read EVENTS, the job ends, and its worker stores the report and
	// acks the batch.
	afterEventsRead = func() {
		close(release)
		// Once WORK is empty the report is stored: a worker acks its batch after it.
		err := testwait.Until(ctx, testwait.Interval, func() (string, error) {
			if s, err := js.Stream(ctx, names.WorkStream()); err == nil && s.CachedInfo().State.Msgs == 0 {
				return "", nil
			}
			return "the worker to ack its batch", nil
		})
		if err != nil {
			t.Error(err) // on the coordinator's goroutine: the test goes on, and fails
		}
	}
	defer func() { afterEventsRead = nil }()
	stop2 := run(cfg)
	defer stop2()

	sum, err := h.WaitSummary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Done != 1 || runs.Load() != 1 {
		t.Fatalf("summary %+v after %d runs; want the job done after one run", sum, runs.Load())
	}
}
