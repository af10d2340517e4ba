package bench

import (
	"container/heap"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/weavejobs/weave/cmd/weave/internal/sim"
	"github.com/weavejobs/weave/spreader"
)

// simGroup is one group of the ideal scheduler simulation: jobs of equal duration.
type simGroup struct {
	jobs int
	dur  time.Duration
}

// simulateScheduler runs the groups on slots workers through a spreader.Scheduler with the given
// policy and feeders, in simulated time with no overhead: a free worker takes Next at once and a
// job calls Done when its duration has passed. It returns every job's run. This is what the
// coordinator would do with zero round-trip time, the reference its measurements are compared to.
func simulateScheduler(policy spreader.Policy, slots, feeders int, groups []simGroup) ([]sim.Run, error) {
	s, err := spreader.NewScheduler[int, struct{}](spreader.Config{Feeders: feeders, Policy: policy})
	if err != nil {
		return nil, err
	}
	for g, sg := range groups {
		if err := s.AddGroup(g); err != nil {
			return nil, err
		}
		if err := s.Push(g, make([]struct{}, sg.jobs)...); err != nil {
			return nil, err
		}
		if err := s.Seal(g); err != nil {
			return nil, err
		}
	}
	var (
		now  time.Duration
		free = slots
		ends endQueue
		runs []sim.Run
	)
	for {
		for ; free > 0; free-- {
			g, _, ok := s.Next()
			if !ok {
				break
			}
			runs = append(runs, sim.Run{Group: g, Start: now, End: now + groups[g].dur})
			heap.Push(&ends, simEnd{at: now + groups[g].dur, group: g, seq: len(runs)})
		}
		if ends.Len() == 0 {
			return runs, nil
		}
		e := heap.Pop(&ends).(simEnd)
		now = e.at
		s.Done(e.group)
		free++
	}
}

type simEnd struct {
	at    time.Duration
	group int
	seq   int // ties end in start order
}

type endQueue []simEnd

func (q endQueue) Len() int { return len(q) }
func (q endQueue) Less(i, j int) bool {
	return q[i].at < q[j].at || q[i].at == q[j].at && q[i].seq < q[j].seq
}
func (q endQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *endQueue) Push(x any)   { *q = append(*q, x.(simEnd)) }
func (q *endQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

// logUniformSizes splits total jobs into groups of log-uniformly varying sizes (1 to ~1000
// before scaling), the same for every call with the same arguments: the throughput workload, as
// in the integration benchmarks. Every group gets at least one job; the largest absorbs rounding.
func logUniformSizes(total, groups int) []int {
	r := rand.New(rand.NewPCG(1, 2))
	w := make([]float64, groups)
	for i := range w {
		w[i] = math.Exp(r.Float64() * math.Log(1000))
	}
	return scaleSizes(w, total)
}

// zipfSizes splits total jobs into groups whose sizes follow Zipf's law with exponent s: the
// group of rank k gets a share proportional to 1/k^s. Every group gets at least one job; the
// largest absorbs rounding. Sizes are in rank order, largest first.
func zipfSizes(total, groups int, s float64) []int {
	w := make([]float64, groups)
	for k := range w {
		w[k] = 1 / math.Pow(float64(k+1), s)
	}
	return scaleSizes(w, total)
}

func scaleSizes(w []float64, total int) []int {
	sum := 0.0
	for _, x := range w {
		sum += x
	}
	sizes := make([]int, len(w))
	acc := 0
	for i, x := range w {
		sizes[i] = max(1, int(x/sum*float64(total)))
		acc += sizes[i]
	}
	if len(sizes) > 0 {
		big := slices.Index(sizes, slices.Max(sizes))
		sizes[big] = max(1, sizes[big]+total-acc)
	}
	return sizes
}
