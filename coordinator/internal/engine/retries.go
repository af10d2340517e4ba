package engine

import (
	"container/heap"
	"slices"
	"time"

	"github.com/weavejobs/weave/internal/jobindex"
	"github.com/weavejobs/weave/internal/journal"
)

// retries is the engine's part that owns the jobs waiting to be released again. Owned by the loop.
type retries struct {
	wait   retryHeap // jobs waiting for their retry time
	ready  []*job    // jobs due for another release (retries, returned jobs), ahead of new offers
	parked []*job    // pending jobs no live pool can run (a hard requirement nobody holds)
}

// requeue puts a job that did not run back in front of new work. Its next release keeps the
// attempt number: the report that returned it is before that release in EVENTS, so a report
// about the attempt is never ambiguous.
func (e *Engine) requeue(j *job) {
	e.mustMove(j.id, jobindex.Pending)
	j.reuse = true
	e.retries.ready = append(e.retries.ready, j)
}

// retryDelay is the wait before attempt j.attempt+1: the handler's request, else exponential
// backoff with full jitter.
func (e *Engine) retryDelay(j *job, requested time.Duration) time.Duration {
	if requested > 0 {
		return requested
	}
	ceiling := e.cfg.RetryBase << min(j.attempt-1, 32)
	if ceiling <= 0 || ceiling > e.cfg.RetryMax {
		ceiling = e.cfg.RetryMax
	}
	return time.Duration(e.rng.Int64N(int64(ceiling) + 1))
}

func (e *Engine) scheduleRetry(j *job, delay time.Duration, now time.Time) {
	e.mustMove(j.id, jobindex.RetryWait)
	j.retryAt = now.Add(delay)
	heap.Push(&e.retries.wait, j)
	e.stats.Retried++
	e.out.Retries = append(e.out.Retries, journal.Entry{ID: j.id, Attempt: j.attempt, At: j.retryAt})
}

// drop takes j out of the retries, wherever it waits.
func (rt *retries) drop(j *job) {
	if j.heapIdx >= 0 && j.heapIdx < len(rt.wait) && rt.wait[j.heapIdx] == j {
		heap.Remove(&rt.wait, j.heapIdx)
	}
	isJ := func(r *job) bool { return r == j }
	rt.ready = slices.DeleteFunc(rt.ready, isJ)
	rt.parked = slices.DeleteFunc(rt.parked, isJ)
}

// nextDue is when tick next has work: the earliest retry, or zero.
func (rt *retries) nextDue() time.Time {
	if len(rt.wait) == 0 {
		return time.Time{}
	}
	return rt.wait[0].retryAt
}

// popDue takes the earliest retry out of the heap if it is due at now, else returns nil.
func (rt *retries) popDue(now time.Time) *job {
	if len(rt.wait) == 0 || rt.wait[0].retryAt.After(now) {
		return nil
	}
	return heap.Pop(&rt.wait).(*job)
}

// unpark offers the parked jobs again, ahead of new work; those still unplaceable are parked
// again by the next release decision.
func (rt *retries) unpark() {
	rt.ready = append(rt.ready, rt.parked...)
	rt.parked = nil
}

// retryHeap orders retry-waiting jobs by due time.
type retryHeap []*job

func (h retryHeap) Len() int { return len(h) }

func (h retryHeap) Less(a, b int) bool { return h[a].retryAt.Before(h[b].retryAt) }

func (h retryHeap) Swap(a, b int) {
	h[a], h[b] = h[b], h[a]
	h[a].heapIdx, h[b].heapIdx = a, b
}

func (h *retryHeap) Push(x any) {
	j := x.(*job)
	j.heapIdx = len(*h)
	*h = append(*h, j)
}

func (h *retryHeap) Pop() any {
	old := *h
	j := old[len(old)-1]
	*h = old[:len(old)-1]
	j.heapIdx = -1
	return j
}
