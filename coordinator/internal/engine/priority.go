package engine

import (
	"github.com/RoaringBitmap/roaring/v2/roaring64"

	"github.com/weavejobs/weave/internal/wire"
)

// jobPriorities holds the priority within its group of every admitted job above priority 0 that
// has not ended: one bitmap of job IDs per priority, so a group's consecutive jobs of one
// priority cost a few bits, and a backlog without priorities costs nothing. The group's queue
// (spreader.Scheduler.PushAt) and a limit's line order its jobs by it. Owned by the loop.
type jobPriorities struct {
	levels [wire.MaxPriority]*roaring64.Bitmap // levels[p-1]: the jobs of priority p
	n      uint64                              // jobs held, over every level
}

// set records job id's priority p (1–MaxPriority; 0 records nothing).
func (jp *jobPriorities) set(id uint64, p int) {
	if p <= 0 || p > wire.MaxPriority {
		return
	}
	l := &jp.levels[p-1]
	if *l == nil {
		*l = roaring64.New()
	}
	if (*l).CheckedAdd(id) {
		jp.n++
	}
}

// of returns job id's priority, 0 if it has none recorded.
func (jp *jobPriorities) of(id uint64) int {
	if jp.n == 0 {
		return 0
	}
	for i := len(jp.levels) - 1; i >= 0; i-- {
		if l := jp.levels[i]; l != nil && l.Contains(id) {
			return i + 1
		}
	}
	return 0
}

// drop forgets job id's priority: it ended.
func (jp *jobPriorities) drop(id uint64) {
	if jp.n == 0 {
		return
	}
	for _, l := range jp.levels {
		if l != nil && l.CheckedRemove(id) {
			jp.n--
			return
		}
	}
}
