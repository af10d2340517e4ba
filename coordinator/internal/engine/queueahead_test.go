package engine

import (
	"slices"
	"testing"
	"time"

	"github.com/weavejobs/weave/internal/wire"
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
			te.e.ReleaseAll()
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
