package bench

import (
	"math"
	"slices"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	t.Parallel()
	if got := percentile([]int(nil), 50); got != 0 {
		t.Errorf("empty: %d", got)
	}
	one := []int{7}
	for _, p := range []float64{0.1, 50, 99, 100} {
		if got := percentile(one, p); got != 7 {
			t.Errorf("p%v of one value: %d", p, got)
		}
	}
	// 1..100: the nearest rank of p is p itself.
	var hundred []int
	for i := 1; i <= 100; i++ {
		hundred = append(hundred, i)
	}
	for _, p := range []float64{1, 10, 50, 90, 99, 100} {
		if got := percentile(hundred, p); got != int(p) {
			t.Errorf("p%v of 1..100: %d", p, got)
		}
	}
	// Nearest rank never interpolates: p50 of 1..4 is 2, p51 is 3, p99 of ten values is the max.
	four := []int{1, 2, 3, 4}
	if got := percentile(four, 50); got != 2 {
		t.Errorf("p50 of 1..4: %d", got)
	}
	if got := percentile(four, 51); got != 3 {
		t.Errorf("p51 of 1..4: %d", got)
	}
	if got := percentile(hundred[:10], 99); got != 10 {
		t.Errorf("p99 of 1..10: %d", got)
	}
}

func TestSummarize(t *testing.T) {
	t.Parallel()
	var ds []time.Duration
	for i := 100; i >= 1; i-- { // unsorted on purpose
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	orig := slices.Clone(ds)
	q := summarize(ds)
	want := Quantiles{N: 100, P10: 10, P50: 50, P90: 90, P99: 99, Max: 100}
	if q != want {
		t.Errorf("summarize = %+v, want %+v", q, want)
	}
	if !slices.Equal(ds, orig) {
		t.Error("summarize modified its input")
	}
	if q := summarize(nil); q != (Quantiles{}) {
		t.Errorf("summarize(nil) = %+v", q)
	}
}

func ms2(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

func TestConcurrencyStats(t *testing.T) {
	t.Parallel()
	// Group 0: three jobs, two overlapping; group 1: one job; group 2: two jobs back to back,
	// the second starting exactly when the first ends (not an overlap).
	runs := []interval{
		{0, ms2(0), ms2(10)},
		{0, ms2(5), ms2(15)},
		{1, ms2(6), ms2(8)},
		{2, ms2(7), ms2(9)},
		{2, ms2(9), ms2(12)},
		{0, ms2(20), ms2(21)},
	}
	c := concurrencyStats(runs, 3, 0)
	if !slices.Equal(c.Peaks, []int{2, 1, 1}) {
		t.Errorf("peaks %v, want [2 1 1]", c.Peaks)
	}
	if c.CrowdedStarts != 6 || c.CrowdedOverlaps != 1 {
		t.Errorf("crowded %d starts, %d overlaps; want 6 and 1", c.CrowdedStarts, c.CrowdedOverlaps)
	}
	gaps := slices.Clone(c.Gaps)
	slices.Sort(gaps)
	if want := []time.Duration{ms2(2), ms2(5), ms2(15)}; !slices.Equal(gaps, want) {
		t.Errorf("gaps %v, want %v", gaps, want)
	}
	if c.Makespan != ms2(21) {
		t.Errorf("makespan %v", c.Makespan)
	}

	// Crowded from 3 waiting groups: at 0 all three wait (crowded); at 5 group 0 still has a job
	// unstarted, and groups 1 and 2 too (crowded, the overlap); at 6 group 1 starts its only job
	// with 3 waiting (crowded); at 7 only groups 0 and 2 wait: not crowded from then on.
	c = concurrencyStats(runs, 3, 3)
	if c.CrowdedStarts != 3 || c.CrowdedOverlaps != 1 {
		t.Errorf("crowded from 3: %d starts, %d overlaps; want 3 and 1", c.CrowdedStarts, c.CrowdedOverlaps)
	}
	if c := concurrencyStats(nil, 2, 0); len(c.Peaks) != 2 || c.CrowdedStarts != 0 || c.Makespan != 0 {
		t.Errorf("no runs: %+v", c)
	}
}

func TestShareStats(t *testing.T) {
	t.Parallel()
	// Group 0 runs two jobs at a time and group 1 one, from 0 to 100 ms; group 1 starts at 0 and
	// its last job at 100, group 0 its last at 90: the window is [9, 90].
	var runs []interval
	for s := 0; s < 100; s += 10 {
		runs = append(runs, interval{0, ms2(float64(s)), ms2(float64(s + 10))}, interval{0, ms2(float64(s)), ms2(float64(s + 10))})
	}
	for s := 0; s <= 100; s += 10 {
		runs = append(runs, interval{1, ms2(float64(s)), ms2(float64(s + 10))})
	}
	s, ok := shareStats(runs, 2)
	if !ok {
		t.Fatal("no window")
	}
	if s.From != ms2(9) || s.To != ms2(90) {
		t.Errorf("window %v–%v, want 9ms–90ms", s.From, s.To)
	}
	if math.Abs(s.InFlight[0]-2) > 1e-9 || math.Abs(s.InFlight[1]-1) > 1e-9 {
		t.Errorf("in flight %v, want [2 1]", s.InFlight)
	}
	if s.Completion[0] != ms2(100) || s.Completion[1] != ms2(110) {
		t.Errorf("completion %v, want [100ms 110ms]", s.Completion)
	}
	// A group that never ran: no window.
	if _, ok := shareStats(runs, 3); ok {
		t.Error("a window with a group that never ran")
	}
	// One group finishing its starts before another begins: no window.
	if _, ok := shareStats([]interval{{0, 0, ms2(1)}, {1, ms2(2), ms2(3)}}, 2); ok {
		t.Error("a window with groups that never ran together")
	}
}
