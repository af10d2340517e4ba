package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/weavejobs/weave/cmd/weave/internal/sim"
	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/spreader"
	"github.com/weavejobs/weave/worker"
)

// fairnessGroups is the reference case: three groups whose tasks take 10, 5 and 1 ms.
var fairnessGroups = []struct {
	name string
	task time.Duration
}{{"A", 10 * time.Millisecond}, {"B", 5 * time.Millisecond}, {"C", time.Millisecond}}

// FairnessConfig configures the fairness scenario. Zero fields take the defaults.
type FairnessConfig struct {
	Slots int `json:"slots"` // worker slots; default 6
	// Work is each group's total handler time: every group gets Work ÷ its task duration jobs,
	// so with equal shares all three finish together. Default 3s (300, 600 and 3,000 jobs).
	Work     time.Duration     `json:"work_ns"`
	Policies []spreader.Policy `json:"policies"` // default round-robin, then least-in-flight
}

func (c *FairnessConfig) defaults() error {
	setDefault(&c.Slots, 6)
	setDefault(&c.Work, 3*time.Second)
	if len(c.Policies) == 0 {
		c.Policies = []spreader.Policy{spreader.RoundRobin, spreader.LeastInFlight}
	}
	if c.Slots < 1 || c.Work < 10*time.Millisecond {
		return fmt.Errorf("fairness: need at least 1 slot and 10ms of work per group")
	}
	return nil
}

// FairnessGroup is one group's measurements under one policy.
type FairnessGroup struct {
	Group            string  `json:"group"`
	TaskMS           float64 `json:"task_ms"`
	Jobs             int     `json:"jobs"`
	InFlight         float64 `json:"in_flight"`          // average running jobs over the window, from the handlers' side
	Expected         float64 `json:"expected_in_flight"` // the policy's theory
	Share            float64 `json:"busy_share"`         // share of the busy slots, scaled to the slots
	CompletionS      float64 `json:"completion_s"`       // first job start (any group) → this group's last job end
	IdealCompletionS float64 `json:"ideal_completion_s"` // the same in a zero-overhead simulation of the policy
}

// FairnessRun is one policy's run.
type FairnessRun struct {
	Policy      string          `json:"policy"`
	WindowFromS float64         `json:"window_from_s"`
	WindowToS   float64         `json:"window_to_s"`
	BusySlots   float64         `json:"busy_slots"` // average running jobs over the window, all groups
	Groups      []FairnessGroup `json:"groups"`
}

// FairnessResult is what the fairness scenario measured.
type FairnessResult struct {
	Config FairnessConfig `json:"config"`
	Runs   []FairnessRun  `json:"runs"`
	Checks []Check        `json:"checks"`
}

// Scenario implements Result.
func (r *FairnessResult) Scenario() string { return "fairness" }

// expectedInFlight is the policy's theory for the reference case with every group active: round
// robin releases equally, so by Little's law each group holds slots in proportion to its task
// duration; least in-flight gives each an equal share.
func expectedInFlight(p spreader.Policy, slots int, tasks []time.Duration) []float64 {
	out := make([]float64, len(tasks))
	var sum time.Duration
	for _, t := range tasks {
		sum += t
	}
	for i, t := range tasks {
		if p == spreader.RoundRobin {
			out[i] = float64(slots) * float64(t) / float64(sum)
		} else {
			out[i] = float64(slots) / float64(len(tasks))
		}
	}
	return out
}

// RunFairness runs the reference case under each policy on its own deployment: Slots worker
// slots, and three groups of 10, 5 and 1 ms tasks published before the worker starts. It
// measures from the handlers' side each group's average number of running jobs over the window
// in which all three are active, and each group's completion time.
func RunFairness(ctx context.Context, env *Env, cfg FairnessConfig) (*FairnessResult, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	res := &FairnessResult{Config: cfg}
	for _, p := range cfg.Policies {
		run, err := fairnessRun(ctx, env, cfg, p)
		if err != nil {
			return nil, fmt.Errorf("%v: %w", p, err)
		}
		res.Runs = append(res.Runs, *run)
		if p == spreader.LeastInFlight {
			for _, g := range run.Groups {
				res.Checks = append(res.Checks, within(fmt.Sprintf("least-in-flight: group %s (%g ms tasks) average in flight", g.Group, g.TaskMS), g.InFlight, g.Expected, 0.10, "%.2f"))
			}
		}
	}
	return res, nil
}

func fairnessRun(ctx context.Context, env *Env, cfg FairnessConfig, policy spreader.Policy) (*FairnessRun, error) {
	var tasks []time.Duration
	var sims []simGroup
	var groups []shareGroup
	for _, g := range fairnessGroups {
		tasks = append(tasks, g.task)
		n := max(1, int(cfg.Work/g.task))
		sims = append(sims, simGroup{jobs: n, dur: g.task})
		groups = append(groups, shareGroup{name: g.name, task: g.task, jobs: n})
	}
	env.progressf("fairness: %v: %d slots, groups of %d, %d and %d jobs", policy, cfg.Slots, sims[0].jobs, sims[1].jobs, sims[2].jobs)
	intervals, err := runShares(ctx, env, "fair", coordinator.Config{Policy: policy}, cfg.Slots, groups)
	if err != nil {
		return nil, err
	}
	measured, ok := shareStats(intervals, len(fairnessGroups))
	if !ok {
		return nil, fmt.Errorf("no window in which all three groups were active")
	}
	simRuns, err := simulateScheduler(policy, cfg.Slots, len(fairnessGroups), sims)
	if err != nil {
		return nil, err
	}
	ideal, _ := shareStats(simRuns, len(fairnessGroups))
	run := &FairnessRun{Policy: policy.String(), WindowFromS: measured.From.Seconds(), WindowToS: measured.To.Seconds()}
	for _, v := range measured.InFlight {
		run.BusySlots += v
	}
	expected := expectedInFlight(policy, cfg.Slots, tasks)
	for i, g := range fairnessGroups {
		fg := FairnessGroup{
			Group: g.name, TaskMS: ms(g.task), Jobs: sims[i].jobs,
			InFlight: measured.InFlight[i], Expected: expected[i],
			CompletionS: measured.Completion[i].Seconds(), IdealCompletionS: ideal.Completion[i].Seconds(),
		}
		if run.BusySlots > 0 {
			fg.Share = float64(cfg.Slots) * fg.InFlight / run.BusySlots
		}
		run.Groups = append(run.Groups, fg)
	}
	return run, nil
}

// Section implements Result.
func (r *FairnessResult) Section() Section {
	c := r.Config
	s := Section{
		Scenario: r.Scenario(),
		Setup: fmt.Sprintf("The reference case: 1 worker × %d slots; groups A, B, C of 10, 5 and 1 ms tasks, each %v of work (so equal shares finish together), published before the worker starts; one run per policy, each on its own deployment.",
			c.Slots, c.Work),
		Checks: r.Checks,
	}
	for _, run := range r.Runs {
		t := Table{
			Title:  fmt.Sprintf("%s: window %.2f–%.2f s, %.2f of %d slots busy on average", run.Policy, run.WindowFromS, run.WindowToS, run.BusySlots, c.Slots),
			Header: []string{"group", "task", "jobs", "in flight", "expected", "share of busy", "completion s", "ideal s"},
		}
		for _, g := range run.Groups {
			t.Rows = append(t.Rows, []string{
				g.Group, fmt.Sprintf("%g ms", g.TaskMS), count(g.Jobs),
				fmt.Sprintf("%.2f", g.InFlight), fmt.Sprintf("%.3g", g.Expected), fmt.Sprintf("%.2f", g.Share),
				fmt.Sprintf("%.2f", g.CompletionS), fmt.Sprintf("%.2f", g.IdealCompletionS),
			})
		}
		s.Tables = append(s.Tables, t)
	}
	s.Notes = []string{
		"In flight: each group's jobs running in its handlers, averaged over the window from the time all three groups have started (plus a tenth of the window) to the first start of a group's last job.",
		"Expected: round robin gives each group slots in proportion to its task duration (3.75 / 1.875 / 0.375 of 6); least in-flight gives each an equal share (2 / 2 / 2).",
		"Share of busy: the group's part of the busy slots, scaled to all slots: fairness without the round-trip time between a job's end and the next release.",
		"Completion: from the first job start to the group's last job end; ideal: the same policy simulated with no overhead (spreader.Scheduler in simulated time).",
	}
	return s
}

// shareGroup is one group of a run that measures shares of the slots: its jobs, their duration
// and the group's weight (0: 1).
type shareGroup struct {
	name   string
	task   time.Duration
	jobs   int
	weight int
}

// runShares runs groups on a deployment of its own: a coordinator with ccfg, the groups published
// before one worker of slots starts (so all are active from its first pull), every job holding
// its handler for its group's task duration; it waits for every group's summary and returns the
// handlers' intervals, by group index.
func runShares(ctx context.Context, env *Env, tag string, ccfg coordinator.Config, slots int, groups []shareGroup) (runs []sim.Run, err error) {
	d, err := env.deploy(ctx, tag)
	if err != nil {
		return nil, err
	}
	defer d.closeInto(&err)
	if err := d.Coordinator(ccfg); err != nil {
		return nil, err
	}
	disp, err := d.Dispatcher()
	if err != nil {
		return nil, err
	}
	index := map[string]int{}
	var hs []*dispatcher.Handle
	for i, g := range groups {
		index[g.name] = i
		h, err := disp.Publish(ctx, g.name, repeatJobs(g.jobs, nil), dispatcher.Weight(g.weight))
		if err != nil {
			return nil, err
		}
		hs = append(hs, h)
	}
	log := newRunLog()
	_, _, err = d.Worker(worker.Config{ID: "w0", Concurrency: slots}, func(ctx context.Context, j *worker.Job) ([]byte, error) {
		g, ok := index[j.Group]
		if !ok {
			return nil, worker.Permanent(fmt.Errorf("unknown group %q", j.Group))
		}
		return nil, log.work(ctx, g, groups[g].task)
	})
	if err != nil {
		return nil, err
	}
	for i, h := range hs {
		sum, err := h.WaitSummary(ctx)
		if err != nil {
			return nil, err
		}
		if sum.Done != groups[i].jobs {
			return nil, fmt.Errorf("group %s: summary %+v, want %d done", h.GroupID(), sum, groups[i].jobs)
		}
	}
	return log.intervals(), nil
}
