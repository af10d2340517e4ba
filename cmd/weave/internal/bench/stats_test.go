package bench

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/weavejobs/weave/cmd/weave/internal/sim"
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

func TestShareStats(t *testing.T) {
	t.Parallel()
	// Group 0 runs two jobs at a time and group 1 one, from 0 to 100 ms; group 1 starts at 0 and
	// its last job at 100, group 0 its last at 90: the window is [9, 90].
	run := func(g int, start, end float64) sim.Run { return sim.Run{Group: g, Start: ms2(start), End: ms2(end)} }
	var runs []sim.Run
	for s := 0.0; s < 100; s += 10 {
		runs = append(runs, run(0, s, s+10), run(0, s, s+10))
	}
	for s := 0.0; s <= 100; s += 10 {
		runs = append(runs, run(1, s, s+10))
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
	if _, ok := shareStats([]sim.Run{run(0, 0, 1), run(1, 2, 3)}, 2); ok {
		t.Error("a window with groups that never ran together")
	}
}
