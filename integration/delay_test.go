package integration_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/internal/testwait"
	"github.com/weavejobs/weave/worker"
)

// TestDelayedJobsSurviveRestart: jobs delayed past a coordinator restart start no earlier than
// their time, after the new coordinator replays them; a canceled delayed job never runs; jobs
// without a delay run at once.
func TestDelayedJobsSurviveRestart(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var mu sync.Mutex
	started := map[string]time.Time{}
	e.worker(worker.Config{ID: "w", Concurrency: 8}, func(_ context.Context, j *worker.Job) ([]byte, error) {
		mu.Lock()
		started[j.Key] = time.Now()
		mu.Unlock()
		return nil, nil
	})

	startCoordinator := func() (stop func()) {
		// A clean stop gives the lease up at once, so the TTL does not slow the restart; 3 s
		// rather than 1 s, which a loaded CI machine (2 cores, the package's tests in parallel)
		// once let lapse: the coordinator's term ended and the group never finished.
		c, err := coordinator.New(e.nc, coordinator.Config{Namespace: e.ns, LeaseTTL: 3 * time.Second, Logger: testLogger("coordinator")})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		return func() {
			cancel()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("coordinator: %v", err)
			}
		}
	}
	stop := startCoordinator()

	runAt := time.Now().Add(5 * time.Second).Truncate(time.Millisecond)
	h := e.publish("g", jobs(12, func(i int, j *dispatcher.Job) {
		switch {
		case i < 4:
			j.RunAt = runAt
		case i < 8:
			j.Delay = 5 * time.Second // the same time, give or take the publish
		}
	}))
	// The jobs without a delay run now; the delayed ones wait.
	testwait.For(t, 30*time.Second, "the undelayed jobs to start", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(started) >= 4
	})
	first := h.FirstID()
	if _, err := h.CancelJobs(e.ctx, first); err != nil { // key k0, delayed
		t.Fatal(err)
	}
	info, err := e.d.Job(e.ctx, first+1)
	if err != nil {
		t.Fatal(err)
	}
	if info.State != dispatcher.StateDelayed || !info.RunAt.Equal(runAt) {
		t.Fatalf("job k1 is %s, run at %v; want delayed, run at %v", info.State, info.RunAt, runAt)
	}

	// Restart the coordinator while the jobs wait: the next one replays them as delayed.
	stop()
	defer startCoordinator()()
	testwait.For(t, 30*time.Second, "the new coordinator to report job k1 delayed", func() bool {
		info, err := e.d.Job(e.ctx, first+1)
		if err != nil && !errors.Is(err, dispatcher.ErrNoCoordinator) {
			t.Fatal(err)
		}
		return err == nil && info.State == dispatcher.StateDelayed
	})

	res := e.wait(h)
	if res.Summary.Done != 11 || res.Summary.Canceled != 1 {
		t.Fatalf("summary %+v, want 11 done and the canceled one", res.Summary)
	}
	mu.Lock()
	defer mu.Unlock()
	if _, ran := started["k0"]; ran {
		t.Error("the canceled delayed job ran")
	}
	for i := 1; i < 8; i++ {
		key := "k" + string(rune('0'+i))
		at, ok := started[key]
		switch {
		case !ok:
			t.Errorf("delayed job %s did not run", key)
		case i < 4 && at.Before(runAt):
			t.Errorf("job %s started at %v, before its time %v", key, at.Format(time.StampMilli), runAt.Format(time.StampMilli))
		case i >= 4 && at.Before(runAt.Add(-time.Second)): // Delay counts from its own publish
			t.Errorf("job %s delayed 5s started at %v, well before %v", key, at.Format(time.StampMilli), runAt.Format(time.StampMilli))
		}
	}
}
