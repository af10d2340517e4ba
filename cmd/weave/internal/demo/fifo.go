package demo

import (
	"time"

	"github.com/weavejobs/weave/cmd/weave/internal/sim"
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

// simulateFIFO replays what a plain FIFO queue would do with the jobs (sim.FIFO): slots workers
// each take the next job in publish order as soon as they are free, each job taking its latency,
// with no queueing overhead. Groups are site ranks. crowded is the number of sites with unstarted
// jobs from which a start counts as crowded (see siteConcurrency.CrowdedPeak).
func simulateFIFO(jobs []sim.Job, sites, slots, crowded int) fifoResult {
	res := fifoResult{Sites: make([]siteConcurrency, sites)}
	runs := sim.FIFO(jobs, slots)
	c := sim.Measure(runs, sites, crowded)
	first := make([]time.Duration, sites)
	last := make([]time.Duration, sites)
	started := make([]bool, sites)
	for _, r := range runs {
		s := &res.Sites[r.Group]
		s.Busy += r.End - r.Start
		if !started[r.Group] {
			started[r.Group], first[r.Group] = true, r.Start
		}
		last[r.Group] = max(last[r.Group], r.End)
		res.Makespan = max(res.Makespan, r.End)
	}
	for i := range res.Sites {
		res.Sites[i].Peak, res.Sites[i].CrowdedPeak = c.Peaks[i], c.CrowdedPeaks[i]
		res.Sites[i].Span = last[i] - first[i]
	}
	return res
}
