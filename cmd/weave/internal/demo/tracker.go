package demo

import (
	"slices"
	"sync"
	"time"
)

// tracker measures the crawl from the handlers' side: which site's pages run when, where. It is
// shared by every handler goroutine of every worker, behind one mutex (a few hundred
// nanoseconds per fetch, against milliseconds of simulated latency).
type tracker struct {
	crowded int // see siteConcurrency.CrowdedPeak

	mu          sync.Mutex
	sites       []trackedSite // by rank
	waiting     int           // sites announced (published) with pages never started
	running     int           // fetches running, all sites
	activeSites int           // sites with a fetch running
	done        int           // pages fetched successfully
	attempts    int           // fetches started
	failed      int           // fetches that failed (and were retried)
	affinity    affinityStats
}

type trackedSite struct {
	siteConcurrency
	aff         affinity
	region      string
	running     int
	unstarted   int
	first, last time.Time
	starts      []time.Time // every fetch's start, for the politeness check
	started     bool
	announced   bool
	done        int
}

// affinityStats checks routing from the handlers' side.
type affinityStats struct {
	Required, RequiredElsewhere int // fetches of geo-fenced sites, and those run outside the region (must be 0)
	Preferred, PreferredHome    int // fetches of sites preferring a region, and those run in it
}

func newTracker(w *workload, crowded int) *tracker {
	t := &tracker{crowded: crowded, sites: make([]trackedSite, len(w.Sites))}
	for _, s := range w.Sites {
		t.sites[s.Rank] = trackedSite{aff: s.Affinity, region: s.Region, unstarted: len(s.Pages)}
	}
	return t
}

// announce records that the site is published: its pages not started yet count as waiting
// from now on. Until then the coordinator may not know the site, so it does not count.
func (t *tracker) announce(rank int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := &t.sites[rank]; !s.announced && s.unstarted > 0 {
		s.announced = true
		t.waiting++
	}
}

// start records that a fetch of a page of site rank began, as attempt attempt, on a worker
// holding regions. It returns the start time to pass to finish.
func (t *tracker) start(rank, attempt int, regions []string) time.Time {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	s := &t.sites[rank]
	if s.running == 0 {
		t.activeSites++
	}
	s.running++
	t.running++
	t.attempts++
	s.starts = append(s.starts, now)
	s.Peak = max(s.Peak, s.running)
	if t.waiting >= t.crowded {
		s.CrowdedPeak = max(s.CrowdedPeak, s.running)
	}
	if attempt == 1 && s.unstarted > 0 {
		if s.unstarted--; s.unstarted == 0 && s.announced {
			t.waiting--
		}
	}
	if !s.started {
		s.started, s.first = true, now
	}
	home := slices.Contains(regions, s.region)
	switch s.aff {
	case requireRegion:
		t.affinity.Required++
		if !home {
			t.affinity.RequiredElsewhere++
		}
	case preferRegion:
		t.affinity.Preferred++
		if home {
			t.affinity.PreferredHome++
		}
	}
	return now
}

// finish records the end of a fetch started at began.
func (t *tracker) finish(rank int, began time.Time, ok bool) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	s := &t.sites[rank]
	s.running--
	t.running--
	if s.running == 0 {
		t.activeSites--
	}
	s.Busy += now.Sub(began)
	if now.After(s.last) {
		s.last = now
	}
	if ok {
		s.done++
		t.done++
	} else {
		t.failed++
	}
}

// progress is a snapshot for the live progress line.
type progress struct {
	Done, Running, ActiveSites, Retries int
}

func (t *tracker) progress() progress {
	t.mu.Lock()
	defer t.mu.Unlock()
	return progress{Done: t.done, Running: t.running, ActiveSites: t.activeSites, Retries: t.failed}
}

// trackerResult is what the tracker measured, once the crawl is over.
type trackerResult struct {
	Sites []siteConcurrency // by rank
	// MostPerSecond is the most fetches of one site that started within one second.
	MostPerSecond     int
	Done              int
	Attempts, Retries int
	Affinity          affinityStats
}

func (t *tracker) result() trackerResult {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := trackerResult{Sites: make([]siteConcurrency, len(t.sites)), Done: t.done, Attempts: t.attempts, Retries: t.failed, Affinity: t.affinity}
	for i, s := range t.sites {
		r.Sites[i] = s.siteConcurrency
		if s.started {
			r.Sites[i].Span = s.last.Sub(s.first)
		}
		r.MostPerSecond = max(r.MostPerSecond, mostWithin(s.starts, time.Second))
	}
	return r
}

// mostWithin is the most of the times (in order) that fall within one window of length d.
func mostWithin(times []time.Time, d time.Duration) int {
	most, i := 0, 0
	for j := range times {
		for times[j].Sub(times[i]) >= d {
			i++
		}
		most = max(most, j-i+1)
	}
	return most
}
