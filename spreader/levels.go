package spreader

import (
	"iter"

	"github.com/weavejobs/weave/feeder"
)

// MaxPriority is the highest priority a job may be pushed with (PushAt): a few levels, as job
// queues offer them, and Weave's 0–9.
const MaxPriority = 9

// jobQueue is one group's queued jobs: first in, first out within a priority, the highest
// priority first. Most groups push only priority 0 and so hold one queue; a queue per higher
// priority exists once a job of that priority is pushed.
type jobQueue[J any] struct {
	base  feeder.Queue[J]   // priority 0
	above []feeder.Queue[J] // above[p-1] holds priority p; nil until a job above 0 is pushed
}

// Len returns the number of queued jobs.
func (q *jobQueue[J]) Len() int {
	n := q.base.Len()
	for i := range q.above {
		n += q.above[i].Len()
	}
	return n
}

// Push queues v at priority p (0–MaxPriority).
func (q *jobQueue[J]) Push(p int, v J) {
	if p == 0 {
		q.base.Push(v)
		return
	}
	if len(q.above) < p {
		q.above = append(q.above, make([]feeder.Queue[J], p-len(q.above))...)
	}
	q.above[p-1].Push(v)
}

// head returns the queue the next job comes from: that of the highest priority holding one.
func (q *jobQueue[J]) head() *feeder.Queue[J] {
	for i := len(q.above) - 1; i >= 0; i-- {
		if q.above[i].Len() > 0 {
			return &q.above[i]
		}
	}
	return &q.base
}

// Peek returns the next job without removing it.
func (q *jobQueue[J]) Peek() (J, bool) { return q.head().Peek() }

// Pop removes and returns the next job.
func (q *jobQueue[J]) Pop() (J, bool) { return q.head().Pop() }

// All returns the queued jobs in the order they would be released. The queue must not change
// while the range runs.
func (q *jobQueue[J]) All() iter.Seq[J] {
	return func(yield func(J) bool) {
		for i := len(q.above) - 1; i >= -1; i-- {
			l := &q.base
			if i >= 0 {
				l = &q.above[i]
			}
			for v := range l.All() {
				if !yield(v) {
					return
				}
			}
		}
	}
}

// DeleteFunc removes every queued job for which del returns true.
func (q *jobQueue[J]) DeleteFunc(del func(J) bool) {
	q.base.DeleteFunc(del)
	for i := range q.above {
		q.above[i].DeleteFunc(del)
	}
}
