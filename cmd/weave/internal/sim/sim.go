// Package sim holds what weave demo and the bench scenarios both compute from the runs of jobs:
// a plain FIFO queue simulated on a workload (the reference Weave is compared with), and how
// many of a group's jobs ran at once. Everything here is pure and deterministic.
package sim

import (
	"cmp"
	"container/heap"
	"slices"
	"time"
)

// Job is a job of a simulated workload: its group (an index) and how long its handler takes.
type Job struct {
	Group int
	Dur   time.Duration
}

// Run is one job's run: its group (an index), and when its handler started and returned,
// relative to a common origin.
type Run struct {
	Group      int
	Start, End time.Duration
}

// FIFO replays a plain FIFO queue: slots workers each take the next job in queue order as soon
// as they are free, and every job takes exactly its duration, with no overhead. It returns each
// job's run, in queue order, from time 0. The simulation is deterministic: jobs start in queue
// order at non-decreasing times, and a job ending at t frees its slot for a job starting at t.
func FIFO(jobs []Job, slots int) []Run {
	if slots < 1 {
		return nil
	}
	free := make(durationHeap, slots) // every slot is free at 0
	runs := make([]Run, 0, len(jobs))
	for _, j := range jobs {
		at := free[0]
		end := at + j.Dur
		free[0] = end
		heap.Fix(&free, 0)
		runs = append(runs, Run{Group: j.Group, Start: at, End: end})
	}
	return runs
}

type durationHeap []time.Duration

func (h durationHeap) Len() int           { return len(h) }
func (h durationHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h durationHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *durationHeap) Push(x any)        { *h = append(*h, x.(time.Duration)) }
func (h *durationHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Concurrency is what Measure measures of one set of runs.
type Concurrency struct {
	// Peaks holds each group's peak: the most of its jobs running at once.
	Peaks []int
	// CrowdedStarts counts the starts made while at least `crowded` groups (the starting one
	// included) still had jobs never started; CrowdedOverlaps those of them that found another
	// job of their group running.
	CrowdedStarts, CrowdedOverlaps int
	// CrowdedPeaks holds each group's peak counting only its crowded starts: while other groups
	// were waiting, so that one group holding several slots was a choice, not the only option.
	CrowdedPeaks []int
	// Gaps are the times between consecutive starts of the same group, all groups pooled.
	Gaps []time.Duration
	// Makespan is the time from the first start to the last end.
	Makespan time.Duration
}

// Measure sweeps the runs in time order: a run that ends at t frees its place before a run
// starting at t begins, and runs starting at the same time begin in slice order. groups is the
// number of groups (indexes 0..groups-1); crowded is the number of waiting groups from which a
// start counts as crowded (0: every start does).
func Measure(runs []Run, groups, crowded int) Concurrency {
	c := Concurrency{Peaks: make([]int, groups), CrowdedPeaks: make([]int, groups)}
	if len(runs) == 0 {
		return c
	}
	type event struct {
		at    time.Duration
		end   bool
		order int // index in runs: keeps the sweep deterministic
	}
	events := make([]event, 0, 2*len(runs))
	unstarted := make([]int, groups)
	first, last := runs[0].Start, runs[0].End
	for i, r := range runs {
		events = append(events, event{r.Start, false, i}, event{r.End, true, i})
		unstarted[r.Group]++
		first, last = min(first, r.Start), max(last, r.End)
	}
	c.Makespan = last - first
	slices.SortStableFunc(events, func(a, b event) int {
		if a.at != b.at {
			return cmp.Compare(a.at, b.at)
		}
		if a.end != b.end {
			if a.end {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.order, b.order)
	})
	waiting := 0
	for _, n := range unstarted {
		if n > 0 {
			waiting++
		}
	}
	running := make([]int, groups)
	lastStart := make([]time.Duration, groups)
	started := make([]bool, groups)
	for _, ev := range events {
		g := runs[ev.order].Group
		if ev.end {
			running[g]--
			continue
		}
		crowdedStart := waiting >= crowded
		if crowdedStart {
			c.CrowdedStarts++
			if running[g] > 0 {
				c.CrowdedOverlaps++
			}
		}
		running[g]++
		c.Peaks[g] = max(c.Peaks[g], running[g])
		if crowdedStart {
			c.CrowdedPeaks[g] = max(c.CrowdedPeaks[g], running[g])
		}
		if started[g] {
			c.Gaps = append(c.Gaps, ev.at-lastStart[g])
		}
		started[g], lastStart[g] = true, ev.at
		if unstarted[g]--; unstarted[g] == 0 {
			waiting--
		}
	}
	return c
}
