package coordinator

import (
	"container/heap"
	"time"

	"github.com/weavejobs/weave/internal/jobindex"
)

// delays is the engine's part that owns the delayed jobs' times: jobs admitted with a run-at time
// still ahead (Job.RunAt) wait here, in the index's Delayed state, outside the scheduler, so they
// hold no slot, no feeder slot and no place in a worker's queue. tick makes the due ones pending
// (wake). Owned by the loop.
//
// An entry whose job left the Delayed state another way (canceled, or found released during
// replay) is skipped when it comes up, so nothing else has to find it in the heap.
type delays struct {
	heap delayHeap
	// woke holds when each woken job became pending, until it leaves pending: its queue wait and
	// the oldest-pending figure count from then, not from when it was stored.
	woke map[uint64]time.Time
}

// delayedJob is a delayed job's heap entry.
type delayedJob struct {
	at int64 // Unix nanoseconds
	id uint64
	g  *group
}

// delay admits job id of g as delayed until at.
func (e *engine) delay(g *group, id uint64, at time.Time) {
	heap.Push(&e.delays.heap, delayedJob{at: at.UnixNano(), id: id, g: g})
}

// wake makes the delayed jobs whose time has come pending, in time order, each at the end of its
// group's queue.
func (e *engine) wake(now time.Time) {
	if e.replaying() {
		return
	}
	for len(e.delays.heap) > 0 && e.delays.heap[0].at <= now.UnixNano() {
		d := heap.Pop(&e.delays.heap).(delayedJob)
		if st, ok := e.idx.State(d.id); !ok || st != jobindex.Delayed {
			continue // canceled, or released before a restart
		}
		e.mustMove(d.id, jobindex.Pending)
		if e.delays.woke == nil {
			e.delays.woke = map[uint64]time.Time{}
		}
		e.delays.woke[d.id] = now
		if d.g.inSched {
			_ = e.sched.Push(d.g, d.id)
			e.sealIfDue(d.g)
		}
	}
}

// sealIfDue seals g in the scheduler once it is sealed and none of its jobs is still delayed:
// until then the scheduler must keep taking its jobs as they come due.
func (e *engine) sealIfDue(g *group) {
	if g.sealed && g.inSched && e.delayedJobs(g) == 0 {
		_ = e.sched.Seal(g)
	}
}

// delayedJobs is how many of g's jobs wait for their time.
func (e *engine) delayedJobs(g *group) uint64 {
	c, _ := e.idx.GroupCounts(g.idxKey)
	return c.Delayed
}

// nextDue is when wake next has work, or zero.
func (d *delays) nextDue() time.Time {
	if len(d.heap) == 0 {
		return time.Time{}
	}
	return time.Unix(0, d.heap[0].at)
}

// pendingSince is when pending job id became pending: when it was stored, or when it came due if
// it was delayed. Zero if unknown.
func (e *engine) pendingSince(id uint64) time.Time {
	if at, ok := e.delays.woke[id]; ok {
		return at
	}
	return e.mx.storedTime(id)
}

// delayHeap orders delayed jobs by time, then ID.
type delayHeap []delayedJob

func (h delayHeap) Len() int { return len(h) }
func (h delayHeap) Less(a, b int) bool {
	return h[a].at < h[b].at || h[a].at == h[b].at && h[a].id < h[b].id
}
func (h delayHeap) Swap(a, b int) { h[a], h[b] = h[b], h[a] }
func (h *delayHeap) Push(x any)   { *h = append(*h, x.(delayedJob)) }
func (h *delayHeap) Pop() any {
	old := *h
	d := old[len(old)-1]
	*h = old[:len(old)-1]
	return d
}
