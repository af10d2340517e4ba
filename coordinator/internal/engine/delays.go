package engine

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
	woke  map[uint64]wokeAt
	woken uint64 // jobs woken so far: wokeAt.n
}

// wokeAt is when a delayed job came due, and the order it did (a group's queue takes the jobs due
// in that order, those due at one tick in time order).
type wokeAt struct {
	at time.Time
	n  uint64
}

// delayedJob is a delayed job's heap entry. Its group is the index's (engine.jobRec).
type delayedJob struct {
	at int64 // Unix nanoseconds
	id uint64
}

// delay admits job id as delayed until at.
func (e *Engine) delay(id uint64, at time.Time) {
	heap.Push(&e.delays.heap, delayedJob{at: at.UnixNano(), id: id})
}

// wake makes the delayed jobs whose time has come pending, in time order, each at the end of its
// group's queue.
func (e *Engine) wake(now time.Time) {
	if e.Replaying() {
		return
	}
	for len(e.delays.heap) > 0 && e.delays.heap[0].at <= now.UnixNano() {
		d := heap.Pop(&e.delays.heap).(delayedJob)
		if st, ok := e.idx.State(d.id); !ok || st != jobindex.Delayed {
			continue // canceled, or released before a restart
		}
		e.mustMove(d.id, jobindex.Pending)
		if e.delays.woke == nil {
			e.delays.woke = map[uint64]wokeAt{}
		}
		e.delays.woken++
		e.delays.woke[d.id] = wokeAt{now, e.delays.woken}
		if r := e.jobRec(d.id); r != nil {
			g := e.liveOf(r)
			e.ready(r, g, d.id)
			if g != nil {
				e.sealIfDue(g)
			}
		}
	}
}

// sealIfDue seals g in the scheduler once it is sealed, none of its jobs is still delayed and it
// does not wait in the line with jobs its queue does not hold yet: until then the scheduler must
// keep taking its jobs as they come.
func (e *Engine) sealIfDue(g *group) {
	if !g.sealed || !g.inSched || e.delayedJobs(g) > 0 {
		return
	}
	if r := e.groups.table.get(g.openSeq); r != nil && r.flags&recInLine != 0 {
		return // fillSlots seals it once it has its jobs
	}
	_ = e.sched.Seal(g)
}

// delayedJobs is how many of g's jobs wait for their time.
func (e *Engine) delayedJobs(g *group) uint64 {
	return e.jobCounts(g.openSeq, g.alone).Delayed
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
func (e *Engine) pendingSince(id uint64) time.Time {
	if w, ok := e.delays.woke[id]; ok {
		return w.at
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
