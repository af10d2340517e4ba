package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/worker"
)

// AffinityConfig configures the affinity scenario. Zero fields take the defaults.
type AffinityConfig struct {
	Workers int `json:"workers"` // workers, each in a pool of its own; default 4
	Slots   int `json:"slots"`   // slots per worker; default 2
	Sites   int `json:"sites"`   // resources the jobs prefer, held by no worker; default 16
	Jobs    int `json:"jobs"`    // jobs per site; default 50
}

func (c *AffinityConfig) defaults() error {
	setDefault(&c.Workers, 4)
	setDefault(&c.Slots, 2)
	setDefault(&c.Sites, 16)
	setDefault(&c.Jobs, 50)
	if c.Workers < 2 || c.Slots < 1 || c.Sites < 1 || c.Jobs < 2 {
		return fmt.Errorf("affinity: need at least 2 workers, 1 slot, 1 site and 2 jobs per site")
	}
	return nil
}

// AffinityRun is one fleet's run.
type AffinityRun struct {
	Learning bool    `json:"learning"`
	Jobs     int     `json:"jobs"`
	WarmHits int     `json:"warm_hits"` // jobs that ran on the worker that ran their site's previous job
	HitRate  float64 `json:"hit_rate"`
}

// AffinityResult is what the affinity scenario measured.
type AffinityResult struct {
	Config AffinityConfig `json:"config"`
	Runs   []AffinityRun  `json:"runs"`
	Checks []Check        `json:"checks"`
}

// Scenario implements Result.
func (r *AffinityResult) Scenario() string { return "affinity" }

// RunAffinity runs jobs preferring resources no worker holds (sites whose data a worker caches
// once it ran one of their jobs) on a fleet of workers in pools of their own, with learned
// affinity and without, each on its own deployment, and counts the warm hits: jobs that ran on
// the worker that ran the previous job of their site.
func RunAffinity(ctx context.Context, env *Env, cfg AffinityConfig) (*AffinityResult, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	res := &AffinityResult{Config: cfg}
	for _, learning := range []bool{false, true} {
		run, err := affinityRun(ctx, env, cfg, learning)
		if err != nil {
			return nil, err
		}
		res.Runs = append(res.Runs, *run)
	}
	off, on := res.Runs[0], res.Runs[1]
	res.Checks = []Check{
		atLeast("warm hits with learned affinity, as a multiple of those without", on.HitRate/max(off.HitRate, 1e-9), 1.3, "%.2f×"),
	}
	return res, nil
}

func affinityRun(ctx context.Context, env *Env, cfg AffinityConfig, learning bool) (run *AffinityRun, err error) {
	d, err := env.deploy(ctx, "affinity")
	if err != nil {
		return nil, err
	}
	defer d.closeInto(&err)
	ccfg := coordinator.Config{LearnAffinity: -1}
	if learning {
		ccfg.LearnAffinity = time.Minute
	}
	if err := d.Coordinator(ccfg); err != nil {
		return nil, err
	}
	disp, err := d.Dispatcher()
	if err != nil {
		return nil, err
	}
	var (
		mu   sync.Mutex
		last = map[string]string{} // site → worker that ran its latest job
		hits int
	)
	for w := range cfg.Workers {
		id := fmt.Sprint("w", w)
		_, _, err := d.Worker(worker.Config{ID: id, Concurrency: cfg.Slots, Resources: []string{id}}, func(ctx context.Context, j *worker.Job) ([]byte, error) {
			site := string(j.Payload)
			mu.Lock()
			if last[site] == id {
				hits++
			}
			last[site] = id
			mu.Unlock()
			select {
			case <-time.After(2 * time.Millisecond):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return nil, nil
		})
		if err != nil {
			return nil, err
		}
	}
	env.progressf("affinity: learning %v: %d sites × %d jobs on %d workers", learning, cfg.Sites, cfg.Jobs, cfg.Workers)
	var hs []*dispatcher.Handle
	for s := range cfg.Sites {
		site := fmt.Sprint("site-", s)
		h, err := disp.Publish(ctx, site, func(yield func(dispatcher.Job) bool) {
			for range cfg.Jobs {
				if !yield(dispatcher.Job{Payload: []byte(site), Prefer: []string{site}}) {
					return
				}
			}
		})
		if err != nil {
			return nil, err
		}
		hs = append(hs, h)
	}
	for _, h := range hs {
		if _, err := h.WaitSummary(ctx); err != nil {
			return nil, err
		}
	}
	mu.Lock()
	defer mu.Unlock()
	n := cfg.Sites * cfg.Jobs
	return &AffinityRun{Learning: learning, Jobs: n, WarmHits: hits, HitRate: float64(hits) / float64(n-cfg.Sites)}, nil
}

// Section implements Result.
func (r *AffinityResult) Section() Section {
	c := r.Config
	t := Table{Header: []string{"fleet", "jobs", "warm hits", "hit rate"}}
	for _, run := range r.Runs {
		name := "without learned affinity"
		if run.Learning {
			name = "with learned affinity (1m)"
		}
		t.Rows = append(t.Rows, []string{name, count(run.Jobs), count(run.WarmHits), fmt.Sprintf("%.1f%%", 100*run.HitRate)})
	}
	return Section{
		Scenario: r.Scenario(),
		Setup: fmt.Sprintf("%d workers × %d slots, each in a pool of its own; %d groups (sites) of %d 2 ms jobs, each job preferring its site, which no worker holds; one run without learned affinity, one with, each on its own deployment.",
			c.Workers, c.Slots, c.Sites, c.Jobs),
		Tables: []Table{t},
		Notes:  []string{"Warm hit: the job ran on the worker that ran the previous job of its site (whose data it would have cached); the rate is over the jobs after each site's first."},
		Checks: r.Checks,
	}
}
