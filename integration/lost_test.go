package integration_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/integration/jstest"
	"github.com/weavejobs/weave/internal/testwait"
	"github.com/weavejobs/weave/internal/wire"
	"github.com/weavejobs/weave/worker"
)

// TestBatchLostInDelivery: the server delivers a work batch to a worker whose connection is then
// cut (through a proxy that held the bytes), so the batch never arrives. JetStream counts it
// delivered and would send it again only after the worker's 30 s lease; the coordinator sees the
// pool quiet (its worker runs nothing and holds no batch) while it owes a job, takes the batch
// back and releases the job again, which runs once, on its first attempt, well before the lease.
func TestBatchLostInDelivery(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.coordinator(coordinator.Config{})
	proxy, err := jstest.StartProxy(e.srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	wnc, err := nats.Connect(proxy.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wnc.Close)
	var runs, later atomic.Int64
	w, err := worker.New(wnc, worker.Config{Namespace: e.ns, Concurrency: 2, HeartbeatInterval: 100 * time.Millisecond,
		Logger: testLogger("worker")}, worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
		runs.Add(1)
		if j.Attempt > 1 {
			later.Add(1)
		}
		return j.Payload, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	e.background("worker", w.Run)
	e.waitWorkers(1)
	testwait.For(t, 10*time.Second, "the worker to pull", func() bool { return w.Stats().Pulls > 0 })

	// The worker's connection passes nothing while the batch is delivered to it.
	proxy.Freeze()
	h := e.publish("lost", jobs(1, nil))
	names, err := wire.NewNames(e.ns)
	if err != nil {
		t.Fatal(err)
	}
	js := jstest.NewJetStream(t, e.nc)
	testwait.For(t, 10*time.Second, "the batch to be delivered", func() bool {
		c, err := js.Consumer(e.ctx, names.WorkStream(), names.WorkConsumer(w.Pool()))
		if err != nil {
			return false
		}
		info, err := c.Info(e.ctx)
		return err == nil && info.NumAckPending == 1
	})
	proxy.Cut() // the bytes the proxy held are gone with the connection
	proxy.Thaw()

	ctx, cancel := context.WithTimeout(e.ctx, 15*time.Second) // half the lease
	defer cancel()
	res, err := h.Wait(ctx)
	if err != nil {
		t.Fatalf("the job's group did not complete within 15 s (a lost batch waits for the 30 s lease): %v", err)
	}
	if res.Summary.Done != 1 {
		t.Fatalf("summary %+v", res.Summary)
	}
	if runs.Load() != 1 || later.Load() != 0 {
		t.Fatalf("the job ran %d times, %d of them on a later attempt; want once, on its first", runs.Load(), later.Load())
	}
}
