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

// LimitsConfig configures the limits scenario. Zero fields take the defaults.
type LimitsConfig struct {
	Slots int `json:"slots"` // worker slots; default 16
	// Delayed is how many jobs are delayed, to times spread over DelaySpread from 1s after
	// they are published. Default 500 over 2s.
	Delayed     int           `json:"delayed"`
	DelaySpread time.Duration `json:"delay_spread_ns"`
	// Rate is the rate limit (starts per second) set on a resource a backlog of Backlog jobs
	// prefers, with Concurrency as its concurrency limit. Default 200/s, 4 at once, 1,000 jobs.
	Rate        int `json:"rate"`
	Concurrency int `json:"concurrency"`
	Backlog     int `json:"backlog"`
}

func (c *LimitsConfig) defaults() error {
	setDefault(&c.Slots, 16)
	setDefault(&c.Delayed, 500)
	setDefault(&c.DelaySpread, 2*time.Second)
	setDefault(&c.Rate, 200)
	setDefault(&c.Concurrency, 4)
	setDefault(&c.Backlog, 1000)
	if c.Slots < 1 || c.Delayed < 1 || c.Rate < 1 || c.Concurrency < 1 || c.Backlog < 10 {
		return fmt.Errorf("limits: need at least 1 slot, 1 delayed job, a rate and concurrency of 1, and 10 backlog jobs")
	}
	return nil
}

// LimitsResult is what the limits scenario measured.
type LimitsResult struct {
	Config LimitsConfig `json:"config"`
	// Late is how long after its time each delayed job's handler started.
	Late  Quantiles `json:"late"`
	Early int       `json:"early"` // delayed jobs that started before their time
	// AchievedRate is the rate-limited backlog's starts per second from its first start to its
	// last; PeakRunning the most of its jobs running at once.
	AchievedRate float64       `json:"achieved_rate"`
	PeakRunning  int           `json:"peak_running"`
	Drain        time.Duration `json:"drain_ns"`
	// OtherDone is how long the unlimited group, published after the backlog, took to finish.
	OtherDone time.Duration `json:"other_done_ns"`
	Checks    []Check       `json:"checks"`
}

// Scenario implements Result.
func (r *LimitsResult) Scenario() string { return "limits" }

// RunLimits measures delayed jobs and limits on one deployment: how late delayed jobs start
// after their time (no-op handlers, an idle worker), and the starts per second and concurrency
// a rate and concurrency limit on a resource allow a backlog of jobs preferring it, while an
// unlimited group published after the backlog runs beside it.
func RunLimits(ctx context.Context, env *Env, cfg LimitsConfig) (res *LimitsResult, err error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	d, err := env.deploy(ctx, "limits")
	if err != nil {
		return nil, err
	}
	defer d.closeInto(&err)
	if err := d.Coordinator(coordinator.Config{}); err != nil {
		return nil, err
	}
	disp, err := d.Dispatcher()
	if err != nil {
		return nil, err
	}
	var (
		mu             sync.Mutex
		started        = map[string]time.Time{}
		limitedStarts  []time.Time
		running, peak  int
		otherDone      time.Time
		otherRemaining = 100
	)
	_, _, err = d.Worker(worker.Config{ID: "w0", Concurrency: cfg.Slots}, func(ctx context.Context, j *worker.Job) ([]byte, error) {
		now := time.Now()
		mu.Lock()
		switch j.Group {
		case "delayed":
			started[j.Key] = now
		case "limited":
			limitedStarts = append(limitedStarts, now)
			running++
			peak = max(peak, running)
		}
		mu.Unlock()
		if j.Group == "limited" {
			select {
			case <-time.After(5 * time.Millisecond):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		mu.Lock()
		defer mu.Unlock()
		switch j.Group {
		case "limited":
			running--
		case "other":
			if otherRemaining--; otherRemaining == 0 {
				otherDone = time.Now()
			}
		}
		return nil, nil
	})
	if err != nil {
		return nil, err
	}

	// Delayed jobs: times spread over DelaySpread, starting a second from now.
	env.progressf("limits: %d delayed jobs over %v", cfg.Delayed, cfg.DelaySpread)
	base := time.Now().Add(time.Second)
	runAt := make(map[string]time.Time, cfg.Delayed)
	h, err := disp.Publish(ctx, "delayed", func(yield func(dispatcher.Job) bool) {
		for i := range cfg.Delayed {
			at := base.Add(cfg.DelaySpread * time.Duration(i) / time.Duration(cfg.Delayed)).Truncate(time.Millisecond)
			key := fmt.Sprint(i)
			runAt[key] = at
			if !yield(dispatcher.Job{Key: key, RunAt: at}) {
				return
			}
		}
	})
	if err != nil {
		return nil, err
	}
	if _, err := h.WaitSummary(ctx); err != nil {
		return nil, err
	}
	res = &LimitsResult{Config: cfg}
	var late []time.Duration
	mu.Lock()
	for key, at := range runAt {
		s, ok := started[key]
		switch {
		case !ok:
			mu.Unlock()
			return nil, fmt.Errorf("delayed job %s did not run", key)
		case s.Before(at):
			res.Early++
		default:
			late = append(late, s.Sub(at))
		}
	}
	mu.Unlock()
	res.Late = summarize(late)

	// A rate- and concurrency-limited backlog, and an unlimited group behind it.
	env.progressf("limits: %d jobs at %d/s, %d at once", cfg.Backlog, cfg.Rate, cfg.Concurrency)
	if err := disp.SetLimit(ctx, dispatcher.Limit{Kind: dispatcher.LimitResource, Name: "site", Concurrency: cfg.Concurrency, Rate: cfg.Rate, Per: time.Second}); err != nil {
		return nil, err
	}
	start := time.Now()
	limited, err := disp.Publish(ctx, "limited", func(yield func(dispatcher.Job) bool) {
		for range cfg.Backlog {
			if !yield(dispatcher.Job{Prefer: []string{"site"}}) {
				return
			}
		}
	})
	if err != nil {
		return nil, err
	}
	other, err := disp.Publish(ctx, "other", repeatJobs(100, nil))
	if err != nil {
		return nil, err
	}
	for _, h := range []*dispatcher.Handle{limited, other} {
		if _, err := h.WaitSummary(ctx); err != nil {
			return nil, err
		}
	}
	mu.Lock()
	defer mu.Unlock()
	first, last := limitedStarts[0], limitedStarts[len(limitedStarts)-1]
	res.AchievedRate = float64(len(limitedStarts)-1) / last.Sub(first).Seconds()
	res.PeakRunning = peak
	res.Drain = last.Sub(first)
	res.OtherDone = otherDone.Sub(start)
	res.Checks = []Check{
		atMost("delayed jobs: start after their time, p99", res.Late.P99, 50, "%.1f ms"),
		atMost("delayed jobs started before their time", float64(res.Early), 0, "%.0f"),
		within(fmt.Sprintf("rate limit %d/s: achieved starts per second under backlog", cfg.Rate), res.AchievedRate, float64(cfg.Rate), 0.05, "%.1f"),
		atMost(fmt.Sprintf("concurrency limit %d: most running at once", cfg.Concurrency), float64(res.PeakRunning), float64(cfg.Concurrency), "%.0f"),
		below("unlimited group published after the backlog: done before the backlog drains (s)", res.OtherDone.Seconds(), res.Drain.Seconds(), "%.2f"),
	}
	return res, nil
}

// Section implements Result.
func (r *LimitsResult) Section() Section {
	c := r.Config
	return Section{
		Scenario: r.Scenario(),
		Setup: fmt.Sprintf("1 worker × %d slots. Delayed: %d no-op jobs with times spread over %v, from 1s after publishing, on an idle worker. Limits: %d jobs of 5 ms preferring a resource limited to %d starts/s and %d at once, then 100 unlimited jobs of another group.",
			c.Slots, c.Delayed, c.DelaySpread, c.Backlog, c.Rate, c.Concurrency),
		Tables: []Table{{
			Header: []string{"measure", "value"},
			Rows: [][]string{
				{"delayed jobs: start after their time p50 / p99 / max", fmt.Sprintf("%s / %s / %s ms", msec(r.Late.P50), msec(r.Late.P99), msec(r.Late.Max))},
				{"delayed jobs started early", fmt.Sprint(r.Early)},
				{"limited backlog: starts per second (first to last start)", fmt.Sprintf("%.1f", r.AchievedRate)},
				{"limited backlog: most running at once", fmt.Sprint(r.PeakRunning)},
				{"limited backlog: drained in", fmt.Sprintf("%.2f s", r.Drain.Seconds())},
				{"unlimited group: done in", fmt.Sprintf("%.2f s", r.OtherDone.Seconds())},
			},
		}},
		Notes: []string{
			"Start after its time: the handler's start minus the job's RunAt (same clock: one process).",
			"A limited job is released only to a free slot, so it starts about when the coordinator releases it.",
		},
		Checks: r.Checks,
	}
}
