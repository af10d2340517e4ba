package demo

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/weavejobs/weave/cmd/weave/internal/sim"
)

// The demo's workload is a web crawl: each site is a group, each page a job. Site sizes follow a
// Zipf-like law, so one site is huge, a few are large and most are small; a site must not be
// hammered. Everything here is pure and deterministic for a seed.

// affinity says how a site's pages relate to a region.
type affinity int

const (
	anyRegion     affinity = iota // no region
	preferRegion                  // crawl from the region when a worker there is free
	requireRegion                 // only reachable from the region (geo-fenced)
)

func (a affinity) String() string {
	switch a {
	case preferRegion:
		return "prefer"
	case requireRegion:
		return "require"
	}
	return "any"
}

// page is one job: a URL path with its simulated fetch behavior.
type page struct {
	Path    string
	Latency time.Duration // time the simulated fetch takes, per attempt
	Flaky   int           // the first Flaky attempts fail transiently (HTTP 503)
}

// site is one group: its pages in publish order.
type site struct {
	Name     string
	Rank     int // 0 is the largest site
	Region   string
	Affinity affinity
	Pages    []page
}

// workload is the demo's input: sites in publish order.
type workload struct {
	Sites []site
	Jobs  int
}

// workloadConfig parameterizes generateWorkload.
type workloadConfig struct {
	Jobs, Sites int
	Seed        uint64
	// Regions are the regions sites may require or prefer: those some worker holds, so that
	// every job can run.
	Regions []string
	// FailRate is the share of pages whose first fetch fails; a fifth of those fail twice.
	FailRate float64
}

// Workload shape.
const (
	zipfExponent     = 1.8  // with 250 sites and 5,000 pages: sizes ≈ 2000, 590, 285, 170, ..., 5
	minPagesPerSite  = 5    // a site has at least this many pages, if Jobs allows
	maxRequiredPages = 50   // only small sites are geo-fenced, so one region's workers suffice
	requireShare     = 0.10 // of sites that are geo-fenced
	preferShare      = 0.30 // of sites better crawled from their region
	minLatency       = time.Millisecond
	maxLatency       = 4 * time.Millisecond
)

var errWorkload = errors.New("invalid workload")

// generateWorkload builds a crawl of cfg.Jobs pages over cfg.Sites sites. The same config always
// gives the same workload. The largest site is published first, the others in random order.
func generateWorkload(cfg workloadConfig) (*workload, error) {
	switch {
	case cfg.Sites < 1:
		return nil, fmt.Errorf("%w: %d sites, need at least 1", errWorkload, cfg.Sites)
	case cfg.Jobs < cfg.Sites:
		return nil, fmt.Errorf("%w: %d jobs for %d sites, need at least one page per site", errWorkload, cfg.Jobs, cfg.Sites)
	case cfg.FailRate < 0 || cfg.FailRate > 1:
		return nil, fmt.Errorf("%w: fail rate %v outside 0..1", errWorkload, cfg.FailRate)
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5eed_c4a31))
	sizes := siteSizes(cfg.Jobs, cfg.Sites, rng)
	w := &workload{Jobs: cfg.Jobs, Sites: make([]site, cfg.Sites)}
	width := len(fmt.Sprint(cfg.Sites - 1))
	for rank, n := range sizes {
		s := site{Name: fmt.Sprintf("site%0*d.example", max(width, 3), rank), Rank: rank, Pages: make([]page, n)}
		if len(cfg.Regions) > 0 {
			s.Region = cfg.Regions[rng.IntN(len(cfg.Regions))]
			switch u := rng.Float64(); {
			case u < requireShare && n <= maxRequiredPages:
				s.Affinity = requireRegion
			case u < requireShare+preferShare:
				s.Affinity = preferRegion
			}
		}
		for i := range s.Pages {
			p := &s.Pages[i]
			p.Path = "/"
			if i > 0 {
				p.Path = fmt.Sprintf("/page/%d", i)
			}
			p.Latency = minLatency + time.Duration(rng.Int64N(int64(maxLatency-minLatency)))
			switch u := rng.Float64(); {
			case u < cfg.FailRate/5:
				p.Flaky = 2
			case u < cfg.FailRate:
				p.Flaky = 1
			}
		}
		w.Sites[rank] = s
	}
	// Sites are discovered in no particular order; the crawl starts from the largest, which is
	// the worst case for a FIFO queue: everything else waits behind it.
	rest := w.Sites[1:]
	rng.Shuffle(len(rest), func(i, j int) { rest[i], rest[j] = rest[j], rest[i] })
	return w, nil
}

// siteSizes splits jobs over n sites, largest first: each site gets a floor of pages, and the
// rest is shared in proportion to Zipf weights 1/rank^s (jittered, except the largest), rounded
// by largest remainder so the sizes add up to jobs exactly.
func siteSizes(jobs, n int, rng *rand.Rand) []int {
	floor := min(minPagesPerSite, jobs/n)
	weights := make([]float64, n)
	var sum float64
	for k := range weights {
		w := 1 / math.Pow(float64(k+1), zipfExponent)
		if k > 0 {
			w *= 0.75 + 0.5*rng.Float64()
		}
		weights[k] = w
		sum += w
	}
	extra := jobs - floor*n
	sizes := make([]int, n)
	rem := make([]float64, n)
	given := 0
	for k, w := range weights {
		share := float64(extra) * w / sum
		sizes[k] = floor + int(share)
		rem[k] = share - math.Floor(share)
		given += int(share)
	}
	order := make([]int, n)
	for k := range order {
		order[k] = k
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case rem[a] > rem[b]:
			return -1
		case rem[a] < rem[b]:
			return 1
		}
		return 0
	})
	for _, k := range order[:extra-given] {
		sizes[k]++
	}
	slices.SortStableFunc(sizes, func(a, b int) int { return b - a })
	return sizes
}

// publishOrder lists the jobs in the order the demo publishes them, site by site, for the FIFO
// simulation: each job's group is its site's rank, its duration the page's latency.
func (w *workload) publishOrder() []sim.Job {
	jobs := make([]sim.Job, 0, w.Jobs)
	for _, s := range w.Sites {
		for _, p := range s.Pages {
			jobs = append(jobs, sim.Job{Group: s.Rank, Dur: p.Latency})
		}
	}
	return jobs
}

// byRank returns the sites indexed by rank (0 = largest).
func (w *workload) byRank() []*site {
	out := make([]*site, len(w.Sites))
	for i := range w.Sites {
		out[w.Sites[i].Rank] = &w.Sites[i]
	}
	return out
}
