package demo

import (
	"container/heap"
	"time"
)

// siteConcurrency is how one site was crawled: how many of its pages were fetched at once.
type siteConcurrency struct {
	// Peak is the most pages of the site fetched at the same time.
	Peak int
	// CrowdedPeak is Peak counting only fetches that started while at least as many sites as
	// there are feeder slots (worker slots + 1) still had pages never fetched: while other sites
	// were waiting, so that one site holding several slots was a choice, not the only option.
	CrowdedPeak int
	// Busy is the total fetch time, and Span the time from its first fetch's start to its last
	// fetch's end; Busy/Span is the average number of its pages in flight while it was crawled.
	Busy, Span time.Duration
}

// AvgInFlight is the time-averaged number of the site's pages in flight while it was crawled.
func (s siteConcurrency) AvgInFlight() float64 {
	if s.Span <= 0 {
		return 0
	}
	return float64(s.Busy) / float64(s.Span)
}

// fifoResult is the outcome of simulateFIFO.
type fifoResult struct {
	Sites    []siteConcurrency // by site rank
	Makespan time.Duration
}

// simulateFIFO replays what a plain FIFO queue would do with the jobs: slots workers each take
// the next job in publish order as soon as they are free, each job taking its latency, with no
// queueing overhead. crowded is the number of sites with unstarted jobs from which a start counts
// as crowded (see siteConcurrency.CrowdedPeak). The simulation is exact and deterministic: jobs
// start in publish order at non-decreasing times, and a job ending at time t frees its slot for a
// job starting at t.
func simulateFIFO(jobs []jobRef, sites, slots, crowded int) fifoResult {
	res := fifoResult{Sites: make([]siteConcurrency, sites)}
	if slots < 1 || len(jobs) == 0 {
		return res
	}
	unstarted := make([]int, sites)
	waiting := 0 // sites with unstarted jobs
	for _, j := range jobs {
		if unstarted[j.Site] == 0 {
			waiting++
		}
		unstarted[j.Site]++
	}
	running := make([]int, sites)
	first := make([]time.Duration, sites)
	last := make([]time.Duration, sites)
	started := make([]bool, sites)
	var ends endHeap
	var now time.Duration
	for _, j := range jobs {
		if len(ends) == slots {
			now = max(now, ends[0].at)
		}
		for len(ends) > 0 && ends[0].at <= now {
			e := heap.Pop(&ends).(end)
			running[e.site]--
		}
		s := &res.Sites[j.Site]
		running[j.Site]++
		s.Peak = max(s.Peak, running[j.Site])
		if waiting >= crowded {
			s.CrowdedPeak = max(s.CrowdedPeak, running[j.Site])
		}
		if unstarted[j.Site]--; unstarted[j.Site] == 0 {
			waiting--
		}
		if !started[j.Site] {
			started[j.Site], first[j.Site] = true, now
		}
		done := now + j.Latency
		last[j.Site] = max(last[j.Site], done)
		res.Makespan = max(res.Makespan, done)
		s.Busy += j.Latency
		heap.Push(&ends, end{at: done, site: j.Site})
	}
	for i := range res.Sites {
		res.Sites[i].Span = last[i] - first[i]
	}
	return res
}

// end is a running job's end time; endHeap orders them earliest first.
type end struct {
	at   time.Duration
	site int
}

type endHeap []end

func (h endHeap) Len() int           { return len(h) }
func (h endHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h endHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *endHeap) Push(x any)        { *h = append(*h, x.(end)) }
func (h *endHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
