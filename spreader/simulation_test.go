package spreader_test

import (
	"container/heap"
	"math"
	"testing"
	"time"

	"github.com/weavejobs/weave/spreader"
)

// This file holds a discrete-event simulation of workers served by a
// Scheduler, in simulated time, to measure how many workers each group holds.

// finish is a simulated event: a job of group ends at time at.
type finish struct {
	at    time.Duration
	group string
	seq   int // breaks ties in the order jobs started
}

type finishQueue []finish

func (q finishQueue) Len() int { return len(q) }
func (q finishQueue) Less(i, j int) bool {
	return q[i].at < q[j].at || q[i].at == q[j].at && q[i].seq < q[j].seq
}
func (q finishQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *finishQueue) Push(x any)   { *q = append(*q, x.(finish)) }
func (q *finishQueue) Pop() any {
	old := *q
	f := old[len(old)-1]
	*q = old[:len(old)-1]
	return f
}

// simulation describes one run: workers, each group's task duration and job
// count, and the window over which in-flight counts are averaged.
type simulation struct {
	workers  int
	feeders  int
	policy   spreader.Policy
	groups   []string
	duration map[string]time.Duration
	jobs     int
	from, to time.Duration
}

// run simulates the workers. A free worker takes Next at once, and a task calls
// Done when its duration has passed. run returns each group's in-flight count,
// as the scheduler reports it, averaged over time within the window.
func (sim simulation) run(t *testing.T) map[string]float64 {
	t.Helper()
	s, err := spreader.NewScheduler[string, int](spreader.Config{Feeders: sim.feeders, Policy: sim.policy})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range sim.groups {
		must(t, s.AddGroup(g))
		must(t, s.Push(g, make([]int, sim.jobs)...))
		must(t, s.Seal(g))
	}

	var (
		now      time.Duration
		free     = sim.workers
		events   finishQueue
		seq      int
		integral = map[string]float64{} // in-flight × milliseconds within the window
	)
	startFree := func() {
		for ; free > 0; free-- {
			g, _, ok := s.Next()
			if !ok {
				return
			}
			heap.Push(&events, finish{at: now + sim.duration[g], group: g, seq: seq})
			seq++
		}
	}
	startFree()
	for now < sim.to && events.Len() > 0 {
		ev := heap.Pop(&events).(finish)
		// In-flight counts are constant between events.
		if lo, hi := max(now, sim.from), min(ev.at, sim.to); hi > lo {
			for _, g := range sim.groups {
				integral[g] += float64(s.InFlight(g)) * float64(hi-lo) / float64(time.Millisecond)
			}
		}
		now = ev.at
		s.Done(ev.group)
		free++
		startFree()
	}
	for _, g := range sim.groups {
		if s.Queued(g) == 0 {
			t.Fatalf("group %s ran out of jobs inside the window; the averages would be skewed", g)
		}
		integral[g] /= float64(sim.to-sim.from) / float64(time.Millisecond)
	}
	return integral
}

// TestFairness is the reference case of the least-in-flight policy: 6 workers,
// and groups A, B and C with 10 ms, 5 ms and 1 ms tasks, all active throughout.
// Round robin releases equally, so by Little's law each group holds workers in
// proportion to its task duration: 6 × 10/16, 6 × 5/16, 6 × 1/16 = 3.75, 1.875
// and 0.375. Least in-flight gives each 6 / 3 = 2. Three feeders, one per
// group, keep all three active.
func TestFairness(t *testing.T) {
	t.Parallel()
	tests := []struct {
		policy spreader.Policy
		want   map[string]float64
	}{
		{spreader.RoundRobin, map[string]float64{"A": 3.75, "B": 1.875, "C": 0.375}},
		{spreader.LeastInFlight, map[string]float64{"A": 2, "B": 2, "C": 2}},
	}
	for _, tt := range tests {
		t.Run(tt.policy.String(), func(t *testing.T) {
			t.Parallel()
			got := simulation{
				workers: 6,
				feeders: 3,
				policy:  tt.policy,
				groups:  []string{"A", "B", "C"},
				duration: map[string]time.Duration{
					"A": 10 * time.Millisecond,
					"B": 5 * time.Millisecond,
					"C": 1 * time.Millisecond,
				},
				jobs: 10_000,
				from: 100 * time.Millisecond, // past the start-up transient
				to:   1100 * time.Millisecond,
			}.run(t)
			for g, want := range tt.want {
				if math.Abs(got[g]-want) > 0.05*want {
					t.Errorf("group %s holds %.3f workers on average, want %.3f ± 5%%", g, got[g], want)
				}
			}
			t.Logf("%v: average in flight A %.3f, B %.3f, C %.3f", tt.policy, got["A"], got["B"], got["C"])
		})
	}
}
