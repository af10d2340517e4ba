package bench

import (
	"cmp"
	"context"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/weavejobs/weave/cmd/weave/internal/sim"
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

// runLog records when handlers ran, from any number of goroutines.
type runLog struct {
	t0   time.Time
	mu   sync.Mutex
	runs []sim.Run
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
	l.runs = append(l.runs, sim.Run{Group: g, Start: start.Sub(l.t0), End: end.Sub(l.t0)})
	l.mu.Unlock()
	return nil
}

// intervals returns what was recorded so far.
func (l *runLog) intervals() []sim.Run {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.runs)
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
func shareStats(runs []sim.Run, groups int) (s groupShares, ok bool) {
	s.InFlight = make([]float64, groups)
	s.Completion = make([]time.Duration, groups)
	if len(runs) == 0 || groups == 0 {
		return s, false
	}
	origin := runs[0].Start
	for _, r := range runs {
		origin = min(origin, r.Start)
	}
	firstStart := make([]time.Duration, groups)
	lastStart := make([]time.Duration, groups)
	seen := make([]bool, groups)
	for _, r := range runs {
		g := r.Group
		if !seen[g] {
			seen[g], firstStart[g], lastStart[g] = true, r.Start, r.Start
		}
		firstStart[g] = min(firstStart[g], r.Start)
		lastStart[g] = max(lastStart[g], r.Start)
		s.Completion[g] = max(s.Completion[g], r.End-origin)
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
		if lo, hi := max(r.Start, from), min(r.End, to); hi > lo {
			s.InFlight[r.Group] += float64(hi - lo)
		}
	}
	for g := range s.InFlight {
		s.InFlight[g] /= float64(to - from)
	}
	s.From, s.To = from-origin, to-origin
	return s, true
}
