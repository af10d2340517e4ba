package spreader_test

import (
	"fmt"
	"iter"
)

// This file holds the naive model of Spread and the instrumented iterators the
// tests compare it with. Both describe a run as a trace of events:
//
//	take g3     the source hands out group 3
//	job 3.0     group 3 produces its job 0
//	yield 3.0   the consumer receives job 3.0
//	end g3      group 3's iterator has returned (ran dry or was stopped)
//	end source  the source's iterator has returned
//
// Matching the model's trace event for event checks the order and the
// laziness: what is pulled, and exactly when.

// modelSpread replays Spread on groups of the given sizes with plain indexes.
// It stops after stopAfter yields if stopAfter > 0. It returns the trace up to
// that point, without the releases that follow a stop, and the jobs yielded.
func modelSpread(sizes []int, feeders, stopAfter int) (trace []string, out []string) {
	type feederState struct {
		group, pos   int
		holds, ended bool
	}
	fs := make([]feederState, max(feeders, 1))
	nextGroup, sourceEnded := 0, false
	for {
		live := false
		for i := range fs {
			f := &fs[i]
			for !f.ended { // feeder i's turn
				if f.holds && f.pos < sizes[f.group] {
					job := fmt.Sprintf("%d.%d", f.group, f.pos)
					f.pos++
					trace = append(trace, "job "+job, "yield "+job)
					out = append(out, job)
					if len(out) == stopAfter {
						return trace, out
					}
					break
				}
				if f.holds {
					trace = append(trace, fmt.Sprintf("end g%d", f.group))
					f.holds = false
				}
				if nextGroup == len(sizes) {
					if !sourceEnded {
						trace = append(trace, "end source")
						sourceEnded = true
					}
					f.ended = true
					break
				}
				trace = append(trace, fmt.Sprintf("take g%d", nextGroup))
				f.group, f.pos, f.holds = nextGroup, 0, true
				nextGroup++
			}
			live = live || !f.ended
		}
		if !live {
			return trace, out
		}
	}
}

// recorder builds iterators that append their events to a trace, and counts
// the ones started and not yet returned.
type recorder struct {
	trace []string
	open  int
}

// source returns groups of the given sizes; size < 0 makes an endless group.
// If endless is true, the sizes repeat forever.
func (r *recorder) source(sizes []int, endless bool) iter.Seq[iter.Seq[string]] {
	return func(yield func(iter.Seq[string]) bool) {
		r.open++
		defer func() { r.open--; r.trace = append(r.trace, "end source") }()
		for g := 0; g < len(sizes) || endless && len(sizes) > 0; g++ {
			r.trace = append(r.trace, fmt.Sprintf("take g%d", g))
			if !yield(r.group(g, sizes[g%len(sizes)])) {
				return
			}
		}
	}
}

func (r *recorder) group(g, size int) iter.Seq[string] {
	return func(yield func(string) bool) {
		r.open++
		defer func() { r.open--; r.trace = append(r.trace, fmt.Sprintf("end g%d", g)) }()
		for i := 0; size < 0 || i < size; i++ {
			job := fmt.Sprintf("%d.%d", g, i)
			r.trace = append(r.trace, "job "+job)
			if !yield(job) {
				return
			}
		}
	}
}
