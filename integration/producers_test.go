package integration_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/integration/jstest"
	"github.com/weavejobs/weave/worker"
)

// TestOutcomesReachTheirProducer: the outcomes of a producer's groups reach that producer's
// connection and no other producer's, whatever the number of groups; a producer waiting on a
// group another one opened (Attach) hears of it too.
func TestOutcomesReachTheirProducer(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.coordinator(coordinator.Config{})
	release := make(chan struct{})
	e.worker(worker.Config{ID: "w", Concurrency: 8}, func(ctx context.Context, j *worker.Job) ([]byte, error) {
		if j.Key == "held" {
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return j.Payload, nil
	})

	// Producer b, on its own connection, waits for a job of its own: its outcome subscription
	// is live from then on.
	nb := jstest.NewConn(t, e.srv.ClientURL())
	b, err := dispatcher.New(nb, dispatcher.Config{Namespace: e.ns})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	hb, idb, err := b.Submit(e.ctx, "", dispatcher.Job{Key: "b"})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := hb.WaitJob(e.ctx, idb); err != nil || out.State != dispatcher.StateDone {
		t.Fatalf("b's own job: %+v, %v", out, err)
	}
	before := nb.Stats().InMsgs

	// Producer e.d's single jobs and a group: b's connection receives none of their outcomes.
	const singles = 100
	handles := make([]*dispatcher.Handle, singles)
	ids := make([]uint64, singles)
	for i := range singles {
		if handles[i], ids[i], err = e.d.Submit(e.ctx, "", dispatcher.Job{Key: fmt.Sprint("s", i)}); err != nil {
			t.Fatal(err)
		}
	}
	for i, h := range handles {
		if out, err := h.WaitJob(e.ctx, ids[i]); err != nil || out.State != dispatcher.StateDone {
			t.Fatalf("single job %d: %+v, %v", i, out, err)
		}
	}
	if res := e.wait(e.publish("group", jobs(50, nil))); res.Summary.Done != 50 {
		t.Fatalf("group: %+v", res.Summary)
	}
	if n := nb.Stats().InMsgs - before; n != 0 {
		t.Fatalf("another producer's connection received %d messages while %d single jobs and a group of 50 ran", n, singles)
	}

	// b attaches to a group e.d opened and waits while it runs.
	held := e.publish("held", jobs(1, func(_ int, j *dispatcher.Job) { j.Key = "held" }))
	waited := make(chan *dispatcher.Result, 1)
	go func() {
		res, err := b.Attach("held").Wait(e.ctx)
		if err != nil {
			t.Error(err)
		}
		waited <- res
	}()
	close(release)
	if res := e.wait(held); res.Summary.Done != 1 {
		t.Fatalf("held group: %+v", res.Summary)
	}
	if res := <-waited; res == nil || res.Summary.Done != 1 || len(res.Jobs) != 1 {
		t.Fatalf("b's Wait on the group e.d opened: %+v", res)
	}
}
