package coordinator

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/integration/jstest"
	"github.com/weavejobs/weave/internal/testwait"
	"github.com/weavejobs/weave/worker"
)

// aheadFleet is a real coordinator (QueueAhead 1, Prefetch 4) on a server, with jobs "1", "2"
// and "3" of group g admitted before one-slot worker a joins: its one release decision then
// sends job 1 to a's free slot and jobs 2 and 3 in one batch ahead. On a, job 1 ends at once and
// job 2 runs until its context ends or release is closed, so job 3 waits in a's queue.
type aheadFleet struct {
	t       *testing.T
	ns, url string
	ctx     context.Context
	d       *dispatcher.Dispatcher
	h       *dispatcher.Handle
	a       *worker.Worker
	stopA   func()
	release chan struct{}
	mu      sync.Mutex
	ran     map[string][]string // worker → keys of the jobs it ran, with their attempts
}

func newAheadFleet(t *testing.T, ns string) *aheadFleet {
	srv, _, _, ctx := onServer(t, ns)
	f := &aheadFleet{t: t, ns: ns, url: srv.ClientURL(), ctx: ctx, release: make(chan struct{}), ran: map[string][]string{}}
	c, err := New(jstest.NewConn(t, f.url), Config{Namespace: ns, Prefetch: 4, QueueAhead: 1, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	cctx, ccancel := context.WithCancel(ctx)
	cdone := make(chan error, 1)
	go func() { cdone <- c.Run(cctx) }()
	t.Cleanup(func() {
		ccancel()
		<-cdone
	})
	d, err := dispatcher.New(jstest.NewConn(t, f.url), dispatcher.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	f.d = d
	f.h, err = d.Publish(ctx, "g", slices.Values([]dispatcher.Job{{Key: "1"}, {Key: "2"}, {Key: "3"}}))
	if err != nil {
		t.Fatal(err)
	}
	testwait.Seen(t, 20*time.Second, "the coordinator to admit the 3 jobs", func() (bool, string) {
		info, err := d.Group(ctx, "g")
		if err != nil {
			return false, err.Error()
		}
		return info.Admitted == 3, fmt.Sprintf("admitted %d", info.Admitted)
	})
	f.a, f.stopA = f.worker("a", func(ctx context.Context, j *worker.Job) {
		if j.Key == "2" {
			select {
			case <-f.release:
			case <-ctx.Done():
			}
		}
	})
	testwait.For(t, 20*time.Second, "worker a to run job 2 and hold job 3 in its queue", func() bool {
		return slices.Equal(f.keys("a"), []string{"1/1", "2/1"}) && f.a.Stats().Queued == 1
	})
	return f
}

// worker starts a one-slot worker that records each job it runs, then runs h.
func (f *aheadFleet) worker(id string, h func(context.Context, *worker.Job)) (w *worker.Worker, stop func()) {
	w, err := worker.New(jstest.NewConn(f.t, f.url),
		worker.Config{Namespace: f.ns, ID: id, Concurrency: 1, Lease: time.Minute, DrainTimeout: time.Minute},
		worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
			f.mu.Lock()
			f.ran[id] = append(f.ran[id], fmt.Sprintf("%s/%d", j.Key, j.Attempt))
			f.mu.Unlock()
			h(ctx, j)
			return nil, ctx.Err()
		}))
	if err != nil {
		f.t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { wcancel(); <-done }) }
	f.t.Cleanup(stop)
	return w, stop
}

// keys lists the jobs worker id ran, as key/attempt.
func (f *aheadFleet) keys(id string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.ran[id])
}

// TestQueuedAheadReturnedAtStop: a one-slot worker holding a job sent ahead of its slot, behind
// a job that runs on, gives the queued job back at once when it stops gracefully, so it runs on
// another worker while the first job still runs, long before the batch's lease (a minute) would
// have brought it back; its attempt does not count.
func TestQueuedAheadReturnedAtStop(t *testing.T) {
	t.Parallel()
	f := newAheadFleet(t, "ahead")
	f.worker("b", func(context.Context, *worker.Job) {})
	stopped := make(chan struct{})
	go func() { f.stopA(); close(stopped) }() // returns once job 2 ends
	testwait.For(t, 20*time.Second, "job 3 to run on worker b", func() bool { return len(f.keys("b")) > 0 })
	if got := f.keys("b"); !slices.Equal(got, []string{"3/1"}) {
		t.Errorf("worker b ran %v, want job 3 at attempt 1", got)
	}
	if st := f.a.Stats(); st.Returned != 1 {
		t.Errorf("worker a returned %d jobs, want 1", st.Returned)
	}
	close(f.release)
	<-stopped
	sum, err := f.h.WaitSummary(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Done != 3 {
		t.Fatalf("summary %+v, want 3 done", sum)
	}
}

// TestQueuedAheadCanceled: a job waiting in a worker's queue, sent ahead of its slot, whose
// group is canceled, never runs; the group ends with its two unfinished jobs canceled.
func TestQueuedAheadCanceled(t *testing.T) {
	t.Parallel()
	f := newAheadFleet(t, "aheadcancel")
	if err := f.h.Cancel(f.ctx); err != nil {
		t.Fatal(err)
	}
	sum, err := f.h.WaitSummary(f.ctx) // job 2's context ends with the cancel
	if err != nil {
		t.Fatal(err)
	}
	if sum.Done != 1 || sum.Canceled != 2 {
		t.Fatalf("summary %+v, want 1 done and 2 canceled", sum)
	}
	if got := f.keys("a"); !slices.Equal(got, []string{"1/1", "2/1"}) {
		t.Fatalf("worker a ran %v; job 3 was canceled while queued", got)
	}
}

// TestQueuedAheadCanceledAtOnce: a job canceled while it waits in a worker's queue behind a job
// that runs on is reported canceled at once, not once the worker's slot reaches it.
func TestQueuedAheadCanceledAtOnce(t *testing.T) {
	t.Parallel()
	f := newAheadFleet(t, "aheadcancelone")
	job3, err := f.d.JobByKey(f.ctx, "g", "3")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.h.CancelJobs(f.ctx, job3.ID); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(f.ctx, 15*time.Second)
	defer cancel()
	out, err := f.h.WaitJob(wctx, job3.ID) // job 2 still runs: release is not closed yet
	if err != nil || out.State != dispatcher.StateCanceled {
		t.Fatalf("job 3, canceled in worker a's queue while job 2 runs: %+v, %v; want it canceled at once", out, err)
	}
	if st := f.a.Stats(); st.Queued != 0 || st.Canceled != 1 {
		t.Fatalf("worker a: %d queued, %d canceled; want 0 and 1", st.Queued, st.Canceled)
	}
	close(f.release)
	sum, err := f.h.WaitSummary(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Done != 2 || sum.Canceled != 1 {
		t.Fatalf("summary %+v, want 2 done and 1 canceled", sum)
	}
	if got := f.keys("a"); !slices.Equal(got, []string{"1/1", "2/1"}) {
		t.Fatalf("worker a ran %v; job 3 was canceled while queued", got)
	}
}
