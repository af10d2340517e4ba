package integration_test

import (
	"context"
	"testing"
	"time"

	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/internal/testwait"
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

// TestCancelDuringRestart: a cancel stored while no coordinator runs is answered by the one that
// starts, once it has replayed the group, rather than left without an answer although applied.
func TestCancelDuringRestart(t *testing.T) {
	t.Parallel()
	e := setup(t)
	stop := e.stoppableCoordinator()
	h := e.publish("g", jobs(3, nil)) // no worker: the jobs stay pending
	testwait.For(t, 30*time.Second, "the group admitted", func() bool {
		info, err := e.d.Group(e.ctx, "g")
		return err == nil && info.Admitted == 3
	})
	stop()

	d, err := dispatcher.New(e.nc, dispatcher.Config{Namespace: e.ns, RequestTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	before := e.jobsState().LastSeq
	canceled := make(chan error, 1)
	go func() { canceled <- d.Attach("g").Cancel(e.ctx) }()
	testwait.For(t, 30*time.Second, "the cancel stored", func() bool { return e.jobsState().LastSeq > before })
	e.stoppableCoordinator()
	if err := <-canceled; err != nil {
		t.Fatalf("cancel stored during the restart: %v", err)
	}
	if res, err := h.Wait(e.ctx); err != nil || res.Summary.Canceled != 3 {
		t.Fatalf("group after the cancel: %+v, %v; want its 3 jobs canceled", res, err)
	}
}
