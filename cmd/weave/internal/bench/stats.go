package bench

import (
	"cmp"
	"context"
	"math"
	"slices"
	"sync"
	"time"
)

// percentile returns the p-th percentile (0 < p ≤ 100) of sorted, by the nearest-rank method: the
// smallest value such that at least p% of the values are less than or equal to it. p = 100 is the
// maximum. It returns the zero value for an empty slice.
func percentile[T cmp.Ordered](sorted []T, p float64) T {
	var zero T
	if len(sorted) == 0 {
		return zero
	}
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[min(len(sorted)-1, max(0, i))]
}

// Quantiles summarizes a sample of durations. JSON carries milliseconds.
type Quantiles struct {
	N   int     `json:"n"`
	P10 float64 `json:"p10_ms"`
	P50 float64 `json:"p50_ms"`
	P90 float64 `json:"p90_ms"`
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
}

// summarize returns the quantiles of ds, which it does not modify.
func summarize(ds []time.Duration) Quantiles {
	s := slices.Clone(ds)
	slices.Sort(s)
	return Quantiles{
		N:   len(s),
		P10: ms(percentile(s, 10)),
		P50: ms(percentile(s, 50)),
		P90: ms(percentile(s, 90)),
		P99: ms(percentile(s, 99)),
		Max: ms(percentile(s, 100)),
	}
}

// ms converts a duration to float milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// interval is one job's run: its group (an index), and when its handler started and returned,
// relative to a common origin.
type interval struct {
	group      int
	start, end time.Duration
}

// runLog records when handlers ran, from any number of goroutines.
type runLog struct {
	t0   time.Time
	mu   sync.Mutex
	runs []interval
}

func newRunLog() *runLog { return &runLog{t0: time.Now()} }

// work holds a handler for d, or until ctx is done, and records the interval under group g.
func (l *runLog) work(ctx context.Context, g int, d time.Duration) error {
	start := time.Now()
	t := time.NewTimer(d)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
		return ctx.Err()
	}
	end := time.Now()
	l.mu.Lock()
	l.runs = append(l.runs, interval{group: g, start: start.Sub(l.t0), end: end.Sub(l.t0)})
	l.mu.Unlock()
	return nil
}

// intervals returns what was recorded so far.
func (l *runLog) intervals() []interval {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.runs)
}

// concurrency is what concurrencyStats measures of one set of runs.
type concurrency struct {
	// Peaks holds each group's peak: the most of its jobs running at once.
	Peaks []int
	// CrowdedStarts counts the starts made while at least `crowded` groups (the starting one
	// included) still had jobs never started; CrowdedOverlaps those of them that found another
	// job of their group running.
	CrowdedStarts, CrowdedOverlaps int
	// Gaps are the times between consecutive starts of the same group, all groups pooled.
	Gaps []time.Duration
	// Makespan is the time from the first start to the last end.
	Makespan time.Duration
}

// concurrencyStats sweeps the runs in time order: a run that ends at t frees its place before a
// run starting at t begins, and runs starting at the same time begin in slice order. groups is
// the number of groups (indexes 0..groups-1); crowded is the number of waiting groups from which
// a start counts as crowded (0: every start does).
func concurrencyStats(runs []interval, groups, crowded int) concurrency {
	c := concurrency{Peaks: make([]int, groups)}
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
	first, last := runs[0].start, runs[0].end
	for i, r := range runs {
		events = append(events, event{r.start, false, i}, event{r.end, true, i})
		unstarted[r.group]++
		first, last = min(first, r.start), max(last, r.end)
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
		g := runs[ev.order].group
		if ev.end {
			running[g]--
			continue
		}
		if waiting >= crowded {
			c.CrowdedStarts++
			if running[g] > 0 {
				c.CrowdedOverlaps++
			}
		}
		running[g]++
		c.Peaks[g] = max(c.Peaks[g], running[g])
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

// groupShares is what shareStats measures of one set of runs.
type groupShares struct {
	// From and To bound the window over which InFlight is averaged, relative to the first start.
	From, To time.Duration
	// InFlight is each group's average number of running jobs over the window.
	InFlight []float64
	// Completion is each group's last end, relative to the first start of any group.
	Completion []time.Duration
}

// shareStats measures how the groups shared the slots while all of them were active. The window
// runs from the time every group has started plus a tenth of the window (past the start-up
// transient), to the first time a group starts its last job (after which it runs out of work and
// its share must fall). It returns ok = false when that window is empty.
func shareStats(runs []interval, groups int) (s groupShares, ok bool) {
	s.InFlight = make([]float64, groups)
	s.Completion = make([]time.Duration, groups)
	if len(runs) == 0 || groups == 0 {
		return s, false
	}
	origin := runs[0].start
	for _, r := range runs {
		origin = min(origin, r.start)
	}
	firstStart := make([]time.Duration, groups)
	lastStart := make([]time.Duration, groups)
	seen := make([]bool, groups)
	for _, r := range runs {
		g := r.group
		if !seen[g] {
			seen[g], firstStart[g], lastStart[g] = true, r.start, r.start
		}
		firstStart[g] = min(firstStart[g], r.start)
		lastStart[g] = max(lastStart[g], r.start)
		s.Completion[g] = max(s.Completion[g], r.end-origin)
	}
	if slices.Contains(seen, false) {
		return s, false
	}
	allStarted, firstDry := slices.Max(firstStart), slices.Min(lastStart)
	if firstDry <= allStarted {
		return s, false
	}
	from := allStarted + (firstDry-allStarted)/10
	to := firstDry
	for _, r := range runs {
		if lo, hi := max(r.start, from), min(r.end, to); hi > lo {
			s.InFlight[r.group] += float64(hi - lo)
		}
	}
	for g := range s.InFlight {
		s.InFlight[g] /= float64(to - from)
	}
	s.From, s.To = from-origin, to-origin
	return s, true
}
