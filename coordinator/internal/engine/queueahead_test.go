package engine

import (
	"slices"
	"testing"
	"time"

	"github.com/weavejobs/weave/internal/wire"
)

// TestQueueAhead: with three one-slot workers, the free slots get a job each; the prefetched
// jobs (a window of 40, or 6) go 16 to a batch (one worker's share and 15 ahead) while the
// fleet's jobs are short, one to a batch while they are long, and as QueueAhead fixes it
// otherwise; without a prefetch window nothing goes ahead. Jobs sent ahead count as in flight
// for their group.
func TestQueueAhead(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		queueAhead int
		prefetch   int
		busy       float64
		want       []int // the batches' sizes
	}{
		{"short jobs", 0, 40, 0.1, []int{1, 1, 1, 16, 16, 8}},
		{"half busy", 0, 40, 0.5, []int{1, 1, 1, 16, 16, 8}},
		{"long jobs", 0, 6, 0.9, []int{1, 1, 1, 1, 1, 1, 1, 1, 1}},
		{"off", -1, 6, 0.1, []int{1, 1, 1, 1, 1, 1, 1, 1, 1}},
		{"fixed", 2, 6, 0.9, []int{1, 1, 1, 3, 3}},
		{"no prefetch window", 2, -1, 0.1, []int{1, 1, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Prefetch: tc.prefetch, QueueAhead: tc.queueAhead}
			te := newTestEngine(t, cfg)
			for _, w := range []string{"a", "b", "c"} {
				te.worker(w, 1)
			}
			te.open("g")
			for range 60 {
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
	if got := aheadPerSlot(&te.e.cfg, short); got != 15 {
		t.Errorf("pool of short jobs (busy %.2f): %d ahead per slot, want 15 (a batch of 16)", short.busy, got)
	}
	if got := aheadPerSlot(&te.e.cfg, long); got != 0 {
		t.Errorf("pool of long jobs (busy %.2f): %d ahead per slot, want 0", long.busy, got)
	}
}

// TestQueueAheadFillsABatch: by default, the jobs per slot sent ahead to a worker of short jobs
// fill a batch of about aheadBatch, whatever its slots: 15 per slot for one slot, 7 for two, 3
// for four, one for eight or more.
func TestQueueAheadFillsABatch(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ slots, want int }{{1, 15}, {2, 7}, {3, 4}, {4, 3}, {8, 1}, {16, 1}, {64, 1}} {
		p := &pool{slots: 10 * c.slots, workers: 10, busy: 0.2}
		if got := aheadPerSlot(&Config{}, p); got != c.want {
			t.Errorf("workers of %d slots: %d ahead per slot, want %d", c.slots, got, c.want)
		}
		if got := p.batchCap(64, aheadPerSlot(&Config{}, p)); c.slots < 8 && (got < 12 || got > aheadBatch) {
			t.Errorf("workers of %d slots: batches of up to %d, want about %d", c.slots, got, aheadBatch)
		}
	}
	// Every worker of the pool draining: no slots to share, and no division by them.
	if got := aheadPerSlot(&Config{}, &pool{workers: 3, busy: 0.2}); got != 15 {
		t.Errorf("a pool of draining workers: %d ahead per slot", got)
	}
}
