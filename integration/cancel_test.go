package integration_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/worker"
)

// TestCancelAnswers: the coordinator answers every cancel. A group that is open is canceled
// (nil); one never published, or finished, is refused (ErrGroupNotOpen). With no coordinator
// running the cancel is stored (ErrNoAnswer) and a coordinator started later applies it.
func TestCancelAnswers(t *testing.T) {
	t.Parallel()
	e := setup(t)
	// No coordinator yet: the cancel waits RequestTimeout for an answer, then says it is stored.
	d, err := dispatcher.New(e.nc, dispatcher.Config{Namespace: e.ns, RequestTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	parked := e.publish("parked", jobs(5, func(_ int, j *dispatcher.Job) { j.Require = []string{"nobody"} }))
	if err := d.Attach("parked").Cancel(e.ctx); !errors.Is(err, dispatcher.ErrNoAnswer) {
		t.Fatalf("cancel without a coordinator: %v, want ErrNoAnswer", err)
	}

	e.coordinator(coordinator.Config{})
	// The stored cancel is applied when the coordinator reads it.
	sum, err := parked.WaitSummary(e.ctx)
	if err != nil || sum != (dispatcher.Summary{Jobs: 5, Canceled: 5}) {
		t.Fatalf("summary of the group canceled while no coordinator ran: %+v, %v", sum, err)
	}

	e.worker(worker.Config{Concurrency: 2}, func(ctx context.Context, j *worker.Job) ([]byte, error) {
		if j.Key == "k0" {
			return nil, nil
		}
		<-ctx.Done() // the others run until canceled
		return nil, ctx.Err()
	})
	running := e.publish("running", jobs(4, nil))
	if _, err := running.WaitKey(e.ctx, "k0"); err != nil {
		t.Fatal(err)
	}
	if err := running.Cancel(e.ctx); err != nil {
		t.Fatalf("cancel of a running group: %v", err)
	}
	sum, err = running.WaitSummary(e.ctx)
	if err != nil || sum.Done != 1 || sum.Canceled != 3 {
		t.Fatalf("summary after cancel: %+v, %v", sum, err)
	}

	for _, g := range []string{"running", "never-published"} {
		if err := e.d.Attach(g).Cancel(e.ctx); !errors.Is(err, dispatcher.ErrGroupNotOpen) {
			t.Errorf("cancel of %s: %v, want ErrGroupNotOpen", g, err)
		}
		if _, err := e.d.Attach(g).CancelJobs(e.ctx, 1); !errors.Is(err, dispatcher.ErrGroupNotOpen) {
			t.Errorf("cancel of a job of %s: %v, want ErrGroupNotOpen", g, err)
		}
	}
}
