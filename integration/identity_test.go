package integration_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/integration/jstest"
	"github.com/weavejobs/weave/internal/testwait"
	"github.com/weavejobs/weave/worker"
)

func noop(context.Context, *worker.Job) ([]byte, error) { return nil, nil }

// startWorker runs a worker on its own connection and returns the channel Run's error comes on.
func (e *env) runWorkerAs(ctx context.Context, id string) (<-chan error, func()) {
	e.t.Helper()
	nc := jstest.NewConn(e.t, e.srv.ClientURL())
	w, err := worker.New(nc, worker.Config{Namespace: e.ns, ID: id, HeartbeatInterval: 100 * time.Millisecond, Logger: testLogger("worker " + id)}, worker.HandlerFunc(noop))
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done, finished := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(finished)
		done <- w.Run(ctx)
	}()
	e.t.Cleanup(func() {
		cancel()
		<-finished
	})
	return done, nc.Close
}

// TestDuplicateWorkerIDRefused: a second worker started with a live worker's ID is refused at
// start, before it pulls any work, with an error wrapping worker.ErrDuplicateID; the live
// worker keeps running.
func TestDuplicateWorkerIDRefused(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.coordinator(coordinator.Config{})
	first, _ := e.runWorkerAs(e.ctx, "same")
	e.waitWorkers(1)
	second, _ := e.runWorkerAs(e.ctx, "same")
	select {
	case err := <-second:
		if !errors.Is(err, worker.ErrDuplicateID) || !strings.Contains(err.Error(), `worker ID "same" is in use by another running worker`) {
			t.Fatalf("second worker's Run: %v, want ErrDuplicateID naming the ID", err)
		}
	case err := <-first:
		t.Fatalf("the first worker stopped: %v", err)
	case <-e.ctx.Done():
		t.Fatal("the second worker was not refused")
	}
	st, err := coordinator.QueryStatus(e.ctx, e.nc, e.ns)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Workers) != 1 || st.Totals.RejectedHeartbeats == 0 {
		t.Fatalf("workers %+v, rejected heartbeats %d; want the first worker only, and the refusal counted", st.Workers, st.Totals.RejectedHeartbeats)
	}
}

// TestDuplicateWorkerIDCaughtLater: two workers with the same ID start while no coordinator runs
// (they cannot know); once one starts, it refuses the heartbeats of the second run it hears, and
// that worker drains and stops with ErrDuplicateID.
func TestDuplicateWorkerIDCaughtLater(t *testing.T) {
	t.Parallel()
	e := setup(t)
	a, _ := e.runWorkerAs(e.ctx, "twin")
	b, _ := e.runWorkerAs(e.ctx, "twin")
	e.coordinator(coordinator.Config{})
	var err error
	select {
	case err = <-a:
	case err = <-b:
	case <-e.ctx.Done():
		t.Fatal("neither worker was refused")
	}
	if !errors.Is(err, worker.ErrDuplicateID) {
		t.Fatalf("Run: %v, want ErrDuplicateID", err)
	}
	e.waitWorkers(1)
}

// TestRestartedWorkerIDAccepted: a worker that died without saying so (its connection closed)
// and is started again under the same ID is accepted once the coordinator has forgotten the dead
// run (HeartbeatMisses heartbeats), which the refusal told it to wait for.
func TestRestartedWorkerIDAccepted(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.coordinator(coordinator.Config{})
	first, crash := e.runWorkerAs(e.ctx, "phoenix")
	e.waitWorkers(1)
	crash()
	<-first
	again, _ := e.runWorkerAs(e.ctx, "phoenix")
	testwait.For(t, 30*time.Second, "the restarted worker to be live", func() bool {
		select {
		case err := <-again:
			t.Fatalf("the restarted worker stopped: %v", err)
		default:
		}
		st, err := coordinator.QueryStatus(e.ctx, e.nc, e.ns)
		return err == nil && len(st.Workers) == 1 && st.Totals.RejectedHeartbeats > 0 && st.Workers[0].LastSeen.After(time.Now().Add(-time.Second))
	})
}
