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
	"github.com/weavejobs/weave/internal/wire"
	"github.com/weavejobs/weave/worker"
)

// TestQueueAhead: with three one-slot workers and a prefetch window of 6, the free slots get a
// job each; the prefetched jobs go two to a batch (one worker's share and one ahead) while the
// fleet's jobs are short, one to a batch while they are long, and as QueueAhead fixes it
// otherwise; without a prefetch window nothing goes ahead. Jobs sent ahead count as in flight
// for their group.
func TestQueueAhead(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		queueAhead int
		busy       float64
		want       []int // the batches' sizes
		noPrefetch bool
	}{
		{"short jobs", 0, 0.1, []int{1, 1, 1, 2, 2, 2}, false},
		{"half busy", 0, 0.5, []int{1, 1, 1, 2, 2, 2}, false},
		{"long jobs", 0, 0.9, []int{1, 1, 1, 1, 1, 1, 1, 1, 1}, false},
		{"off", -1, 0.1, []int{1, 1, 1, 1, 1, 1, 1, 1, 1}, false},
		{"fixed", 2, 0.9, []int{1, 1, 1, 3, 3}, false},
		{"no prefetch window", 2, 0.1, []int{1, 1, 1}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Prefetch: 6, QueueAhead: tc.queueAhead}
			if tc.noPrefetch {
				cfg.Prefetch = -1
			}
			te := newTestEngine(t, cfg)
			for _, w := range []string{"a", "b", "c"} {
				te.worker(w, 1)
			}
			te.open("g")
			for range 20 {
				te.job(wire.JobMeta{Group: "g"})
			}
			te.e.fleet.pools["any"].busy = tc.busy
			te.e.releaseAll()
			var sizes []int
			for _, r := range te.e.out.releases {
				sizes = append(sizes, len(r.jobs))
			}
			if !slices.Equal(sizes, tc.want) {
				t.Fatalf("batches of %v, want %v", sizes, tc.want)
			}
			released := 0
			for _, n := range sizes {
				released += n
			}
			for _, g := range te.e.groups.live {
				if g.inFlight != released {
					t.Fatalf("group has %d jobs in flight, %d released", g.inFlight, released)
				}
			}
		})
	}
}

// aheadFleet is a real coordinator (QueueAhead 1, Prefetch 4) on a server, with jobs "1", "2"
// and "3" of group g admitted before one-slot worker a joins: its one release decision then
// sends job 1 to a's free slot and jobs 2 and 3 in one batch ahead. On a, job 1 ends at once and
// job 2 runs until its context ends or release is closed, so job 3 waits in a's queue.
type aheadFleet struct {
	t       *testing.T
	ns, url string
	ctx     context.Context
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

// TestQueueAheadFollowsThePool: whether a pool's batches go ahead follows its own busy share,
// not the fleet's: a pool whose jobs run most of their round trip keeps them out of its workers'
// queues while another pool's short jobs go ahead; a new pool starts without; and time a job
// waited in a worker's queue does not count as round trip (or the waits that going ahead causes
// would keep a pool of long jobs going ahead).
func TestQueueAheadFollowsThePool(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{})
	te.worker("cpu", 1)
	te.worker("gpu", 1, "gpu")
	short, long := te.e.fleet.pools["any"], te.e.fleet.pools[wire.PoolKey([]string{"gpu"})]
	if aheadPerSlot(&te.e.cfg, short) != 0 || aheadPerSlot(&te.e.cfg, long) != 0 {
		t.Fatal("a pool not measured yet sends jobs ahead")
	}
	g := &group{busy: 1, weight: 1}
	for range 50 {
		// Short jobs: 1 ms of a 10 ms round trip. Long ones: 90 ms of 100, after waiting 900 ms
		// in a worker's queue.
		te.e.learnBusy(&job{g: g, since: te.now.Add(-10 * time.Millisecond)}, short, time.Millisecond, 0, te.now)
		te.e.learnBusy(&job{g: g, since: te.now.Add(-time.Second)}, long, 90*time.Millisecond, 900*time.Millisecond, te.now)
	}
	if got := aheadPerSlot(&te.e.cfg, short); got != 1 {
		t.Errorf("pool of short jobs (busy %.2f): %d ahead per slot, want 1", short.busy, got)
	}
	if got := aheadPerSlot(&te.e.cfg, long); got != 0 {
		t.Errorf("pool of long jobs (busy %.2f): %d ahead per slot, want 0", long.busy, got)
	}
}
