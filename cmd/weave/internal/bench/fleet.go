package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// FleetParts are the fleet scenario's parts, in the order it runs them.
var FleetParts = []string{"submitters", "workers", "idle"}

// DefaultFleetSubmitters and DefaultFleetShapes are the fleet scenario's sizes by default: the
// scale of thousands of producers and hundreds of workers Weave is for.
var (
	DefaultFleetSubmitters = []int{1, 100, 1000, 3000}
	DefaultFleetShapes     = []Shape{{8, 8}, {50, 8}, {200, 4}, {500, 2}, {1000, 1}}
)

// FleetConfig configures the fleet scenario. Zero fields take the defaults.
type FleetConfig struct {
	Parts []string `json:"parts"` // of FleetParts; default all

	// Submitters: single jobs at Rate in all, job i submitted by submitter i mod n, for each
	// count n of Submitters, to a fleet of SubmitFleet.
	Submitters  []int         `json:"submitters"`   // default DefaultFleetSubmitters
	Rate        int           `json:"rate"`         // jobs per second in all; default 500
	Duration    time.Duration `json:"duration_ns"`  // submission time per count and side; default 6s
	SubmitFleet Shape         `json:"submit_fleet"` // default 4 × 8

	// Workers: no-op throughput of each fleet beside raw JetStream with the same fleet.
	Shapes []Shape `json:"shapes"` // default DefaultFleetShapes
	Jobs   int     `json:"jobs"`   // per round; default 20,000
	Groups int     `json:"groups"` // the jobs' groups (log-uniform sizes); default 200
	Rounds int     `json:"rounds"` // default 3

	// Idle: IdleWorkers workers of one slot and no job for Idle.
	IdleWorkers int           `json:"idle_workers"` // default 1,000
	Idle        time.Duration `json:"idle_ns"`      // default 1 minute
	// IdleProfile, if set, is a file for a CPU profile of the idle window of the process that
	// runs the coordinator and the server (the child's, when there is one).
	IdleProfile string `json:"idle_profile,omitempty"`
}

func (c *FleetConfig) defaults() error {
	if len(c.Parts) == 0 {
		c.Parts = slices.Clone(FleetParts)
	}
	for _, p := range c.Parts {
		if !slices.Contains(FleetParts, p) {
			return fmt.Errorf("fleet: unknown part %q: want some of %s", p, strings.Join(FleetParts, ", "))
		}
	}
	if len(c.Submitters) == 0 {
		c.Submitters = slices.Clone(DefaultFleetSubmitters)
	}
	if len(c.Shapes) == 0 {
		c.Shapes = slices.Clone(DefaultFleetShapes)
	}
	setDefault(&c.Rate, 500)
	setDefault(&c.Duration, 6*time.Second)
	setDefault(&c.SubmitFleet, Shape{4, 8})
	setDefault(&c.Jobs, 20_000)
	setDefault(&c.Groups, 200)
	setDefault(&c.Rounds, 3)
	setDefault(&c.IdleWorkers, 1000)
	// A dormant worker's pull waits a minute at the server: a window that long sees each one
	// expire and come again once, the whole of what the fleet costs while idle.
	setDefault(&c.Idle, time.Minute)
	for _, n := range c.Submitters {
		if n < 1 || n > 20_000 {
			return fmt.Errorf("fleet: submitters 1..20000 (%d)", n)
		}
	}
	for _, sh := range append([]Shape{c.SubmitFleet}, c.Shapes...) {
		if sh.Workers < 1 || sh.Concurrency < 1 || sh.Workers > 5000 {
			return fmt.Errorf("fleet: fleet %s: 1 to 5,000 workers of at least one slot", sh)
		}
	}
	thr := ThroughputConfig{Jobs: c.Jobs, Groups: c.Groups, Rounds: c.Rounds, Shapes: c.Shapes}
	switch err := thr.defaults(); {
	case err != nil:
		return fmt.Errorf("fleet: %w", err)
	case c.Rate < 1 || c.Rate > 100_000 || c.Duration <= 0:
		return fmt.Errorf("fleet: rate 1..100000 and a positive duration")
	case c.IdleWorkers < 1 || c.IdleWorkers > 5000 || c.Idle < time.Second:
		return fmt.Errorf("fleet: 1 to 5,000 idle workers, idle for at least 1s")
	}
	return nil
}

func (c *FleetConfig) runs(part string) bool { return slices.Contains(c.Parts, part) }

// The fleet targets.
const (
	manySubmitters      = 1000 // the counts from which the submitter targets apply
	maxSubmitP50        = 1.0  // ms
	maxSubmitP99        = 5.0  // ms
	maxSubmitCPUGrowth  = 1.3  // CPU per job ÷ with one submitter
	maxWorkerCPUGrowth  = 1.3  // CPU per job at cpuGrowthTo ÷ at cpuGrowthFrom
	maxIdleServerCPUPct = 3.0  // coordinator and server, % of one core
)

// partSettle bounds the wait for this process to be quiet before the workers part.
const partSettle = 10 * time.Second

// The fleets whose CPU per job the worker target compares.
var cpuGrowthFrom, cpuGrowthTo = Shape{8, 8}, Shape{500, 2}

// FleetScenarioResult is what the fleet scenario measured.
type FleetScenarioResult struct {
	Config   FleetConfig `json:"config"`
	Embedded bool        `json:"embedded_server"`
	Replicas int         `json:"replicas"`
	// ServerCPU: the CPU figures include the server's (embedded, or the processes of a cluster
	// the bench started).
	ServerCPU bool `json:"server_cpu_counted"`
	// FDLimit is the process's limit on open files during the scenario; FDRaisedFrom, if not 0,
	// the limit before the scenario raised it (setrlimit) to fit its connections.
	FDLimit      uint64 `json:"fd_limit"`
	FDRaisedFrom uint64 `json:"fd_raised_from,omitempty"`

	Submitters []SubmittersResult `json:"submitters"`
	Workers    []FleetResult      `json:"workers"`
	Idle       *IdleFleetResult   `json:"idle,omitempty"`
	Checks     []Check            `json:"checks"`
}

// Scenario implements Result.
func (r *FleetScenarioResult) Scenario() string { return "fleet" }

// RunFleet measures Weave with fleets of producers and workers of the sizes operators run, each
// beside raw JetStream with the same fleet on the same server: single jobs from many submitters
// (each its own connection and Dispatcher), no-op throughput with many workers (each its own
// connection), and what an idle fleet costs the coordinator and the server.
func RunFleet(ctx context.Context, env *Env, cfg FleetConfig) (*FleetScenarioResult, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	res := &FleetScenarioResult{Config: cfg, Embedded: !env.External(), Replicas: max(env.Replicas, 1), ServerCPU: env.serverCPUCounted()}
	// Each connection holds a descriptor here and, on the embedded server, another: the largest
	// count of submitters or of workers on both sides, with room for the rest.
	need := 64
	if cfg.runs("submitters") {
		need = max(need, 2*slices.Max(cfg.Submitters)+2*cfg.SubmitFleet.Workers+256)
	}
	if cfg.runs("workers") {
		for _, sh := range cfg.Shapes {
			need = max(need, 4*sh.Workers+256)
		}
	}
	if cfg.runs("idle") {
		need = max(need, 2*cfg.IdleWorkers+256)
	}
	var err error
	if res.FDLimit, res.FDRaisedFrom, err = ensureFDs(uint64(need)); err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	if res.FDRaisedFrom != 0 {
		env.progressf("fleet: file-descriptor limit raised from %d to %d", res.FDRaisedFrom, res.FDLimit)
	}
	if cfg.runs("submitters") {
		for _, n := range cfg.Submitters {
			s, err := runSubmitters(ctx, env, cfg, n)
			if err != nil {
				// A count that breaks Weave (a coordinator that loses its lease under the load)
				// is a result, not a reason to lose the other counts'.
				if ctx.Err() != nil {
					return nil, err
				}
				env.progressf("fleet: %s submitters: failed: %v", count(n), err)
				if s == nil {
					s = &SubmittersResult{Submitters: n}
				}
				s.Error = err.Error()
			}
			res.Submitters = append(res.Submitters, *s)
		}
		if base := res.Submitters[0]; base.Error == "" && base.Weave.CPUPerJob > 0 {
			for i := range res.Submitters {
				s := &res.Submitters[i]
				s.WeaveCPUGrowth = s.Weave.CPUPerJob / base.Weave.CPUPerJob
				s.RawCPUGrowth = s.Raw.CPUPerJob / max(base.Raw.CPUPerJob, 1e-9)
			}
		}
	}
	if cfg.runs("workers") {
		// Thousands of submitters' connections take a while to wind down: not on the fleets' time.
		waitQuiet(ctx, partSettle)
		thr := ThroughputConfig{Jobs: cfg.Jobs, Groups: cfg.Groups, Rounds: cfg.Rounds, Shapes: cfg.Shapes}
		if err := thr.defaults(); err != nil {
			return nil, err
		}
		for _, sh := range cfg.Shapes {
			f, err := runFleet(ctx, env, "fleet", thr, sh, sh)
			if err != nil {
				if ctx.Err() != nil {
					return nil, fmt.Errorf("fleet %s: %w", sh, err)
				}
				env.progressf("fleet %s: failed: %v", sh, err)
				f = &FleetResult{Shape: sh, Error: err.Error()}
			}
			res.Workers = append(res.Workers, *f)
		}
	}
	if cfg.runs("idle") {
		idle, err := runIdleFleet(ctx, env, cfg)
		if err != nil {
			return nil, fmt.Errorf("idle fleet: %w", err)
		}
		res.Idle = idle
	}
	res.Checks = res.checks()
	return res, nil
}

// checks compares the measures with the targets.
func (r *FleetScenarioResult) checks() []Check {
	var cs []Check
	base := ""
	if len(r.Submitters) > 0 {
		base = count(r.Submitters[0].Submitters)
	}
	for _, s := range r.Submitters {
		if s.Submitters < manySubmitters {
			continue
		}
		n := count(s.Submitters)
		if s.Error != "" {
			cs = append(cs, Check{Name: n + " submitters: the run completes", Target: "no error", Measured: "failed", Value: 1})
		}
		if s.Weave.SubmitSeen.N == 0 {
			continue
		}
		cs = append(cs,
			atMost(n+" submitters: submit → outcome p50 (ms)", s.Weave.SubmitSeen.P50, maxSubmitP50, "%.2f"),
			atMost(n+" submitters: submit → outcome p99 (ms)", s.Weave.SubmitSeen.P99, maxSubmitP99, "%.2f"))
		if s.WeaveCPUGrowth > 0 {
			cs = append(cs, atMost(fmt.Sprintf("%s submitters: CPU per job ÷ with %s", n, base), s.WeaveCPUGrowth, maxSubmitCPUGrowth, ratioFormat))
		}
	}
	var from, to *FleetResult
	for i := range r.Workers {
		f := &r.Workers[i]
		if f.Error != "" {
			cs = append(cs, Check{Name: f.Shape.String() + ": the run completes", Target: "no error", Measured: "failed", Value: 1})
			continue
		}
		cs = append(cs, atLeast(fmt.Sprintf("%s: Weave ÷ raw JetStream (same fleet) throughput", f.Shape), f.Ratio, minRatioFew, ratioFormat))
		if f.RawCPUPer1000 > 0 {
			cs = append(cs, atMost(fmt.Sprintf("%s: CPU per job, Weave ÷ raw JetStream (same fleet)", f.Shape), f.CPURatio, maxCPURatio, ratioFormat))
		}
		switch f.Shape {
		case cpuGrowthFrom:
			from = f
		case cpuGrowthTo:
			to = f
		}
	}
	if from != nil && to != nil && from.WeaveCPUPer1000 > 0 && to.Error == "" {
		cs = append(cs, atMost(fmt.Sprintf("Weave CPU per job at %s ÷ at %s", cpuGrowthTo, cpuGrowthFrom), to.WeaveCPUPer1000/from.WeaveCPUPer1000, maxWorkerCPUGrowth, ratioFormat))
	}
	if r.Idle != nil && r.Idle.Isolated && r.Idle.ServerCPUPct >= 0 {
		what := "coordinator + server"
		if !r.Idle.ServerIncluded {
			what = "coordinator (server external)"
		}
		cs = append(cs, atMost(fmt.Sprintf("%s idle workers: %s CPU (%% of one core)", count(r.Idle.Workers), what), r.Idle.ServerCPUPct, maxIdleServerCPUPct, "%.2f"))
	}
	return cs
}

// Section implements Result.
func (r *FleetScenarioResult) Section() Section {
	c := r.Config
	var setup []string
	if len(r.Submitters) > 0 {
		setup = append(setup, fmt.Sprintf("Submitters: single jobs (Submit + WaitJob) at %s/s in all for %v, job i from submitter i mod n, each submitter on its own connection with its own Dispatcher, to %s workers × slots; beside raw JetStream with as many connections: a synchronous publish into a stream, answered on the submitter's inbox by a core NATS reply from %d responders pulling from the stream.",
			count(c.Rate), c.Duration, c.SubmitFleet, c.SubmitFleet.Workers))
	}
	if len(r.Workers) > 0 {
		setup = append(setup, fmt.Sprintf("Workers: %s no-op jobs in %d groups per round, %d round(s) per fleet alternating which path runs first, each worker on its own connection; beside raw JetStream with the same fleet: one work-queue stream and one durable pull consumer that every raw worker pulls from, keeping as many messages in hand as it has slots.",
			count(c.Jobs), c.Groups, c.Rounds))
	}
	if r.Idle != nil {
		setup = append(setup, fmt.Sprintf("Idle: %s workers of one slot, no job, for %v.", count(r.Idle.Workers), c.Idle))
	}
	s := Section{Scenario: r.Scenario(), Setup: strings.Join(setup, " "), Checks: r.Checks}
	if len(r.Submitters) > 0 {
		base := count(r.Submitters[0].Submitters)
		t := Table{
			Title: "single jobs from many submitters: ms p50 / p99 / max, CPU per job of the whole process",
			Header: []string{"submitters", "Weave submit → outcome", "raw JetStream submit → reply", "CPU µs/job (Weave / raw)",
				"Weave CPU ÷ with " + base, "raw CPU ÷ with " + base, "Weave: last outcome after the first submit (s)", "Weave: unfinished"},
		}
		q := func(x Quantiles) string { return fmt.Sprintf("%s / %s / %s", msec(x.P50), msec(x.P99), msec(x.Max)) }
		for _, x := range r.Submitters {
			t.Rows = append(t.Rows, []string{count(x.Submitters), q(x.Weave.SubmitSeen), q(x.Raw.SubmitSeen),
				fmt.Sprintf("%.0f / %.0f", x.Weave.CPUPerJob, x.Raw.CPUPerJob), fmt.Sprintf(ratioFormat, x.WeaveCPUGrowth), fmt.Sprintf(ratioFormat, x.RawCPUGrowth),
				fmt.Sprintf("%.1f", x.WeaveSeconds), count(x.Unfinished)})
		}
		s.Tables = append(s.Tables, t)
	}
	if len(r.Workers) > 0 {
		t := Table{
			Title: "no-op throughput, raw JetStream with the same fleet; ratios are the median over rounds of each round's Weave ÷ raw",
			Header: []string{"fleet", "Weave jobs/s", "raw JetStream msgs/s", "Weave ÷ raw", "CPU s / 1,000 jobs (Weave / raw)", "CPU Weave ÷ raw",
				"Weave CPU ÷ at " + r.Workers[0].Shape.String(), "Weave cores", "jobs per work batch", "pulls per work batch", "context switches per job (Weave / raw)"},
		}
		for _, f := range r.Workers {
			t.Rows = append(t.Rows, []string{f.Shape.String(), rate(f.WeaveJobsPerSec), rate(f.RawJobsPerSec), fmt.Sprintf(ratioFormat, f.Ratio),
				fmt.Sprintf("%.3f / %.3f", f.WeaveCPUPer1000, f.RawCPUPer1000), fmt.Sprintf(ratioFormat, f.CPURatio),
				fmt.Sprintf(ratioFormat, f.WeaveCPUPer1000/max(r.Workers[0].WeaveCPUPer1000, 1e-9)), fmt.Sprintf("%.2f", f.WeaveCores),
				fmt.Sprintf("%.1f", f.JobsPerWorkBatch), fmt.Sprintf("%.2f", f.PullsPerBatch), fmt.Sprintf("%.2f / %.2f", f.WeaveSwitchesPerJob, f.RawSwitchesPerJob)})
		}
		s.Tables = append(s.Tables, t)
	}
	if i := r.Idle; i != nil {
		t := Table{
			Title:  "an idle fleet: CPU as a share of one core",
			Header: []string{"idle workers", "dormant at the start", "window (s)", "coordinator + server (%)", "the workers' process (%)", "pull requests per worker per s"},
			Rows: [][]string{{count(i.Workers), count(i.Dormant), fmt.Sprintf("%.1f", i.Seconds), fmt.Sprintf("%.2f", i.ServerCPUPct), fmt.Sprintf("%.2f", i.WorkersCPUPct),
				fmt.Sprintf("%.3f", i.PullsPerWorkerS)}},
		}
		s.Tables = append(s.Tables, t)
	}
	s.Notes = append(s.Notes, r.notes()...)
	return s
}

func (r *FleetScenarioResult) notes() []string {
	var ns []string
	for _, s := range r.Submitters {
		if s.Error != "" {
			ns = append(ns, fmt.Sprintf("%s submitters: failed: %s", count(s.Submitters), s.Error))
		}
	}
	for _, f := range r.Workers {
		if f.Error != "" {
			ns = append(ns, fmt.Sprintf("%s: failed: %s", f.Shape, f.Error))
		}
	}
	if len(r.Submitters) > 0 {
		ns = append(ns, "Submit → outcome runs from just before Submit (or the raw publish) to the outcome seen by the submitter's WaitJob (or the reply received); every component runs in this process, on one clock. Each submitter submits and waits for one job before the timing, so its subscriptions exist. CPU per job is the whole process's from the first submission to the last outcome, over the jobs. A job whose outcome was not seen in time counts as unfinished, its wait until then in the percentiles.")
	}
	switch {
	case r.Embedded:
		ns = append(ns, "CPU is the whole process's (getrusage): the embedded NATS server and every component.")
	case r.ServerCPU:
		ns = append(ns, "CPU is this process's (getrusage) plus the cluster's nats-server processes' (/proc).")
	default:
		ns = append(ns, "CPU is this process's (getrusage): the server's is not included.")
	}
	if r.Replicas > 1 {
		ns = append(ns, fmt.Sprintf("Every stream, Weave's and the references', has %d replicas.", r.Replicas))
	}
	fd := fmt.Sprintf("Open-file limit %s", count(r.FDLimit))
	if r.FDRaisedFrom != 0 {
		fd += fmt.Sprintf(", raised from %s by the scenario (setrlimit) to fit its connections", count(r.FDRaisedFrom))
	}
	ns = append(ns, fd+".")
	if i := r.Idle; i != nil {
		switch {
		case !i.Isolated:
			ns = append(ns, "Idle: the coordinator, the server and the workers ran in this process, so the figure is theirs together and no target is checked (weave bench runs the coordinator and the server in a child process).")
		case i.ServerIncluded && r.Embedded:
			ns = append(ns, "Idle: the coordinator and the embedded server ran in a child process of their own, measured by its own getrusage; the workers ran in this one.")
		case i.ServerIncluded:
			ns = append(ns, "Idle: the coordinator ran in a child process of its own, measured by its own getrusage, and the cluster's nats-server processes' CPU over the same window (/proc) is added to it; the workers ran in this process.")
		default:
			ns = append(ns, "Idle: the coordinator ran in a child process of its own, measured by its own getrusage; the server is external, its CPU not included.")
		}
	}
	return ns
}
