package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/spreader"
)

// WeightsConfig configures the weights scenario. Zero fields take the defaults.
type WeightsConfig struct {
	Slots int `json:"slots"` // worker slots; default 8
	// Work is each group's total handler time (jobs = Work ÷ task duration). Default 6s.
	Work time.Duration `json:"work_ns"`
}

func (c *WeightsConfig) defaults() error {
	setDefault(&c.Slots, 8)
	setDefault(&c.Work, 6*time.Second)
	if c.Slots < 2 || c.Work < 10*time.Millisecond {
		return fmt.Errorf("weights: need at least 2 slots and 10ms of work per group")
	}
	return nil
}

// weightedGroup is one group of a weights run.
type weightedGroup struct {
	name   string
	task   time.Duration
	weight int
}

// weightRuns are the two runs: groups of 10 and 1 ms tasks (the reference case's mixed
// durations) with weights 3 and 1, then the other way round, so neither duration explains
// the shares.
var weightRuns = [][]weightedGroup{
	{{"A", 10 * time.Millisecond, 3}, {"C", time.Millisecond, 1}},
	{{"A", 10 * time.Millisecond, 1}, {"C", time.Millisecond, 3}},
}

// WeightsGroup is one group's measurements in one run.
type WeightsGroup struct {
	Group    string  `json:"group"`
	TaskMS   float64 `json:"task_ms"`
	Weight   int     `json:"weight"`
	Jobs     int     `json:"jobs"`
	InFlight float64 `json:"in_flight"` // average running jobs over the window, from the handlers' side
	Share    float64 `json:"share"`     // of the busy slots, 0–1
	Expected float64 `json:"expected_share"`
}

// WeightsRun is one run.
type WeightsRun struct {
	WindowFromS float64        `json:"window_from_s"`
	WindowToS   float64        `json:"window_to_s"`
	BusySlots   float64        `json:"busy_slots"`
	Groups      []WeightsGroup `json:"groups"`
}

// WeightsResult is what the weights scenario measured.
type WeightsResult struct {
	Config WeightsConfig `json:"config"`
	Runs   []WeightsRun  `json:"runs"`
	Checks []Check       `json:"checks"`
}

// Scenario implements Result.
func (r *WeightsResult) Scenario() string { return "weights" }

// RunWeights runs two groups of equal work, one of 10 ms tasks and one of 1 ms tasks, under
// least in-flight with weights 3 and 1 and then 1 and 3, each run on its own deployment, and
// measures from the handlers' side each group's share of the busy slots while both are active:
// the group of weight 3 must hold 3/4 of them and the other 1/4, ± 10%.
func RunWeights(ctx context.Context, env *Env, cfg WeightsConfig) (*WeightsResult, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	res := &WeightsResult{Config: cfg}
	for _, groups := range weightRuns {
		run, err := weightsRun(ctx, env, cfg, groups)
		if err != nil {
			return nil, err
		}
		res.Runs = append(res.Runs, *run)
		for _, g := range run.Groups {
			res.Checks = append(res.Checks, within(fmt.Sprintf("weight %d of %d: group %s (%g ms tasks) share of the busy slots", g.Weight, weightSum(groups), g.Group, g.TaskMS), g.Share, g.Expected, 0.10, "%.3f"))
		}
	}
	return res, nil
}

func weightSum(groups []weightedGroup) int {
	n := 0
	for _, g := range groups {
		n += g.weight
	}
	return n
}

func weightsRun(ctx context.Context, env *Env, cfg WeightsConfig, groups []weightedGroup) (*WeightsRun, error) {
	jobs := make([]int, len(groups))
	var shares []shareGroup
	for i, g := range groups {
		jobs[i] = max(1, int(cfg.Work/g.task))
		shares = append(shares, shareGroup{name: g.name, task: g.task, jobs: jobs[i], weight: g.weight})
	}
	env.progressf("weights: %d slots, %s weight %d and %s weight %d", cfg.Slots, groups[0].name, groups[0].weight, groups[1].name, groups[1].weight)
	intervals, err := runShares(ctx, env, "weights", coordinator.Config{Policy: spreader.LeastInFlight}, cfg.Slots, shares)
	if err != nil {
		return nil, err
	}
	measured, ok := shareStats(intervals, len(groups))
	if !ok {
		return nil, fmt.Errorf("no window in which both groups were active")
	}
	run := &WeightsRun{WindowFromS: measured.From.Seconds(), WindowToS: measured.To.Seconds()}
	for _, v := range measured.InFlight {
		run.BusySlots += v
	}
	for i, g := range groups {
		wg := WeightsGroup{Group: g.name, TaskMS: ms(g.task), Weight: g.weight, Jobs: jobs[i], InFlight: measured.InFlight[i],
			Expected: float64(g.weight) / float64(weightSum(groups))}
		if run.BusySlots > 0 {
			wg.Share = wg.InFlight / run.BusySlots
		}
		run.Groups = append(run.Groups, wg)
	}
	return run, nil
}

// Section implements Result.
func (r *WeightsResult) Section() Section {
	c := r.Config
	s := Section{
		Scenario: r.Scenario(),
		Setup: fmt.Sprintf("1 worker × %d slots, least in-flight; two groups, A of 10 ms tasks and C of 1 ms tasks, each %v of work, published before the worker starts; weights 3 and 1, then 1 and 3, each run on its own deployment.",
			c.Slots, c.Work),
		Checks: r.Checks,
	}
	for i, run := range r.Runs {
		t := Table{
			Title:  fmt.Sprintf("run %d: window %.2f–%.2f s, %.2f of %d slots busy on average", i+1, run.WindowFromS, run.WindowToS, run.BusySlots, c.Slots),
			Header: []string{"group", "task", "weight", "jobs", "in flight", "share of busy", "expected"},
		}
		for _, g := range run.Groups {
			t.Rows = append(t.Rows, []string{g.Group, fmt.Sprintf("%g ms", g.TaskMS), fmt.Sprint(g.Weight), count(g.Jobs),
				fmt.Sprintf("%.2f", g.InFlight), fmt.Sprintf("%.3f", g.Share), fmt.Sprintf("%.3f", g.Expected)})
		}
		s.Tables = append(s.Tables, t)
	}
	s.Notes = []string{
		"In flight: each group's jobs running in its handlers, averaged over the window in which both groups are active (as in the fairness scenario).",
		"Share of busy: the group's part of the running jobs; expected: its weight over the sum of the weights.",
	}
	return s
}
