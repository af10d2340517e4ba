package spreader_test

import (
	"fmt"
	"iter"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/weavejobs/weave/spreader"
)

// seqs turns [][]string into the iterator form Spread takes.
func seqs(groups ...[]string) iter.Seq[iter.Seq[string]] {
	return func(yield func(iter.Seq[string]) bool) {
		for _, g := range groups {
			if !yield(slices.Values(g)) {
				return
			}
		}
	}
}

func TestSpread(t *testing.T) {
	t.Parallel()
	x := []string{"x1", "x2"}
	y := []string{"y1", "y2", "y3"}
	z := []string{"z1"}
	tests := []struct {
		name    string
		groups  [][]string
		feeders int
		want    string
	}{
		{"worked example", [][]string{x, y, z}, 2, "x1 y1 x2 y2 z1 y3"},
		{"one feeder concatenates", [][]string{x, y, z}, 1, "x1 x2 y1 y2 y3 z1"},
		{"zero feeders count as one", [][]string{x, y, z}, 0, "x1 x2 y1 y2 y3 z1"},
		{"negative feeders count as one", [][]string{x, y, z}, -3, "x1 x2 y1 y2 y3 z1"},
		{"a feeder per group", [][]string{x, y, z}, 3, "x1 y1 z1 x2 y2 y3"},
		{"more feeders than groups", [][]string{x, y, z}, 10, "x1 y1 z1 x2 y2 y3"},
		{"empty groups are skipped", [][]string{{}, x, {}, {}, y, {}, z, {}}, 2, "x1 y1 x2 y2 z1 y3"},
		{"a feeder skips several empty groups in one turn", [][]string{z, x, {}, {}, y}, 2, "z1 x1 y1 x2 y2 y3"},
		{"only empty groups", [][]string{{}, {}}, 2, ""},
		{"no groups", nil, 2, ""},
		{"no groups, one feeder", nil, 1, ""},
		// Feeder 0 runs dry first; feeder 1 takes the next group in the same
		// round in which it runs dry, not feeder 0.
		{"groups go to whichever feeder runs dry first", [][]string{{"a1", "a2", "a3"}, {"b1"}, {"c1"}, {"d1"}}, 2, "a1 b1 a2 c1 a3 d1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := strings.Join(slices.Collect(spreader.Spread(seqs(tt.groups...), tt.feeders)), " ")
			if got != tt.want {
				t.Errorf("Spread(feeders=%d) = %q, want %q", tt.feeders, got, tt.want)
			}
		})
	}
}

// TestSpreadTrace is the property test against the naive model. For random
// groups, feeders and stopping points it requires the same trace, event for
// event. That checks the output, when each group and job is pulled, and that
// every pulled iterator is released after an early stop.
func TestSpreadTrace(t *testing.T) {
	t.Parallel()
	for seed := range uint64(2000) {
		rng := rand.New(rand.NewPCG(seed, 2))
		sizes := make([]int, rng.IntN(12))
		total := 0
		for i := range sizes {
			sizes[i] = rng.IntN(5) // zero included: empty groups
			total += sizes[i]
		}
		feeders := rng.IntN(7) - 1 // -1 and 0 included
		stopAfter := 0             // 0: run to the end
		if total > 0 && rng.IntN(2) == 0 {
			stopAfter = 1 + rng.IntN(total)
		}

		want, wantOut := modelSpread(sizes, feeders, stopAfter)
		rec := &recorder{}
		var out []string
		for job := range spreader.Spread(rec.source(sizes, false), feeders) {
			rec.trace = append(rec.trace, "yield "+job)
			out = append(out, job)
			if len(out) == stopAfter {
				break
			}
		}

		desc := fmt.Sprintf("seed %d: sizes %v, feeders %d, stop after %d", seed, sizes, feeders, stopAfter)
		if !slices.Equal(out, wantOut) {
			t.Fatalf("%s: jobs\n got %v\nwant %v", desc, out, wantOut)
		}
		if len(rec.trace) < len(want) || !slices.Equal(rec.trace[:len(want)], want) {
			t.Fatalf("%s: trace\n got %q\nwant %q", desc, rec.trace, want)
		}
		// After a stop, only releases may follow, and every iterator must be
		// released.
		for _, ev := range rec.trace[len(want):] {
			if !strings.HasPrefix(ev, "end ") {
				t.Fatalf("%s: %q after the range stopped; trace %q", desc, ev, rec.trace)
			}
		}
		if rec.open != 0 {
			t.Fatalf("%s: %d iterators not released; trace %q", desc, rec.open, rec.trace)
		}
	}
}

// TestSpreadEndless runs Spread on an endless source of endless groups and
// stops it. Only the groups the feeders needed must have been pulled, and the
// source and every pulled group must have been stopped.
func TestSpreadEndless(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		feeders   int
		stopAfter int
		wantTaken int // groups pulled from the source
	}{
		{name: "one feeder", feeders: 1, stopAfter: 1000, wantTaken: 1},
		{name: "three feeders", feeders: 3, stopAfter: 1000, wantTaken: 3},
		{name: "stop in round one", feeders: 5, stopAfter: 2, wantTaken: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := &recorder{}
			n := 0
			for range spreader.Spread(rec.source([]int{-1}, true), tt.feeders) {
				if n++; n == tt.stopAfter {
					break
				}
			}
			taken, ended := 0, 0
			for _, ev := range rec.trace {
				switch {
				case strings.HasPrefix(ev, "take "):
					taken++
				case strings.HasPrefix(ev, "end g"):
					ended++
				}
			}
			if taken != tt.wantTaken || ended != tt.wantTaken {
				t.Errorf("pulled %d groups and stopped %d, want %d and %d", taken, ended, tt.wantTaken, tt.wantTaken)
			}
			if rec.open != 0 {
				t.Errorf("%d iterators not released", rec.open)
			}
			if !slices.Contains(rec.trace, "end source") {
				t.Error("source not stopped")
			}
		})
	}
}

// TestSpreadEndlessExact compares an endless run with the model on a long
// enough prefix of the same groups: the counts of pulls must match exactly.
func TestSpreadEndlessExact(t *testing.T) {
	t.Parallel()
	pattern := []int{0, 1, 2, 3, 0, 5}
	var sizes []int
	for range 100 {
		sizes = append(sizes, pattern...)
	}
	const stopAfter = 500
	want, _ := modelSpread(sizes, 4, stopAfter)

	rec := &recorder{}
	n := 0
	for job := range spreader.Spread(rec.source(pattern, true), 4) {
		rec.trace = append(rec.trace, "yield "+job)
		if n++; n == stopAfter {
			break
		}
	}
	if !slices.Equal(rec.trace[:len(want)], want) {
		t.Fatalf("trace differs from the model")
	}
	if rec.open != 0 {
		t.Errorf("%d iterators not released", rec.open)
	}
}

// TestSpreadPanic checks that a panic in a group reaches the caller, even from
// a group read on a feeder's coroutine, and that every other iterator is
// released.
func TestSpreadPanic(t *testing.T) {
	t.Parallel()
	for _, feeders := range []int{1, 2, 3} {
		t.Run(fmt.Sprint("feeders=", feeders), func(t *testing.T) {
			t.Parallel()
			rec := &recorder{}
			groups := func(yield func(iter.Seq[string]) bool) {
				for g := range rec.source([]int{3, 3}, false) {
					if !yield(g) {
						return
					}
				}
				yield(func(yield func(string) bool) {
					if yield("bad.0") {
						panic("boom")
					}
				})
			}
			got := func() (r any) {
				defer func() { r = recover() }()
				for range spreader.Spread(groups, feeders) {
				}
				return nil
			}()
			if got != "boom" {
				t.Fatalf("recovered %v, want boom", got)
			}
			if rec.open != 0 {
				t.Errorf("%d iterators not released", rec.open)
			}
		})
	}
}

// TestSpreadMemory checks that Spread buffers nothing: its allocations do not
// grow with the number of jobs per group.
//
// Not parallel: testing.AllocsPerRun refuses to run in a parallel test.
func TestSpreadMemory(t *testing.T) {
	for _, feeders := range []int{1, 4, 1000} {
		allocs := func(size int) float64 {
			groups := make([]iter.Seq[int], 20)
			for i := range groups {
				groups[i] = slices.Values(make([]int, size))
			}
			return testing.AllocsPerRun(5, func() {
				for range spreader.Spread(slices.Values(groups), feeders) {
				}
			})
		}
		small, large := allocs(10), allocs(10_000)
		if small != large {
			t.Errorf("feeders=%d: %v allocations with 10 jobs per group, %v with 10,000", feeders, small, large)
		}
		t.Logf("feeders=%d: %v allocations for 20 groups", feeders, small)
	}
}
