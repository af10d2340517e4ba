package integration_test

import (
	"context"
	"testing"
	"time"

	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/worker"
)

// TestIdleWorkerAfterRestart: a coordinator knows a worker only from its heartbeats, and an idle
// worker's come every IdleHeartbeatInterval (here an hour). A coordinator calls the roll as its
// term starts, so a worker idle since before the coordinator started (the first here), or
// through a restart (the second), gets work at once, not after its next heartbeat.
func TestIdleWorkerAfterRestart(t *testing.T) {
	t.Parallel()
	e := setup(t)
	stop := e.stoppableCoordinator()
	e.worker(worker.Config{ID: "idle", Concurrency: 1, IdleHeartbeatInterval: time.Hour}, func(context.Context, *worker.Job) ([]byte, error) {
		return []byte("ran"), nil
	})
	e.waitWorkers(1)
	stop()
	e.stoppableCoordinator()

	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	h, id, err := e.d.Submit(ctx, "after-restart", dispatcher.Job{Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	out, err := h.WaitJob(ctx, id)
	if err != nil || string(out.Result) != "ran" {
		t.Fatalf("job after the restart: %+v, %v (the new coordinator never heard of the idle worker?)", out, err)
	}
}
