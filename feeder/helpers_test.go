package feeder_test

import (
	"fmt"
	"iter"
	"slices"
)

// tracker builds iterators that log what they do, so tests can check exactly
// when groups and jobs are pulled and which iterators have been released.
type tracker struct {
	log  []string
	open map[string]bool // iterator name → started and not yet returned
}

func newTracker() *tracker { return &tracker{open: map[string]bool{}} }

// group returns a group named name whose jobs are name1, name2, ... nameN.
func (tr *tracker) group(name string, n int) iter.Seq[string] {
	return func(yield func(string) bool) {
		tr.open[name] = true
		defer delete(tr.open, name)
		for i := 1; i <= n; i++ {
			job := fmt.Sprint(name, i)
			tr.log = append(tr.log, "job "+job)
			if !yield(job) {
				return
			}
		}
	}
}

// source returns one group per name, in order; group names[i] has sizes[i]
// jobs. It logs "take <name>" when it hands a group out.
func (tr *tracker) source(names []string, sizes []int) iter.Seq[iter.Seq[string]] {
	return func(yield func(iter.Seq[string]) bool) {
		tr.open["source"] = true
		defer delete(tr.open, "source")
		for i, name := range names {
			tr.log = append(tr.log, "take "+name)
			if !yield(tr.group(name, sizes[i])) {
				return
			}
		}
	}
}

// openNames returns the iterators that have started and not returned, sorted.
func (tr *tracker) openNames() []string {
	var names []string
	for name := range tr.open {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}
