package bench

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/weavejobs/weave/cmd/weave/internal/inproc"
	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/worker"
)

// HerdConfig configures the herd scenario. Zero fields take the defaults.
type HerdConfig struct {
	Workers        int           `json:"workers"`            // in-process workers, each on its own connection; default 8
	Slots          int           `json:"slots"`              // total slots, split evenly; default 200
	Idle           time.Duration `json:"idle_ns"`            // idle window; default 5s
	TrickleRate    int           `json:"trickle_rate"`       // jobs per second in the trickle; default 100
	TrickleJobs    int           `json:"trickle_jobs"`       // default 200
	SaturationJobs int           `json:"saturation_jobs"`    // default 20,000
	SaturationTask time.Duration `json:"saturation_task_ns"` // handler time at saturation; default 20ms
}

func (c *HerdConfig) defaults() error {
	setDefault(&c.Workers, 8)
	setDefault(&c.Slots, 200)
	setDefault(&c.Idle, 5*time.Second)
	setDefault(&c.TrickleRate, 100)
	setDefault(&c.TrickleJobs, 200)
	setDefault(&c.SaturationJobs, 20_000)
	setDefault(&c.SaturationTask, 20*time.Millisecond)
	switch {
	case c.Workers < 1 || c.Slots < c.Workers:
		return fmt.Errorf("herd: need at least one slot per worker (%d slots, %d workers)", c.Slots, c.Workers)
	case c.Idle < 100*time.Millisecond:
		return fmt.Errorf("herd: idle window %v below 100ms", c.Idle)
	case c.TrickleRate < 1 || c.TrickleJobs < 1 || c.SaturationJobs < 100 || c.SaturationTask < 0:
		return fmt.Errorf("herd: trickle rate and jobs must be positive, saturation jobs at least 100")
	}
	return nil
}

// HerdResult is what the herd scenario measured.
type HerdResult struct {
	Config   HerdConfig `json:"config"`
	Embedded bool       `json:"embedded_server"`

	QuietWaitS        float64 `json:"quiet_wait_s"` // waited for the process to be quiet before the idle window
	IdleSeconds       float64 `json:"idle_s"`
	IdlePulls         uint64  `json:"idle_pulls"`
	PullsPerSecWorker float64 `json:"idle_pulls_per_s_per_worker"`
	IdleCPUCore       float64 `json:"idle_cpu_share_of_core"` // process CPU ÷ wall time over the idle window

	TrickleJobs       uint64  `json:"trickle_jobs_run"`
	TrickleWakeups    uint64  `json:"trickle_wakeups"`
	TrickleSpurious   uint64  `json:"trickle_spurious_wakeups"`
	SpuriousPerJob    float64 `json:"spurious_wakeups_per_job"`
	TricklePulls      uint64  `json:"trickle_pulls"`
	TrickleMsgsPerJob float64 `json:"trickle_ack_report_msgs_per_job"`

	SaturationJobsRun   uint64  `json:"saturation_jobs_run"`
	SaturationBatches   uint64  `json:"saturation_work_batches"` // each acked once
	SaturationReports   uint64  `json:"saturation_report_msgs"`
	SaturationSpurious  uint64  `json:"saturation_spurious_wakeups"`
	MsgsPerJob          float64 `json:"ack_report_msgs_per_job"`
	SaturationJobsPerS  float64 `json:"saturation_jobs_per_s"`
	SaturationBusySlots float64 `json:"saturation_busy_slots"` // jobs × task ÷ wall time

	Checks []Check `json:"checks"`
}

// Scenario implements Result.
func (r *HerdResult) Scenario() string { return "herd" }

// RunHerd starts Workers in-process workers (each on its own NATS connection, as separate
// processes would be) with Slots idle slots in all, then measures: an idle window (pull requests
// and process CPU), a trickle of jobs (wakeups per job), and a saturating backlog of jobs longer
// than the fleet can start (work-batch acks and report messages per job), all from the workers'
// Stats.
func RunHerd(ctx context.Context, env *Env, cfg HerdConfig) (res *HerdResult, err error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	d, err := env.deploy(ctx, "herd")
	if err != nil {
		return nil, err
	}
	defer d.closeInto(&err)
	res = &HerdResult{Config: cfg, Embedded: !env.External()}
	if err := d.Coordinator(coordinator.Config{}); err != nil {
		return nil, err
	}
	handler := func(ctx context.Context, j *worker.Job) ([]byte, error) {
		if len(j.Payload) > 0 && j.Payload[0] == 1 && cfg.SaturationTask > 0 {
			t := time.NewTimer(cfg.SaturationTask)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			}
		}
		return nil, nil
	}
	var ws []*worker.Worker
	for i := range cfg.Workers {
		n := cfg.Slots / cfg.Workers
		if i < cfg.Slots%cfg.Workers {
			n++
		}
		w, _, err := d.Worker(worker.Config{ID: fmt.Sprint("w", i), Concurrency: n}, handler)
		if err != nil {
			return nil, err
		}
		ws = append(ws, w)
	}
	disp, err := d.Dispatcher()
	if err != nil {
		return nil, err
	}
	if err := d.WaitStatus(inproc.FleetReady(cfg.Workers, cfg.Slots)); err != nil {
		return nil, err
	}
	if err := warmUp(ctx, disp, nil); err != nil {
		return nil, err
	}
	if err := waitIdle(ctx, ws); err != nil {
		return nil, err
	}

	// Idle. Earlier scenarios' garbage would keep the runtime busy for a while (collection, and
	// the background scavenger returning freed memory to the OS at up to 1% of a core): do both
	// now, outside the window.
	if wait := idleSettle - closedAgo(); wait > 0 {
		env.progressf("herd: waiting %v for earlier deployments' timers to fire", wait.Round(100*time.Millisecond))
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	debug.FreeOSMemory()
	res.QuietWaitS = waitQuiet(ctx, 5*time.Second).Seconds()
	env.progressf("herd: %d workers, %d slots: idle for %v", cfg.Workers, cfg.Slots, cfg.Idle)
	s0, cpu0, t0 := sumStats(ws), processCPU(), time.Now()
	select {
	case <-time.After(cfg.Idle):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	s1, cpu1, wall := sumStats(ws), processCPU(), time.Since(t0)
	res.IdleSeconds = wall.Seconds()
	res.IdlePulls = s1.Pulls - s0.Pulls
	res.PullsPerSecWorker = float64(res.IdlePulls) / wall.Seconds() / float64(cfg.Workers)
	res.IdleCPUCore = (cpu1 - cpu0).Seconds() / wall.Seconds()

	// Trickle: groups of 10, each job yielded at its scheduled time.
	env.progressf("herd: trickle of %d jobs at %d jobs/s", cfg.TrickleJobs, cfg.TrickleRate)
	if err := trickle(ctx, disp, cfg.TrickleJobs, cfg.TrickleRate); err != nil {
		return nil, err
	}
	if err := waitIdle(ctx, ws); err != nil {
		return nil, err
	}
	s2 := sumStats(ws)
	res.TrickleJobs = s2.JobsRun - s1.JobsRun
	res.TrickleWakeups = s2.Wakeups - s1.Wakeups
	res.TrickleSpurious = s2.SpuriousWakeups - s1.SpuriousWakeups
	res.TricklePulls = s2.Pulls - s1.Pulls
	res.SpuriousPerJob = float64(res.TrickleSpurious) / float64(max(res.TrickleJobs, 1))
	res.TrickleMsgsPerJob = float64(s2.Batches-s1.Batches+s2.ReportBatches-s1.ReportBatches) / float64(max(res.TrickleJobs, 1))

	// Saturation: more work than the slots can start at once.
	env.progressf("herd: saturation: %s jobs of %v", count(cfg.SaturationJobs), cfg.SaturationTask)
	start := time.Now()
	if err := publishAndWait(ctx, disp, "sat-", logUniformSizes(cfg.SaturationJobs, 100), []byte{1}); err != nil {
		return nil, err
	}
	took := time.Since(start)
	s3 := sumStats(ws)
	res.SaturationJobsRun = s3.JobsRun - s2.JobsRun
	res.SaturationBatches = s3.Batches - s2.Batches
	res.SaturationReports = s3.ReportBatches - s2.ReportBatches
	res.SaturationSpurious = s3.SpuriousWakeups - s2.SpuriousWakeups
	res.MsgsPerJob = float64(res.SaturationBatches+res.SaturationReports) / float64(max(res.SaturationJobsRun, 1))
	res.SaturationJobsPerS = float64(res.SaturationJobsRun) / took.Seconds()
	res.SaturationBusySlots = float64(res.SaturationJobsRun) * cfg.SaturationTask.Seconds() / took.Seconds()

	res.Checks = []Check{
		below("spurious wakeups per job (trickle)", res.SpuriousPerJob, 0.01, "%.3f"),
		atMost("pull requests per second per idle worker", res.PullsPerSecWorker, 2, "%.2f"),
		atMost("ack + report messages per job at saturation", res.MsgsPerJob, 0.3, "%.3f"),
		below("idle CPU, share of one core (%)", 100*res.IdleCPUCore, 1, "%.2f"),
	}
	return res, nil
}

// idleSettle is how long after an earlier deployment closed the idle window may start: the NATS
// client's heartbeat timers of its pull requests go on firing for about ten seconds (each one a
// goroutine), which is that deployment's cost, not this one's.
const idleSettle = 12 * time.Second

// waitIdle waits until no worker has a job running or queued.
func waitIdle(ctx context.Context, ws []*worker.Worker) error {
	ctx, cancel := context.WithTimeout(ctx, inproc.WaitTimeout)
	defer cancel()
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		s := sumStats(ws)
		if s.Busy == 0 && s.Queued == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the workers to be idle (%d busy, %d queued): %w", s.Busy, s.Queued, ctx.Err())
		case <-t.C:
		}
	}
}

// trickle submits n no-op jobs open loop at ratePerS, in groups of 10 (each job yielded to its
// open group at its scheduled time), and waits for every group's summary.
func trickle(ctx context.Context, disp *dispatcher.Dispatcher, n, ratePerS int) error {
	const groupSize = 10
	interval := time.Second / time.Duration(ratePerS)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	t0 := time.Now()
	inproc.Labeled("producer", func() {
		for first := 0; first < n && ctx.Err() == nil; first += groupSize {
			size := min(groupSize, n-first)
			time.Sleep(time.Until(t0.Add(time.Duration(first) * interval)))
			wg.Go(func() {
				jobs := func(yield func(dispatcher.Job) bool) {
					for k := range size {
						time.Sleep(time.Until(t0.Add(time.Duration(first+k) * interval)))
						if !yield(dispatcher.Job{}) {
							return
						}
					}
				}
				h, err := disp.Publish(ctx, fmt.Sprint("trickle-", first), jobs)
				if err == nil {
					var sum dispatcher.Summary
					sum, err = h.WaitSummary(ctx)
					if err == nil && sum.Done != size {
						err = fmt.Errorf("group %s: summary %+v, want %d done", h.GroupID(), sum, size)
					}
				}
				if err != nil {
					cancel(err)
				}
			})
		}
		wg.Wait()
	})
	return context.Cause(ctx)
}

// Section implements Result.
func (r *HerdResult) Section() Section {
	c := r.Config
	cpuWhat := "this process (coordinator and workers; not the external server)"
	if r.Embedded {
		cpuWhat = "the whole process: embedded server, coordinator and all workers"
	}
	return Section{
		Scenario: r.Scenario(),
		Setup: fmt.Sprintf("%d idle slots across %d in-process workers (each with its own NATS connection and default settings: heartbeat every second); idle for %v, then a trickle of %d jobs at %d jobs/s, then %s jobs of %v (more work than the slots can start at once).",
			c.Slots, c.Workers, c.Idle, c.TrickleJobs, c.TrickleRate, count(c.SaturationJobs), c.SaturationTask),
		Tables: []Table{{
			Header: []string{"phase", "measured", "from"},
			Rows: [][]string{
				{"idle", fmt.Sprintf("%d pull requests in %.1f s: %.2f /s per worker", r.IdlePulls, r.IdleSeconds, r.PullsPerSecWorker), "Stats.Pulls"},
				{"idle", fmt.Sprintf("CPU %.2f%% of one core", 100*r.IdleCPUCore), "getrusage over the window ÷ wall time"},
				{"trickle", fmt.Sprintf("%d jobs, %d wakeups, %d spurious: %.3f spurious per job", r.TrickleJobs, r.TrickleWakeups, r.TrickleSpurious, r.SpuriousPerJob), "Stats.Wakeups, SpuriousWakeups, JobsRun"},
				{"trickle", fmt.Sprintf("%d pull requests; %.2f ack + report messages per job", r.TricklePulls, r.TrickleMsgsPerJob), "Stats.Pulls, Batches, ReportBatches"},
				{"saturation", fmt.Sprintf("%s jobs in %s work batches (acked once each) and %s report messages: %.3f messages per job",
					count(r.SaturationJobsRun), count(r.SaturationBatches), count(r.SaturationReports), r.MsgsPerJob), "Stats.Batches, ReportBatches, JobsRun"},
				{"saturation", fmt.Sprintf("%s jobs/s, %.0f of %d slots busy on average; %d spurious wakeups", rate(r.SaturationJobsPerS), r.SaturationBusySlots, c.Slots, r.SaturationSpurious), "jobs × task ÷ wall time"},
			},
		}},
		Notes: []string{
			"The workers are in-process Worker instances, each with its own connection and consumer subscription, so every count is per worker as it would be per process; their CPU cannot be told apart, so idle CPU is " + cpuWhat + ".",
			"Heartbeats (one core-NATS message per worker per second) are not counted as ack or report messages.",
			fmt.Sprintf("Before the idle window: at least %v since an earlier scenario's deployment closed (the NATS client's heartbeat timers of its pull requests fire for about ten seconds after), a collection returning free memory to the OS (debug.FreeOSMemory), and up to 5 s (here %.2f s) until the process used under 0.5%% of a core for 250 ms.", idleSettle, r.QuietWaitS),
		},
		Checks: r.Checks,
	}
}
