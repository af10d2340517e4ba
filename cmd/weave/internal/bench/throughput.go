package bench

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/cmd/weave/internal/inproc"
	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/internal/wire"
	"github.com/weavejobs/weave/worker"
)

// Shape is a fleet of workers: Workers workers of Concurrency slots each.
type Shape struct {
	Workers     int `json:"workers"`
	Concurrency int `json:"concurrency"`
}

func (s Shape) String() string { return fmt.Sprintf("%d × %d", s.Workers, s.Concurrency) }

// DefaultShapes are the fleets the throughput scenario measures by default: one worker of 64
// slots, and the few-slot fleets users run (peers' defaults are 8–10 goroutines per worker).
var DefaultShapes = []Shape{{1, 64}, {1, 8}, {4, 8}, {16, 4}}

// ThroughputConfig configures the throughput scenario. Zero fields take the defaults.
type ThroughputConfig struct {
	Jobs        int `json:"jobs"`         // no-op jobs per round; default 20,000
	Groups      int `json:"groups"`       // groups they are split into (log-uniform sizes); default 200
	PayloadSize int `json:"payload_size"` // bytes per job; default 128
	// The fleet: Workers workers of Concurrency slots (either set: that fleet alone, the other
	// defaulting to 1 worker or 64 slots), else each of Shapes (default DefaultShapes).
	Workers     int     `json:"workers,omitempty"`
	Concurrency int     `json:"concurrency,omitempty"`
	Shapes      []Shape `json:"shapes"`
	Rounds      int     `json:"rounds"` // Weave and reference runs each, per fleet; default 3

	// The coordinator's Prefetch (-1 or more) and MaxBatch; 0: its defaults (adaptive, 64).
	Prefetch int `json:"prefetch,omitempty"`
	MaxBatch int `json:"max_batch,omitempty"`
}

func (c *ThroughputConfig) defaults() error {
	setDefault(&c.Jobs, 20_000)
	setDefault(&c.Groups, 200)
	setDefault(&c.PayloadSize, 128)
	setDefault(&c.Rounds, 3)
	switch {
	case c.Workers != 0 || c.Concurrency != 0:
		setDefault(&c.Workers, 1)
		setDefault(&c.Concurrency, 64)
		c.Shapes = []Shape{{c.Workers, c.Concurrency}}
	case len(c.Shapes) == 0:
		c.Shapes = slices.Clone(DefaultShapes)
	}
	for _, sh := range c.Shapes {
		if sh.Workers < 1 || sh.Concurrency < 1 {
			return fmt.Errorf("throughput: fleet %s: workers and slots per worker must be positive", sh)
		}
	}
	switch {
	case c.Jobs < 1 || c.Groups < 1 || c.PayloadSize < 0 || c.Rounds < 1:
		return fmt.Errorf("throughput: jobs, groups, workers, concurrency and rounds must be positive")
	case c.Prefetch < -1 || c.MaxBatch < 0:
		return fmt.Errorf("throughput: prefetch %d below -1 or max batch %d negative", c.Prefetch, c.MaxBatch)
	case c.Groups > c.Jobs:
		return fmt.Errorf("throughput: %d groups need at least as many jobs (%d)", c.Groups, c.Jobs)
	case c.Groups > 500:
		// Each group's WaitSummary holds a consumer on the RESULTS stream; the server allows
		// 1,000 per stream by default.
		return fmt.Errorf("throughput: at most 500 groups (%d)", c.Groups)
	}
	return nil
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// ThroughputRound is one round's timings.
type ThroughputRound struct {
	WeaveSeconds    float64 `json:"weave_s"`
	WeaveCPUSeconds float64 `json:"weave_cpu_s"`
	RanSeconds      float64 `json:"ran_s"` // first Publish → last handler call
	RawSeconds      float64 `json:"raw_s"`
	RawCPUSeconds   float64 `json:"raw_cpu_s"`
}

// The throughput targets: Weave's throughput at least minRatioWide of raw JetStream's
// for one worker of wideSlots slots or more and minRatioFew for other fleets, its CPU per job at
// most maxCPURatio times raw's, in every fleet.
const (
	minRatioWide = 0.75
	minRatioFew  = 0.5
	maxCPURatio  = 2.5
	wideSlots    = 64
	ratioFormat  = "%.2f"
)

// minRatio is the throughput target for fleet sh.
func minRatio(sh Shape) float64 {
	if sh.Workers == 1 && sh.Concurrency >= wideSlots {
		return minRatioWide
	}
	return minRatioFew
}

// ThroughputResult is what the throughput scenario measured, fleet by fleet.
type ThroughputResult struct {
	Config   ThroughputConfig `json:"config"`
	Embedded bool             `json:"embedded_server"`
	Replicas int              `json:"replicas"`
	// ServerCPU: the CPU figures include the server's (embedded, or the processes of a cluster
	// the bench started).
	ServerCPU bool          `json:"server_cpu_counted"`
	Fleets    []FleetResult `json:"fleets"`
	Checks    []Check       `json:"checks"`
}

// FleetResult is what the throughput scenario measured with one fleet.
type FleetResult struct {
	Shape  Shape             `json:"shape"`
	Rounds []ThroughputRound `json:"rounds"`
	// Over all rounds: jobs ÷ the rounds' times added up.
	WeaveJobsPerSec float64 `json:"weave_jobs_per_s"` // jobs ÷ (first Publish → last group summary)
	RanJobsPerSec   float64 `json:"ran_jobs_per_s"`   // jobs ÷ (first Publish → last handler call)
	RawJobsPerSec   float64 `json:"raw_jobs_per_s"`   // messages ÷ (first publish → last ack flushed)
	WeaveCPUPer1000 float64 `json:"weave_cpu_s_per_1000_jobs"`
	RawCPUPer1000   float64 `json:"raw_cpu_s_per_1000_jobs"`
	// The targets' measures: the median over rounds of each round's Weave ÷ raw, so that a
	// machine whose speed drifts (shared, throttled) compares each Weave run with the raw run
	// beside it.
	Ratio    float64 `json:"ratio"`     // throughput, Weave ÷ raw
	CPURatio float64 `json:"cpu_ratio"` // CPU per job, Weave ÷ raw

	// The process's I/O system calls and thread context switches per job (readOSCounts), a
	// measure of the work per job far steadier than CPU time on a shared machine.
	WeaveSyscallsPerJob float64 `json:"weave_io_syscalls_per_job"`
	RawSyscallsPerJob   float64 `json:"raw_io_syscalls_per_job"`
	WeaveSwitchesPerJob float64 `json:"weave_switches_per_job"`
	RawSwitchesPerJob   float64 `json:"raw_switches_per_job"`

	WeaveCores       float64 `json:"weave_cores"` // CPU time ÷ wall time of the Weave runs
	JobsPerWorkBatch float64 `json:"jobs_per_work_batch"`
	JobsPerReportMsg float64 `json:"jobs_per_report_msg"`
	PullsPerBatch    float64 `json:"pulls_per_work_batch"` // the workers' pull requests ÷ the work batches they received
	// StoredPerJob is the messages each stream (JOBS, WORK, EVENTS, RESULTS) stored per job over
	// the Weave runs: every stored message is a publish, an acknowledgement and a delivery or a
	// read, so this is what the server's share of the cost per job grows with.
	StoredPerJob      map[string]float64 `json:"stored_msgs_per_job"`
	PeakRSSBytes      uint64             `json:"peak_rss_bytes"`       // VmHWM over the Weave runs
	PeakRSSSinceStart bool               `json:"peak_rss_since_start"` // the peak could not be reset: it is since the process started
	// Error says why the fleet's run failed (the fleet scenario goes on with the next fleet).
	Error string `json:"error,omitempty"`
}

// Scenario implements Result.
func (r *ThroughputResult) Scenario() string { return "throughput" }

// RunThroughput pushes Jobs no-op jobs through Weave end to end (dispatcher → coordinator →
// workers → outcomes) and, on the same server in the same run, the same number of messages
// through a raw JetStream work queue (async publish, pull consume, ack): one hop, the floor of
// what any job system on JetStream costs. Rounds alternate which runs first. Each fleet runs
// on a deployment of its own.
func RunThroughput(ctx context.Context, env *Env, cfg ThroughputConfig) (*ThroughputResult, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	res := &ThroughputResult{Config: cfg, Embedded: !env.External(), Replicas: max(env.Replicas, 1), ServerCPU: env.serverCPUCounted()}
	for _, sh := range cfg.Shapes {
		f, err := runFleet(ctx, env, "throughput", cfg, sh, Shape{})
		if err != nil {
			return nil, fmt.Errorf("fleet %s: %w", sh, err)
		}
		res.Fleets = append(res.Fleets, *f)
		res.Checks = append(res.Checks, atLeast(fmt.Sprintf("%s: Weave ÷ raw JetStream throughput", sh), f.Ratio, minRatio(sh), ratioFormat))
		if f.RawCPUPer1000 > 0 {
			res.Checks = append(res.Checks, atMost(fmt.Sprintf("%s: CPU per job, Weave ÷ raw JetStream", sh), f.CPURatio, maxCPURatio, ratioFormat))
		}
	}
	return res, nil
}

// runFleet measures fleet sh as the scenario named says: Weave, and the raw reference consumed
// by rawFleet (see newRawRef), round after round on one deployment.
func runFleet(ctx context.Context, env *Env, scenario string, cfg ThroughputConfig, sh, rawFleet Shape) (res *FleetResult, err error) {
	d, err := env.deploy(ctx, scenario[:min(len(scenario), 5)]) // the namespace's length is bounded
	if err != nil {
		return nil, err
	}
	defer d.closeInto(&err)
	res = &FleetResult{Shape: sh}
	sizes := logUniformSizes(cfg.Jobs, cfg.Groups)
	payload := make([]byte, cfg.PayloadSize)

	if err := d.Coordinator(coordinator.Config{Prefetch: cfg.Prefetch, MaxBatch: cfg.MaxBatch}); err != nil {
		return nil, err
	}
	var lastRun atomic.Int64 // UnixNano of the latest handler call
	noop := func(context.Context, *worker.Job) ([]byte, error) {
		lastRun.Store(time.Now().UnixNano())
		return nil, nil
	}
	var ws []*worker.Worker
	for i := range sh.Workers {
		w, _, err := d.Worker(worker.Config{ID: fmt.Sprint("w", i), Concurrency: sh.Concurrency}, noop)
		if err != nil {
			return nil, err
		}
		ws = append(ws, w)
	}
	disp, err := d.Dispatcher()
	if err != nil {
		return nil, err
	}
	ref, err := newRawRef(d, rawFleet)
	if err != nil {
		return nil, err
	}
	if err := d.WaitStatus(inproc.FleetReady(sh.Workers, sh.Workers*sh.Concurrency)); err != nil {
		return nil, err
	}
	if err := warmUp(ctx, disp, payload); err != nil {
		return nil, err
	}
	before := sumStats(ws)
	res.PeakRSSSinceStart = true
	var weaveTime, ranTime, rawTime, weaveCPU, rawCPU time.Duration
	var weaveOS, rawOS osCounts
	storedMsgs := map[string]uint64{}
	for round := range cfg.Rounds {
		var r ThroughputRound
		weave := func() error {
			if resetPeakRSS() {
				res.PeakRSSSinceStart = false
			}
			stored0, err := d.StoredMessages()
			if err != nil {
				return err
			}
			os0, cpu0, start := readOSCounts(), env.cpu(), time.Now()
			if err := publishAndWait(ctx, disp, fmt.Sprint("r", round, "-"), sizes, payload); err != nil {
				return err
			}
			took, cpu := time.Since(start), env.cpu()-cpu0
			weaveOS = weaveOS.plus(readOSCounts().minus(os0))
			ran := time.Unix(0, lastRun.Load()).Sub(start)
			res.PeakRSSBytes = max(res.PeakRSSBytes, peakRSS())
			r.WeaveSeconds, r.WeaveCPUSeconds, r.RanSeconds = took.Seconds(), cpu.Seconds(), ran.Seconds()
			stored1, err := d.StoredMessages()
			if err != nil {
				return err
			}
			for name, n := range stored1 {
				storedMsgs[name] += n - stored0[name]
			}
			weaveTime, weaveCPU, ranTime = weaveTime+took, weaveCPU+cpu, ranTime+ran
			env.progressf("%s %s: round %d/%d: Weave %s jobs/s", scenario, sh, round+1, cfg.Rounds, rate(float64(cfg.Jobs)/took.Seconds()))
			return nil
		}
		raw := func() error {
			os0, cpu0 := readOSCounts(), env.cpu()
			took, err := ref.run(ctx, cfg.Jobs, payload)
			if err != nil {
				return fmt.Errorf("raw JetStream reference: %w", err)
			}
			cpu := env.cpu() - cpu0
			rawOS = rawOS.plus(readOSCounts().minus(os0))
			r.RawSeconds, r.RawCPUSeconds = took.Seconds(), cpu.Seconds()
			rawTime, rawCPU = rawTime+took, rawCPU+cpu
			env.progressf("%s %s: round %d/%d: raw JetStream %s msgs/s", scenario, sh, round+1, cfg.Rounds, rate(float64(cfg.Jobs)/took.Seconds()))
			return nil
		}
		// Alternate the order, so that neither path always runs on a server busy with the
		// other's leftovers (file store flushes, purges).
		first, second := raw, weave
		if round%2 == 1 {
			first, second = weave, raw
		}
		if err := first(); err != nil {
			return nil, err
		}
		if err := second(); err != nil {
			return nil, err
		}
		res.Rounds = append(res.Rounds, r)
	}
	after := sumStats(ws)
	n := float64(cfg.Jobs * cfg.Rounds)
	res.WeaveJobsPerSec = n / weaveTime.Seconds()
	res.RanJobsPerSec = n / ranTime.Seconds()
	res.RawJobsPerSec = n / rawTime.Seconds()
	res.WeaveCPUPer1000 = weaveCPU.Seconds() / n * 1000
	res.RawCPUPer1000 = rawCPU.Seconds() / n * 1000
	res.Ratio = median(res.Rounds, func(r ThroughputRound) float64 { return r.RawSeconds / r.WeaveSeconds })
	if rawCPU > 0 { // else no CPU figures (not Unix): no ratio, and no CPU target checked
		res.CPURatio = median(res.Rounds, func(r ThroughputRound) float64 { return r.WeaveCPUSeconds / max(r.RawCPUSeconds, 1e-9) })
	}
	res.WeaveCores = weaveCPU.Seconds() / weaveTime.Seconds()
	res.WeaveSyscallsPerJob, res.RawSyscallsPerJob = float64(weaveOS.ioSyscalls)/n, float64(rawOS.ioSyscalls)/n
	res.WeaveSwitchesPerJob, res.RawSwitchesPerJob = float64(weaveOS.switches)/n, float64(rawOS.switches)/n
	jobs := float64(after.JobsRun - before.JobsRun)
	res.JobsPerWorkBatch = jobs / float64(max(after.Batches-before.Batches, 1))
	res.JobsPerReportMsg = jobs / float64(max(after.ReportBatches-before.ReportBatches, 1))
	res.PullsPerBatch = float64(after.Pulls-before.Pulls) / float64(max(after.Batches-before.Batches, 1))
	res.StoredPerJob = map[string]float64{}
	for name, m := range storedMsgs {
		res.StoredPerJob[name] = float64(m) / n
	}
	return res, nil
}

// Section implements Result.
func (r *ThroughputResult) Section() Section {
	c := r.Config
	coord := "coordinator defaults"
	if c.Prefetch != 0 || c.MaxBatch != 0 {
		coord = fmt.Sprintf("coordinator Prefetch %d, MaxBatch %d (0: default)", c.Prefetch, c.MaxBatch)
	}
	fleets := make([]string, len(c.Shapes))
	for i, sh := range c.Shapes {
		fleets[i] = sh.String()
	}
	s := Section{
		Scenario: r.Scenario(),
		Setup: fmt.Sprintf("%s no-op jobs of %d B in %d groups (log-uniform sizes) per round, %s; fleets (workers × slots) %s, each on its own server; %d round(s) per fleet, alternating which path runs first.",
			count(c.Jobs), c.PayloadSize, c.Groups, coord, strings.Join(fleets, ", "), c.Rounds),
		Checks: r.Checks,
	}
	rates := Table{
		Title:  "jobs per second and CPU per job; ratios are the median over rounds of each round's Weave ÷ raw",
		Header: []string{"fleet", "Weave jobs/s", "Weave, handlers only", "raw JetStream msgs/s", "Weave ÷ raw", "CPU s / 1,000 jobs (Weave / raw)", "CPU Weave ÷ raw"},
	}
	also := Table{
		Title:  "the Weave runs",
		Header: []string{"fleet", "CPU cores used", "jobs per work batch", "jobs per report message", "pull requests per work batch", "stored per job: JOBS / WORK / EVENTS / RESULTS", "I/O syscalls per job (Weave / raw)", "context switches per job (Weave / raw)", "peak RSS"},
	}
	for _, f := range r.Fleets {
		rates.Rows = append(rates.Rows, []string{f.Shape.String(), rate(f.WeaveJobsPerSec), rate(f.RanJobsPerSec), rate(f.RawJobsPerSec),
			fmt.Sprintf(ratioFormat, f.Ratio), fmt.Sprintf("%.3f / %.3f", f.WeaveCPUPer1000, f.RawCPUPer1000), fmt.Sprintf(ratioFormat, f.CPURatio)})
		also.Rows = append(also.Rows, []string{f.Shape.String(), fmt.Sprintf("%.2f", f.WeaveCores), fmt.Sprintf("%.1f", f.JobsPerWorkBatch),
			fmt.Sprintf("%.1f", f.JobsPerReportMsg), fmt.Sprintf("%.2f", f.PullsPerBatch),
			fmt.Sprintf("%.2f / %.2f / %.2f / %.2f", f.StoredPerJob["JOBS"], f.StoredPerJob["WORK"], f.StoredPerJob["EVENTS"], f.StoredPerJob["RESULTS"]),
			fmt.Sprintf("%.2f / %.2f", f.WeaveSyscallsPerJob, f.RawSyscallsPerJob), fmt.Sprintf("%.2f / %.2f", f.WeaveSwitchesPerJob, f.RawSwitchesPerJob),
			mib(f.PeakRSSBytes)})
	}
	s.Tables = []Table{rates, also}
	s.Notes = append(s.Notes, "Weave is timed from the first Publish to every group's summary received (handlers only: to the last handler call); raw JetStream from the first async publish to the last ack flushed (one work-queue stream, file storage, one pull consumer).")
	switch {
	case r.Embedded:
		s.Notes = append(s.Notes, "CPU is the whole process's (getrusage): the embedded NATS server, coordinator, workers and dispatcher together.")
	case r.ServerCPU:
		s.Notes = append(s.Notes, "CPU is this process's (getrusage: coordinator, workers and dispatcher) plus the cluster's nats-server processes' (/proc).")
	default:
		s.Notes = append(s.Notes, "CPU is this process's (getrusage): coordinator, workers and dispatcher; the external server's CPU is not included.")
	}
	if r.Replicas > 1 {
		s.Notes = append(s.Notes, fmt.Sprintf("Every stream, Weave's and the reference's, has %d replicas.", r.Replicas))
	}
	rss := "Peak RSS is VmHWM, reset before each Weave run"
	if slices.ContainsFunc(r.Fleets, func(f FleetResult) bool { return f.PeakRSSSinceStart }) {
		rss = "Peak RSS is VmHWM since the process started (it could not be reset)"
	}
	what := "coordinator, workers, dispatcher"
	if r.Embedded {
		what = "embedded server, " + what
	}
	s.Notes = append(s.Notes, rss+": one process holding the "+what+" and the Go runtime, so it bounds the coordinator's memory from above.")
	return s
}

// sumStats adds up the workers' counters.
func sumStats(ws []*worker.Worker) worker.Stats {
	var t worker.Stats
	for _, w := range ws {
		s := w.Stats()
		t.Batches += s.Batches
		t.Pulls += s.Pulls
		t.AcksWithPulls += s.AcksWithPulls
		t.Wakeups += s.Wakeups
		t.SpuriousWakeups += s.SpuriousWakeups
		t.JobsRun += s.JobsRun
		t.JobsOK += s.JobsOK
		t.JobsFailed += s.JobsFailed
		t.ReportBatches += s.ReportBatches
		t.ReportRetries += s.ReportRetries
		t.Busy += s.Busy
		t.Sleeping += s.Sleeping
		t.Queued += s.Queued
	}
	return t
}

// repeatJobs yields n jobs with the same payload.
func repeatJobs(n int, payload []byte) iter.Seq[dispatcher.Job] {
	return func(yield func(dispatcher.Job) bool) {
		for range n {
			if !yield(dispatcher.Job{Payload: payload}) {
				return
			}
		}
	}
}

// warmUp runs one small group end to end, so that consumers, pulls and caches exist before
// anything is timed.
func warmUp(ctx context.Context, d *dispatcher.Dispatcher, payload []byte) error {
	h, err := d.Publish(ctx, "warmup-"+randomHex(4), repeatJobs(100, payload))
	if err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	sum, err := h.WaitSummary(ctx)
	if err == nil && sum.Done != 100 {
		err = fmt.Errorf("summary %+v, want 100 done", sum)
	}
	if err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	return nil
}

// publishAndWait publishes the groups from several goroutines (Publish settles a group's acks
// before sealing it, so one publisher would wait a round trip per group) and waits for every
// group's summary, started as soon as the group is published.
func publishAndWait(ctx context.Context, d *dispatcher.Dispatcher, prefix string, sizes []int, payload []byte) error {
	const publishers = 8
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		pubs, waits sync.WaitGroup
		next        atomic.Int64
	)
	inproc.Labeled("producer", func() {
		for range publishers {
			pubs.Go(func() {
				for {
					i := int(next.Add(1)) - 1
					if i >= len(sizes) || ctx.Err() != nil {
						return
					}
					h, err := d.Publish(ctx, fmt.Sprint(prefix, i), repeatJobs(sizes[i], payload))
					if err != nil {
						cancel(fmt.Errorf("publish: %w", err))
						return
					}
					waits.Go(func() {
						sum, err := h.WaitSummary(ctx)
						if err == nil && sum.Done != sizes[i] {
							err = fmt.Errorf("group %s: summary %+v, want %d done", h.GroupID(), sum, sizes[i])
						}
						if err != nil {
							cancel(err)
						}
					})
				}
			})
		}
		pubs.Wait()
	})
	waits.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return ctx.Err()
}

// rawStream is the reference's work-queue stream, in the deployment's namespace.
func rawStream(names wire.Names) string { return names.Namespace() + "_RAW" }

// rawRef is the reference: what the same server does for plain JetStream work-queue messages.
type rawRef struct {
	names    wire.Names
	replicas int
	pubNC    *nats.Conn
	pub      jetstream.JetStream
	admin    jetstream.JetStream // creates and deletes the stream
	// The consumers: one connection each, pulling from the one durable consumer. fleet.Workers
	// 0 is a single consumer with the client's default pull options.
	fleet Shape
	subs  []*nats.Conn
}

// newRawRef connects the reference's publisher and its consumers: one connection with the
// client's default pulls when fleet is the zero Shape (the floor of one hop), else fleet.Workers
// connections that each keep fleet.Concurrency messages in hand, as a Weave fleet of that shape
// does.
func newRawRef(d *deployment, fleet Shape) (*rawRef, error) {
	r := &rawRef{names: d.Names(), replicas: d.replicas, fleet: fleet}
	var err error
	if r.pubNC, err = d.Connect("reference"); err != nil {
		return nil, err
	}
	// The dispatcher's default bound on pending acks.
	if r.pub, err = jetstream.New(r.pubNC, jetstream.WithPublishAsyncMaxPending(dispatcher.DefaultMaxPending)); err != nil {
		return nil, err
	}
	for range max(fleet.Workers, 1) {
		nc, err := d.Connect("reference")
		if err != nil {
			return nil, err
		}
		r.subs = append(r.subs, nc)
	}
	if r.admin, err = jetstream.New(r.subs[0]); err != nil {
		return nil, err
	}
	return r, nil
}

// rawStallWait bounds how long the reference's publisher waits for room among its pending
// acks: the client's default (200ms) fails the run on a machine busy for a moment, where the
// dispatcher would wait.
const rawStallWait = 30 * time.Second

// maxWaiting is the pull requests the raw consumer keeps waiting: the server's default (512)
// unless the fleet's workers, each with a pull or two outstanding, need more.
func (r *rawRef) maxWaiting() int { return max(512, 4*len(r.subs)) }

// run publishes n messages asynchronously into a new work-queue stream (file storage) while the
// consumers consume and ack them, and returns the time from the first publish to the last ack,
// flushed to the server. The stream is deleted afterwards.
func (r *rawRef) run(ctx context.Context, n int, payload []byte) (took time.Duration, err error) {
	name, subject := rawStream(r.names), r.names.Namespace()+".raw"
	s, err := r.admin.CreateStream(ctx, jetstream.StreamConfig{
		Name: name, Subjects: []string{subject}, Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage, Replicas: r.replicas,
	})
	if err != nil {
		return 0, err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if derr := r.admin.DeleteStream(dctx, name); err == nil && derr != nil {
			err = derr
		}
	}()
	if _, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: "raw", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: -1, MaxWaiting: r.maxWaiting(), Replicas: r.replicas,
	}); err != nil {
		return 0, err
	}
	var got atomic.Int64
	done := make(chan struct{})
	handle := func(m jetstream.Msg) {
		_ = m.Ack()
		if got.Add(1) == int64(n) {
			close(done)
		}
	}
	var opts []jetstream.PullConsumeOpt
	if r.fleet.Workers > 0 {
		opts = append(opts, jetstream.PullMaxMessages(r.fleet.Concurrency))
	}
	for _, nc := range r.subs {
		js, err := jetstream.New(nc)
		if err != nil {
			return 0, err
		}
		cons, err := js.Consumer(ctx, name, "raw")
		if err != nil {
			return 0, err
		}
		var cc jetstream.ConsumeContext
		inproc.Labeled("reference", func() { cc, err = cons.Consume(handle, opts...) })
		if err != nil {
			return 0, err
		}
		defer cc.Stop()
	}
	start := time.Now()
	inproc.Labeled("reference", func() {
		for range n {
			if _, err = r.pub.PublishAsync(subject, payload, jetstream.WithStallWait(rawStallWait)); err != nil {
				return
			}
		}
	})
	if err != nil {
		return 0, err
	}
	select {
	case <-r.pub.PublishAsyncComplete():
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	select {
	case <-done:
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(time.Minute):
		return 0, fmt.Errorf("%d of %d messages consumed after a minute", got.Load(), n)
	}
	// Every consumer's last acks, flushed side by side: one round trip, whatever the fleet.
	var flushes sync.WaitGroup
	errs := make([]error, len(r.subs))
	for i, nc := range r.subs {
		flushes.Go(func() { errs[i] = nc.Flush() })
	}
	flushes.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}
