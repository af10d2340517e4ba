package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weavejobs/weave/cmd/weave/internal/inproc"
	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/worker"
)

// ScaleConfig configures the scale scenario. Zero fields take the defaults.
type ScaleConfig struct {
	Sizes []int `json:"sizes"` // pending jobs to measure at; default 10,000 and 100,000
	// GroupSizes are the jobs per group of the backlogs, each measured at every size: default 1
	// (single jobs, submitted in bulk), 10 and 1,000.
	GroupSizes  []int `json:"group_sizes"`
	PayloadSize int   `json:"payload_size"` // default 16
	DrainJobs   int   `json:"drain_jobs"`   // jobs run from the backlog to time scheduling; default 5,000 (at most half the size)
	Concurrency int   `json:"concurrency"`  // slots of the worker that drains; default 64
	// MemProfileRate is runtime.MemProfileRate during a measurement. 0 (default): 512 bytes
	// per 100,000 jobs (at least 512), enough samples for a figure within a few percent while
	// slowing large runs less.
	MemProfileRate int `json:"mem_profile_rate"`
	// DrainProfile, if set, is the prefix of a CPU profile of each backlog's drain alone, written
	// to <DrainProfile>-g<group size>-<pending jobs>.prof (with -r<run> after the prefix when
	// Repeat is above 1): where the time per job goes at each backlog.
	DrainProfile string `json:"drain_profile,omitempty"`
	// AdmitProfile, if set, is the prefix of a CPU profile of each backlog's publishing and
	// admission (default configuration), named as DrainProfile's: where a job's admission goes.
	AdmitProfile string `json:"admit_profile,omitempty"`
	// HeapProfile, if set, is the prefix of a heap profile of each backlog with the payload cache
	// off, written to <HeapProfile>-g<group size>-<pending jobs>.heap once every job is admitted:
	// what holds the memory per pending job.
	HeapProfile string `json:"heap_profile,omitempty"`
	// Repeat is how many times each backlog is measured with the default configuration (the
	// drain, the restart); default 3. The runs go backlog after backlog, round after round, so a
	// change in the machine's load falls on every backlog alike, and the drain figures reported
	// are the medians of the runs (each run's are kept in ScaleStep.DrainRuns).
	Repeat int `json:"repeat,omitempty"`
}

// DefaultScaleGroupSizes are the jobs per group measured by default: single jobs, small groups
// and large ones.
var DefaultScaleGroupSizes = []int{1, 10, 1000}

// DefaultScaleSizes are the sizes measured by default; FullScaleSizes with weave bench --full.
var (
	DefaultScaleSizes = []int{10_000, 100_000}
	FullScaleSizes    = []int{10_000, 100_000, 1_000_000}
)

func (c *ScaleConfig) defaults() error {
	if len(c.Sizes) == 0 {
		c.Sizes = DefaultScaleSizes
	}
	if len(c.GroupSizes) == 0 {
		c.GroupSizes = DefaultScaleGroupSizes
	}
	for _, list := range []*[]int{&c.Sizes, &c.GroupSizes} {
		*list = slices.Clone(*list)
		slices.Sort(*list)
		*list = slices.Compact(*list)
	}
	setDefault(&c.PayloadSize, 16)
	setDefault(&c.DrainJobs, 5000)
	// Three runs by default: a 5,000-job drain lasts a fraction of a second, and its CPU per job
	// varies by a third from run to run on a shared 2-core machine, enough to flip the ratio
	// targets either way; medians seldom do. Three group sizes at two sizes make 18 runs.
	setDefault(&c.Repeat, 3)
	setDefault(&c.Concurrency, 64)
	switch {
	case c.Sizes[0] < 100:
		return fmt.Errorf("scale: sizes must be at least 100 jobs (%d)", c.Sizes[0])
	case c.Sizes[len(c.Sizes)-1] > 100_000_000:
		return fmt.Errorf("scale: sizes above 100,000,000 jobs")
	case c.GroupSizes[0] < 1 || c.PayloadSize < 0 || c.DrainJobs < 2 || c.Concurrency < 1 || c.MemProfileRate < 0 || c.Repeat < 1:
		return fmt.Errorf("scale: group sizes, drain jobs (at least 2), concurrency, profile rate and repeat must be positive")
	}
	for _, p := range [...]struct{ what, prefix string }{{"drain profile", c.DrainProfile}, {"admission profile", c.AdmitProfile}, {"heap profile", c.HeapProfile}} {
		// Said now, not after minutes of publishing the first backlog.
		if st, err := os.Stat(filepath.Dir(p.prefix)); p.prefix != "" && (err != nil || !st.IsDir()) {
			return fmt.Errorf("scale: %s %q: its directory %s does not exist", p.what, p.prefix, filepath.Dir(p.prefix))
		}
	}
	return nil
}

// ScaleMemory is the heap growth from an empty coordinator to one holding the backlog, in bytes
// and bytes per job.
type ScaleMemory struct {
	// Coordinator counts the live heap allocated with a function of package coordinator,
	// internal/jobindex or spreader on the stack, from the Go heap profile.
	CoordBytes  int64   `json:"coordinator_bytes"`
	CoordPerJob float64 `json:"coordinator_bytes_per_job"`
	// Outside the server is the growth of the whole process's heap minus what the embedded
	// server's own code allocated (from the heap profile): the coordinator's full footprint,
	// including what the NATS client allocated and the coordinator keeps (cached messages),
	// plus the dispatcher's and the connections' buffers.
	OutsideBytes  int64   `json:"outside_server_bytes"`
	OutsidePerJob float64 `json:"outside_server_bytes_per_job"`
	// Process is the growth of the whole process's heap.
	ProcessBytes  int64   `json:"process_bytes"`
	ProcessPerJob float64 `json:"process_bytes_per_job"`
}

// defaultMemProfileRate is runtime.MemProfileRate's default.
const defaultMemProfileRate = 512 * 1024

// profileRate is the heap profile's sampling rate for n jobs.
func (c *ScaleConfig) profileRate(n int) int {
	if c.MemProfileRate > 0 {
		return c.MemProfileRate
	}
	return 512 * max(1, (n+99_999)/100_000)
}

// ScaleStep is the measurement of one backlog: a size in groups of one size.
type ScaleStep struct {
	GroupSize int    `json:"group_size"`
	Jobs      int    `json:"jobs"`
	Groups    int    `json:"groups"`
	Admitted  uint64 `json:"admitted"`
	Pending   uint64 `json:"pending"`
	// AdmitSeconds runs from the first publish to the coordinator's admission of the last job
	// (with the default configuration, the heap profile sampling at its default rate).
	AdmitSeconds float64 `json:"admit_s"`
	// PublishSeconds runs from the first publish to the producer's last publish acknowledged:
	// admission cannot end before it.
	PublishSeconds float64 `json:"publish_s"`
	// NoCache is measured with the coordinator's payload cache off (PayloadCacheBytes = 1):
	// the memory per pending job excluding payloads. Default is with the default configuration,
	// whose payload cache keeps jobs' messages from the feed (up to PayloadCacheBytes of
	// payload).
	NoCache        ScaleMemory `json:"no_payload_cache"`
	Default        ScaleMemory `json:"default_config"`
	StatusMS       float64     `json:"status_ms"` // median time to answer a status request at this backlog
	DrainJobs      int         `json:"drain_jobs"`
	DrainJobsPerS  float64     `json:"drain_jobs_per_s"`     // the median of DrainRuns' when repeated
	DrainCPUPerJob float64     `json:"drain_cpu_us_per_job"` // the median of DrainRuns' when repeated
	// DrainRuns are each run's drain figures when ScaleConfig.Repeat is above 1; the step's
	// other figures with the default configuration are the last run's.
	DrainRuns []ScaleDrain `json:"drain_runs,omitempty"`
	// RestartSeconds runs from a new coordinator's start, after the drain and a clean stop of the
	// first, to its first status answer (after replay) that holds every job not ended at the stop.
	RestartSeconds  float64 `json:"restart_s"`
	PeakRSSBytes    uint64  `json:"peak_rss_bytes"` // with the default configuration
	PeakRSSFromBase bool    `json:"peak_rss_reset"` // the peak was reset at the start of the step
}

// ScaleDrain is one run's drain.
type ScaleDrain struct {
	JobsPerS  float64 `json:"jobs_per_s"`
	CPUPerJob float64 `json:"cpu_us_per_job"`
}

// ScaleSlope is the growth between two consecutive sizes in groups of one size, per added job.
type ScaleSlope struct {
	GroupSize      int     `json:"group_size"`
	From           int     `json:"from"`
	To             int     `json:"to"`
	NoCachePerJob  float64 `json:"no_payload_cache_outside_server_bytes_per_job"`
	DefaultPerJob  float64 `json:"default_config_outside_server_bytes_per_job"`
	NoCacheCoord   float64 `json:"no_payload_cache_coordinator_bytes_per_job"`
	DefaultProcess float64 `json:"default_config_process_bytes_per_job"`
}

// ScaleResult is what the scale scenario measured.
type ScaleResult struct {
	Config   ScaleConfig `json:"config"`
	Embedded bool        `json:"embedded_server"`
	// Isolated: every measurement ran in a fresh child process (see Env.ChildCommand), so the
	// heap held only that deployment. Otherwise they ran in this process, after earlier
	// scenarios' deployments, whose last objects may be freed during a measurement.
	Isolated bool         `json:"isolated"`
	Steps    []ScaleStep  `json:"steps"`
	Slopes   []ScaleSlope `json:"slopes"`
	// ManyProducers is the admission of single jobs submitted by many producers at once (when
	// single jobs are measured).
	ManyProducers *ManyAdmission `json:"many_producers,omitempty"`
	Checks        []Check        `json:"checks"`
}

// ManyAdmission is the admission of Jobs single jobs submitted at once by Producers producers,
// each on its own connection with its own Dispatcher, each submitting its share in bulk.
type ManyAdmission struct {
	Producers    int     `json:"producers"`
	Jobs         int     `json:"jobs"`
	AdmitSeconds float64 `json:"admit_s"`
}

// Scenario implements Result.
func (r *ScaleResult) Scenario() string { return "scale" }

// serverPackages are the embedded server's packages, whose allocations are the server's.
var serverPackages = []string{"github.com/nats-io/nats-server/"}

// RunScale measures, for each backlog (each size, in groups of each group size), the
// coordinator's memory with that many pending jobs and the cost of scheduling from that backlog.
// Each measurement is a fresh deployment: publish the jobs with no worker running, wait until the
// coordinator has admitted them all, and measure the heap growth since before publishing, from the
// heap profile (sampling every MemProfileRate bytes) and the runtime's statistics. Each backlog is
// measured twice: with the coordinator's payload cache off (the target: memory per pending job
// excluding payloads), and with the default configuration, whose admission is timed (the heap
// profile then samples at its default rate, so as not to slow it) and after which one worker runs
// DrainJobs jobs from the backlog, timed from the first handler call to the last.
func RunScale(ctx context.Context, env *Env, cfg ScaleConfig) (*ScaleResult, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	res := &ScaleResult{Config: cfg, Embedded: !env.External(), Isolated: len(env.ChildCommand) > 0}
	if !res.Isolated {
		old := runtime.MemProfileRate
		defer func() { runtime.MemProfileRate = old }()
	}
	measure := func(cfg ScaleConfig, step *ScaleStep, defaults bool) error {
		if res.Isolated {
			return scaleStepChild(ctx, env, cfg, step, defaults)
		}
		return scaleStep(ctx, env, cfg, step, defaults)
	}
	for _, gs := range cfg.GroupSizes {
		for _, n := range cfg.Sizes {
			step := ScaleStep{GroupSize: gs, Jobs: n, Groups: (n + gs - 1) / gs}
			if err := measure(cfg, &step, false); err != nil {
				return nil, fmt.Errorf("%s, payload cache off: %w", step.name(), err)
			}
			res.Steps = append(res.Steps, step)
		}
	}
	// The default configuration and the drain: backlog after backlog, round after round.
	for run := range cfg.Repeat {
		rc := cfg
		if cfg.Repeat > 1 && cfg.DrainProfile != "" {
			rc.DrainProfile = fmt.Sprintf("%s-r%d", cfg.DrainProfile, run+1)
		}
		if cfg.Repeat > 1 && cfg.AdmitProfile != "" {
			rc.AdmitProfile = fmt.Sprintf("%s-r%d", cfg.AdmitProfile, run+1)
		}
		for i := range res.Steps {
			step := &res.Steps[i]
			runs := step.DrainRuns
			if err := measure(rc, step, true); err != nil {
				return nil, fmt.Errorf("%s: %w", step.name(), err)
			}
			step.DrainRuns = append(runs, ScaleDrain{JobsPerS: step.DrainJobsPerS, CPUPerJob: step.DrainCPUPerJob})
		}
	}
	for i := range res.Steps {
		step := &res.Steps[i]
		if cfg.Repeat == 1 {
			step.DrainRuns = nil
			continue
		}
		step.DrainJobsPerS = median(step.DrainRuns, func(d ScaleDrain) float64 { return d.JobsPerS })
		step.DrainCPUPerJob = median(step.DrainRuns, func(d ScaleDrain) float64 { return d.CPUPerJob })
	}
	for i := 1; i < len(res.Steps); i++ {
		a, b := res.Steps[i-1], res.Steps[i]
		if a.GroupSize != b.GroupSize {
			continue
		}
		dn := float64(b.Jobs - a.Jobs)
		res.Slopes = append(res.Slopes, ScaleSlope{
			GroupSize: a.GroupSize, From: a.Jobs, To: b.Jobs,
			NoCachePerJob:  float64(b.NoCache.OutsideBytes-a.NoCache.OutsideBytes) / dn,
			DefaultPerJob:  float64(b.Default.OutsideBytes-a.Default.OutsideBytes) / dn,
			NoCacheCoord:   float64(b.NoCache.CoordBytes-a.NoCache.CoordBytes) / dn,
			DefaultProcess: float64(b.Default.ProcessBytes-a.Default.ProcessBytes) / dn,
		})
	}
	res.Checks = scaleChecks(res.Steps, res.Slopes)
	if slices.Contains(cfg.GroupSizes, 1) {
		n := slices.Max(cfg.Sizes)
		m, err := admitFromMany(ctx, env, n, manyProducers, cfg.PayloadSize)
		if err != nil {
			return nil, fmt.Errorf("single jobs from %d producers: %w", manyProducers, err)
		}
		res.ManyProducers = m
		res.Checks = append(res.Checks, atLeast(fmt.Sprintf("single jobs: admission of %s submitted by %d producers at once, jobs/s", count(n), manyProducers),
			float64(n)/m.AdmitSeconds, 100_000, "%.0f"))
	}
	return res, nil
}

// manyProducers is how many producers submit single jobs at once in admitFromMany.
const manyProducers = 100

// admitFromMany times the admission of n single jobs submitted at once by producers producers, each
// on its own connection with its own Dispatcher, each submitting its share (SubmitMany in chunks),
// from the first submission to the coordinator's admission of the last job. It runs in this
// process, on a deployment of its own.
func admitFromMany(ctx context.Context, env *Env, n, producers, payloadSize int) (m *ManyAdmission, err error) {
	d, err := env.deploy(ctx, "scale")
	if err != nil {
		return nil, err
	}
	defer d.closeInto(&err)
	if _, err := d.StartCoordinator(coordinator.Config{}); err != nil {
		return nil, err
	}
	if err := d.WaitStatus(inproc.Answering); err != nil {
		return nil, err
	}
	disps := make([]*dispatcher.Dispatcher, producers)
	if err := forEach(ctx, producers, connectParallel, func(i int) (err error) {
		disps[i], err = d.Dispatcher()
		return err
	}); err != nil {
		return nil, err
	}
	// Each producer's first job, untimed: its checks and subscriptions exist before the
	// measurement, as they do in a producer that has been running.
	if err := forEach(ctx, producers, producers, func(i int) error {
		return submitAll(ctx, disps[i], fmt.Sprint("w", i, "-"), 1, nil)
	}); err != nil {
		return nil, err
	}
	env.progressf("scale: %s single jobs from %d producers at once", count(n), producers)
	start := time.Now()
	if err := forEach(ctx, producers, producers, func(i int) error {
		share := n/producers + min(1, max(0, n%producers-i)) // the remainder spread over the first ones
		return submitAll(ctx, disps[i], fmt.Sprint("m", i, "-"), share, make([]byte, payloadSize))
	}); err != nil {
		return nil, err
	}
	if err := d.WaitStatus(func(st *coordinator.Status) (bool, string) {
		return st.Totals.Admitted >= uint64(n+producers), fmt.Sprintf("the coordinator to admit %d jobs (%d so far)", n+producers, st.Totals.Admitted)
	}); err != nil {
		return nil, err
	}
	return &ManyAdmission{Producers: producers, Jobs: n, AdmitSeconds: time.Since(start).Seconds()}, nil
}

// Scale targets: the memory per pending job, payload cache off, of single jobs and of groups;
// the backlog from which the memory per pending job is checked (below it, the coordinator's
// fixed memory is a large share); the restart time per million pending jobs; and the drain rate
// of single jobs against large groups'.
const (
	singleMemoryTarget = 128.0
	groupMemoryTarget  = 64.0
	memoryCheckedFrom  = 100_000
	restartPerMillion  = 30.0
	singleDrainShare   = 0.5
)

// scaleChecks are the targets, for each group size: the memory per pending job at each size from
// memoryCheckedFrom and per added job between sizes; the drain's cost and rate, the admission
// and, from a million pending jobs, the restart at the largest size against the smallest; and the
// drain rate of single jobs against groups of 1,000 at the largest size both were measured at.
func scaleChecks(steps []ScaleStep, slopes []ScaleSlope) []Check {
	var checks []Check
	byGroup := map[int][]ScaleStep{}
	var groupSizes []int
	for _, s := range steps {
		if byGroup[s.GroupSize] == nil {
			groupSizes = append(groupSizes, s.GroupSize)
		}
		byGroup[s.GroupSize] = append(byGroup[s.GroupSize], s)
	}
	memTarget := func(groupSize int) float64 {
		if groupSize == 1 {
			return singleMemoryTarget
		}
		return groupMemoryTarget
	}
	for _, gs := range groupSizes {
		ss := byGroup[gs]
		for _, s := range ss {
			if s.Jobs >= memoryCheckedFrom || len(ss) == 1 {
				checks = append(checks, atMost(fmt.Sprintf("%s: memory per pending job excluding payloads (bytes)", s.name()), s.NoCache.OutsidePerJob, memTarget(gs), "%.1f"))
			}
		}
		for _, sl := range slopes {
			if sl.GroupSize == gs {
				checks = append(checks, atMost(fmt.Sprintf("%s: memory per added job excluding payloads, %s → %s (bytes)", groupsOf(gs), count(sl.From), count(sl.To)), sl.NoCachePerJob, memTarget(gs), "%.1f"))
			}
		}
		if k := len(ss); k > 1 && ss[0].DrainCPUPerJob > 0 && ss[0].DrainJobsPerS > 0 {
			small, large := ss[0], ss[k-1]
			checks = append(checks,
				atMost(fmt.Sprintf("%s: drain CPU per job at %s pending ÷ at %s", groupsOf(gs), count(large.Jobs), count(small.Jobs)), large.DrainCPUPerJob/small.DrainCPUPerJob, 1.3, "%.2f"),
				atLeast(fmt.Sprintf("%s: drain jobs/s at %s pending ÷ at %s", groupsOf(gs), count(large.Jobs), count(small.Jobs)), large.DrainJobsPerS/small.DrainJobsPerS, 0.8, "%.2f"),
				atLeast(fmt.Sprintf("%s: admission of a published backlog of %s, jobs/s", groupsOf(gs), count(large.Jobs)), float64(large.Jobs)/large.AdmitSeconds, 100_000, "%.0f"))
		}
		for _, s := range ss {
			if s.Jobs >= 1_000_000 && s.RestartSeconds > 0 {
				checks = append(checks, atMost(fmt.Sprintf("%s: restart to the first status answer, seconds per million pending jobs", s.name()), s.RestartSeconds/(float64(s.Jobs)/1e6), restartPerMillion, "%.1f"))
			}
		}
	}
	singles, large := byGroup[1], byGroup[1000]
	for i := len(singles) - 1; i >= 0; i-- {
		j := slices.IndexFunc(large, func(s ScaleStep) bool { return s.Jobs == singles[i].Jobs })
		if j < 0 || large[j].DrainJobsPerS <= 0 {
			continue
		}
		checks = append(checks, atLeast(fmt.Sprintf("drain jobs/s of %s single jobs ÷ of %s in groups of 1,000", count(singles[i].Jobs), count(large[j].Jobs)), singles[i].DrainJobsPerS/large[j].DrainJobsPerS, singleDrainShare, "%.2f"))
		break
	}
	return checks
}

// groupsOf names a group size: "single jobs", "groups of 10".
func groupsOf(groupSize int) string {
	if groupSize == 1 {
		return "single jobs"
	}
	return "groups of " + count(groupSize)
}

// name names the step's backlog: "1,000,000 single jobs", "100,000 jobs in groups of 10".
func (s ScaleStep) name() string {
	if s.GroupSize == 1 {
		return count(s.Jobs) + " single jobs"
	}
	return count(s.Jobs) + " jobs in " + groupsOf(s.GroupSize)
}

// median is the median of f over xs (the mean of the middle two for an even count).
func median[T any](xs []T, f func(T) float64) float64 {
	v := make([]float64, len(xs))
	for i, x := range xs {
		v[i] = f(x)
	}
	slices.Sort(v)
	if n := len(v); n%2 == 0 {
		return (v[n/2-1] + v[n/2]) / 2
	}
	return v[len(v)/2]
}

// scaleStep measures one size on a fresh deployment; with defaults, the coordinator's default
// configuration and the drain, else with the payload cache off.
func scaleStep(ctx context.Context, env *Env, cfg ScaleConfig, step *ScaleStep, defaults bool) (err error) {
	n := step.Jobs
	// Finely for the memory per pending job; with the default configuration at the runtime's
	// default rate, so that recording allocations does not slow the admission it times.
	runtime.MemProfileRate = cfg.profileRate(n)
	if defaults {
		runtime.MemProfileRate = defaultMemProfileRate
	}
	settle(ctx)
	d, err := env.deploy(ctx, "scale")
	if err != nil {
		return err
	}
	defer d.closeInto(&err)
	ccfg := coordinator.Config{}
	if !defaults {
		ccfg.PayloadCacheBytes = 1 // each cached message is evicted at once
	}
	coord, err := d.StartCoordinator(ccfg)
	if err != nil {
		return err
	}
	if err := d.WaitStatus(inproc.Answering); err != nil {
		return err
	}
	disp, err := d.Dispatcher()
	if err != nil {
		return err
	}
	sizes := make([]int, step.Groups)
	for i := range sizes {
		sizes[i] = min(step.GroupSize, n-i*step.GroupSize)
	}
	if defaults {
		step.PeakRSSFromBase = resetPeakRSS()
	}
	coord0, server0, heap0 := attributedHeap(coordinatorPackages), attributedHeap(serverPackages), heapInUse()

	what := "payload cache off"
	if defaults {
		what = "default configuration"
	}
	env.progressf("scale: publishing %s (%s)", step.name(), what)
	start := time.Now()
	stopAdmitProfile := func() {}
	if cfg.AdmitProfile != "" && defaults {
		f, err := os.Create(fmt.Sprintf("%s-g%d-%d.prof", cfg.AdmitProfile, step.GroupSize, n))
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("scale: admission profile: %w (not with --cpuprofile in the same process)", err)
		}
		stopAdmitProfile = pprof.StopCPUProfile
	}
	defer func() { stopAdmitProfile() }()
	payload := make([]byte, cfg.PayloadSize)
	if err := publishAll(ctx, disp, fmt.Sprint("s", n, "-"), sizes, payload); err != nil {
		return err
	}
	published := time.Since(start)
	var last *coordinator.Status
	if err := d.WaitStatus(func(st *coordinator.Status) (bool, string) {
		last = st
		return st.Totals.Admitted >= uint64(n), fmt.Sprintf("the coordinator to admit %d jobs (%d so far)", n, st.Totals.Admitted)
	}); err != nil {
		return err
	}
	admitted := time.Since(start)
	stopAdmitProfile()
	stopAdmitProfile = func() {}
	coord1, server1, heap1 := attributedHeap(coordinatorPackages), attributedHeap(serverPackages), heapInUse()
	m := ScaleMemory{
		CoordBytes:   int64(coord1) - int64(coord0),
		ProcessBytes: int64(heap1) - int64(heap0),
	}
	m.OutsideBytes = m.ProcessBytes - (int64(server1) - int64(server0))
	m.CoordPerJob = float64(m.CoordBytes) / float64(n)
	m.OutsidePerJob = float64(m.OutsideBytes) / float64(n)
	m.ProcessPerJob = float64(m.ProcessBytes) / float64(n)
	if !defaults {
		step.NoCache = m
		if cfg.HeapProfile != "" {
			return writeHeapProfile(fmt.Sprintf("%s-g%d-%d.heap", cfg.HeapProfile, step.GroupSize, n))
		}
		return nil
	}
	step.Default = m
	step.AdmitSeconds, step.PublishSeconds = admitted.Seconds(), published.Seconds()
	step.Admitted, step.Pending = last.Totals.Admitted, last.Jobs["pending"]
	step.PeakRSSBytes = peakRSS()

	var took []time.Duration
	for range 5 {
		t := time.Now()
		if _, err := d.Status(); err != nil {
			return err
		}
		took = append(took, time.Since(t))
	}
	slices.Sort(took)
	step.StatusMS = ms(took[len(took)/2])

	// Drain a part of the backlog (the heap profile sampling at its default rate: at the fine
	// rates the memory figures need, recording allocations' stacks took up to a third of the
	// drain's CPU, more at the smaller sizes, which sample more finely).
	k := min(cfg.DrainJobs, n/2)
	env.progressf("scale: running %s jobs from a backlog of %s", count(k), step.name())
	var (
		started      atomic.Int64
		mu           sync.Mutex
		t1, tk       time.Time
		cpu1, cpuK   time.Duration
		drained      = make(chan struct{})
		drainedClose sync.Once
		stopProfile  = func() {}
	)
	if cfg.DrainProfile != "" {
		f, err := os.Create(fmt.Sprintf("%s-g%d-%d.prof", cfg.DrainProfile, step.GroupSize, n))
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("scale: drain profile: %w (not with --cpuprofile in the same process)", err)
		}
		stopProfile = pprof.StopCPUProfile
	}
	defer func() { stopProfile() }() // on an early return; after the drain it is stopped before the restart
	_, svc, err := d.Worker(worker.Config{ID: "drain", Concurrency: cfg.Concurrency}, func(context.Context, *worker.Job) ([]byte, error) {
		switch i := started.Add(1); {
		case i == 1:
			mu.Lock()
			t1, cpu1 = time.Now(), processCPU()
			mu.Unlock()
		case i == int64(k):
			mu.Lock()
			tk, cpuK = time.Now(), processCPU()
			mu.Unlock()
			drainedClose.Do(func() { close(drained) })
		}
		return nil, nil
	})
	if err != nil {
		return err
	}
	select {
	case <-drained:
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(inproc.WaitTimeout):
		return fmt.Errorf("%d of %d jobs ran within %v", started.Load(), k, inproc.WaitTimeout)
	}
	if err := svc.Stop(); err != nil {
		return err
	}
	stopProfile()
	stopProfile = func() {}
	mu.Lock()
	step.DrainJobs = k
	if el := tk.Sub(t1); el > 0 {
		step.DrainJobsPerS = float64(k-1) / el.Seconds()
		step.DrainCPUPerJob = float64((cpuK - cpu1).Microseconds()) / float64(k-1)
	}
	mu.Unlock()

	// Restart: stop the coordinator (a clean stop gives up the lease) and time a new one from its
	// start to its first status answer (the loop answers only once replay is done) that holds
	// every job not yet ended. Not every job admitted: a group can complete during the drain
	// (the busy shares of no-op jobs are mostly noise, so the groups do not drain evenly), and
	// its jobs are purged then. The worker is stopped, and its reports are stored: once the
	// coordinator has applied the report of every handler call (a job done, or a report found
	// stale or refused), no group completes from here on, and none of the jobs counted below is
	// deleted before the stop.
	ran := uint64(started.Load())
	var before *coordinator.Status
	if err := d.WaitStatus(func(st *coordinator.Status) (bool, string) {
		before = st
		applied := st.Totals.Done + st.Totals.StaleReports + st.Totals.RejectedReports
		return applied >= ran, fmt.Sprintf("the coordinator to apply the reports of the drain's %d handler calls (%d applied)", ran, applied)
	}); err != nil {
		return err
	}
	open := before.Jobs["pending"] + before.Jobs["delayed"] + before.Jobs["running"] + before.Jobs["retrywait"]
	if err := coord.Stop(); err != nil {
		return err
	}
	env.progressf("scale: restarting the coordinator on a backlog of %s", count(int(open)))
	start = time.Now()
	if _, err := d.StartCoordinator(coordinator.Config{}); err != nil {
		return err
	}
	if err := d.WaitStatusWithin(restartTimeout, func(st *coordinator.Status) (bool, string) {
		return st.Epoch > last.Epoch && st.Totals.Admitted >= open, fmt.Sprintf("a new coordinator to replay the %d jobs not ended (%d jobs admitted so far)", open, st.Totals.Admitted)
	}); err != nil {
		return err
	}
	step.RestartSeconds = time.Since(start).Seconds()
	return nil
}

// writeHeapProfile writes the heap profile (live objects as of the last collection, which
// attributedHeap just ran) to path.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	return errors.Join(pprof.Lookup("heap").WriteTo(f, 0), f.Close())
}

// restartTimeout bounds the restart's replay (10M pending jobs replay in minutes).
const restartTimeout = 15 * time.Minute

// settleMax bounds settle.
var settleMax = 5 * time.Second

// settle waits, at most settleMax, until no coordinator of an earlier deployment holds memory any
// more: after a deployment closed, the NATS client's pending heartbeat timers keep its consumers,
// and through their callbacks the coordinator, reachable for about ten seconds.
func settle(ctx context.Context) {
	deadline := time.Now().Add(settleMax)
	for attributedHeap(coordinatorPackages) > 512<<10 && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
	}
}

// scaleChildSpec is what a child process measures for the scale scenario: one backlog, in one
// configuration.
type scaleChildSpec struct {
	Config    ScaleConfig `json:"config"`
	GroupSize int         `json:"group_size"`
	Jobs      int         `json:"jobs"`
	Groups    int         `json:"groups"`
	Defaults  bool        `json:"defaults"`
}

// scaleStepChild runs scaleStep in a fresh process (see Env.ChildCommand) and merges what it
// measured into step.
func scaleStepChild(ctx context.Context, env *Env, cfg ScaleConfig, step *ScaleStep, defaults bool) error {
	var got ScaleStep
	err := env.runChild(ctx, childSpec{Scale: &scaleChildSpec{Config: cfg, GroupSize: step.GroupSize, Jobs: step.Jobs, Groups: step.Groups, Defaults: defaults}}, func(c *child) error {
		return c.read(&got)
	})
	if err != nil {
		return err
	}
	if !defaults {
		step.NoCache = got.NoCache
		return nil
	}
	got.NoCache = step.NoCache
	*step = got
	return nil
}

// runScaleChild is the child process's side of an isolated scale measurement: it runs the
// measurement sp describes and writes the step to w as JSON.
func runScaleChild(ctx context.Context, env *Env, sp scaleChildSpec, w io.Writer) error {
	cfg := sp.Config
	if err := cfg.defaults(); err != nil {
		return err
	}
	if sp.GroupSize < 1 || sp.Jobs < 1 || sp.Groups < 1 {
		return fmt.Errorf("scale: a child's backlog needs a group size, jobs and groups")
	}
	step := &ScaleStep{GroupSize: sp.GroupSize, Jobs: sp.Jobs, Groups: sp.Groups}
	if err := scaleStep(ctx, env, cfg, step, sp.Defaults); err != nil {
		return err
	}
	return json.NewEncoder(w).Encode(step)
}

// publishAll publishes the groups from several goroutines without waiting for their outcomes;
// groups of one job are single jobs, submitted in bulk from one goroutine (SubmitMany), as a
// producer with a backlog of one-off jobs would.
func publishAll(ctx context.Context, d *dispatcher.Dispatcher, prefix string, sizes []int, payload []byte) error {
	if !slices.ContainsFunc(sizes, func(n int) bool { return n != 1 }) {
		return submitAll(ctx, d, prefix, len(sizes), payload)
	}
	const publishers = 8
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		wg   sync.WaitGroup
		next atomic.Int64
	)
	inproc.Labeled("producer", func() {
		for range publishers {
			wg.Go(func() {
				for {
					i := int(next.Add(1)) - 1
					if i >= len(sizes) || ctx.Err() != nil {
						return
					}
					if _, err := d.Publish(ctx, fmt.Sprint(prefix, i), repeatJobs(sizes[i], payload)); err != nil {
						cancel(fmt.Errorf("publish: %w", err))
						return
					}
				}
			})
		}
		wg.Wait()
	})
	return context.Cause(ctx)
}

// submitAll submits n single jobs, groups prefix0 to prefix<n-1>, in chunks of SubmitMany.
func submitAll(ctx context.Context, d *dispatcher.Dispatcher, prefix string, n int, payload []byte) error {
	const chunk = 1000
	var err error
	inproc.Labeled("producer", func() {
		singles := make([]dispatcher.Single, 0, chunk)
		for i := 0; i < n && err == nil; i += chunk {
			singles = singles[:0]
			for j := i; j < min(n, i+chunk); j++ {
				singles = append(singles, dispatcher.Single{Group: fmt.Sprint(prefix, j), Job: dispatcher.Job{Payload: payload}})
			}
			if _, serr := d.SubmitMany(ctx, singles); serr != nil {
				err = fmt.Errorf("submit: %w", serr)
			}
		}
	})
	return err
}

// Section implements Result.
func (r *ScaleResult) Section() Section {
	c := r.Config
	f1 := func(v float64) string { return fmt.Sprintf("%.1f", v) }
	mem := Table{
		Title:  "Heap growth per pending job, bytes (payload cache off: the target; default: as configured out of the box)",
		Header: []string{"jobs per group", "pending jobs", "groups", "coordinator, cache off", "outside server, cache off", "coordinator, default", "outside server, default", "whole process, default"},
	}
	for _, s := range r.Steps {
		mem.Rows = append(mem.Rows, []string{
			count(s.GroupSize), count(s.Jobs), count(s.Groups), f1(s.NoCache.CoordPerJob), f1(s.NoCache.OutsidePerJob),
			f1(s.Default.CoordPerJob), f1(s.Default.OutsidePerJob), f1(s.Default.ProcessPerJob),
		})
	}
	tables := []Table{mem}
	if len(r.Slopes) > 0 {
		st := Table{
			Title:  "Growth per added job between sizes, bytes (the slope: constant if memory is linear in jobs)",
			Header: []string{"jobs per group", "from → to", "coordinator, cache off", "outside server, cache off", "outside server, default", "whole process, default"},
		}
		for _, s := range r.Slopes {
			st.Rows = append(st.Rows, []string{count(s.GroupSize), count(s.From) + " → " + count(s.To), f1(s.NoCacheCoord), f1(s.NoCachePerJob), f1(s.DefaultPerJob), f1(s.DefaultProcess)})
		}
		tables = append(tables, st)
	}
	cost := Table{
		Title:  "Scheduling from the backlog (default configuration)",
		Header: []string{"jobs per group", "pending jobs", "published in s", "admitted in s", "admitted jobs/s", "status ms", "drain jobs/s", "drain CPU µs/job", "restart s", "peak RSS"},
	}
	for _, s := range r.Steps {
		cost.Rows = append(cost.Rows, []string{
			count(s.GroupSize), count(s.Jobs), fmt.Sprintf("%.1f", s.PublishSeconds), fmt.Sprintf("%.1f", s.AdmitSeconds), rate(float64(s.Jobs) / s.AdmitSeconds), msec(s.StatusMS), rate(s.DrainJobsPerS), fmt.Sprintf("%.0f", s.DrainCPUPerJob), fmt.Sprintf("%.2f", s.RestartSeconds), mib(s.PeakRSSBytes),
		})
	}
	tables = append(tables, cost)
	if c.Repeat > 1 {
		runs := Table{
			Title:  fmt.Sprintf("The drain's %d runs (the table above gives their medians), run by run: jobs/s, CPU µs per job", c.Repeat),
			Header: []string{"jobs per group", "pending jobs"},
		}
		for i := range c.Repeat {
			runs.Header = append(runs.Header, fmt.Sprintf("run %d", i+1))
		}
		for _, s := range r.Steps {
			row := []string{count(s.GroupSize), count(s.Jobs)}
			for _, d := range s.DrainRuns {
				row = append(row, fmt.Sprintf("%s, %.0f", rate(d.JobsPerS), d.CPUPerJob))
			}
			runs.Rows = append(runs.Rows, row)
		}
		tables = append(tables, runs)
	}
	outside := "the whole process's heap growth minus the embedded server's own allocations (heap profile)"
	if !r.Embedded {
		outside = "the whole process's heap growth (the server is external)"
	}
	var rs []int
	for _, st := range r.Steps {
		rs = append(rs, c.profileRate(st.Jobs))
	}
	slices.Sort(rs)
	rates := strings.ReplaceAll(strings.Trim(fmt.Sprint(slices.Compact(rs)), "[]"), " ", ", ")
	where := "Each measurement ran in a fresh child process (weave bench --child), so the process held that deployment alone."
	if !r.Isolated {
		where = "The measurements ran in this process: objects of earlier deployments still being released can make small sizes noisy (run weave bench scale for isolated child processes)."
	}
	sec := Section{
		Scenario: r.Scenario(),
		Setup: fmt.Sprintf("For each size in groups of each size (%s jobs per group), two fresh deployments (coordinator payload cache off, then default configuration): publish the jobs (%d-byte payloads; single jobs submitted in bulk from one goroutine, groups published from 8) with no worker, wait until the coordinator has admitted all of them, measure the heap; then, with the default configuration, one worker × %d slots runs %s jobs from the backlog.%s",
			joinCounts(c.GroupSizes), c.PayloadSize, c.Concurrency, count(c.DrainJobs), repeated(c.Repeat)),
		Tables: tables,
		Notes: []string{
			where,
			"Coordinator: growth of the live heap allocated with a function of package coordinator, internal/jobindex or spreader on the stack, from the Go heap profile (runtime.MemProfileRate = " + rates + " bytes, scaled for sampling as pprof does), after garbage collection. It misses what the NATS client allocates and the coordinator keeps.",
			"Outside server: " + outside + ": the coordinator's full footprint, including messages the NATS client allocated and the coordinator keeps, plus the dispatcher's and the connections' buffers.",
			"Payload cache off: coordinator.Config.PayloadCacheBytes = 1 (every message is evicted as it is added): the memory per pending job excluding payloads, which the target is about. The default cache keeps jobs' messages from the feed (payload, headers, subject) up to 32 MiB, counting each message's payload, headers and bookkeeping: a bounded amount, so its share per pending job falls as the backlog grows.",
			"Drain: one worker runs jobs from the backlog; jobs/s and process CPU per job between the first and the last handler call, the whole process included. Admission is timed with the default configuration, the heap profile sampling at the runtime's default rate (its coordinator and outside-server figures are coarse at small sizes). Restart: after the drain the coordinator stops cleanly (giving up its lease) and a new one starts; from its start to its first status answer (replay done, ready to release) that holds every job not ended before the stop.",
		},
		Checks: r.Checks,
	}
	if m := r.ManyProducers; m != nil {
		sec.Notes = append(sec.Notes, fmt.Sprintf("Single jobs from many producers: %s jobs submitted at once by %d producers, each on its own connection with its own Dispatcher, each its share in bulk (SubmitMany of 1,000 at a time), in a deployment of their own: admitted in %.2f s, %s jobs/s.",
			count(m.Jobs), m.Producers, m.AdmitSeconds, rate(float64(m.Jobs)/m.AdmitSeconds)))
	}
	return sec
}

// repeated says how the default configuration's runs were repeated, if they were.
func repeated(n int) string {
	if n < 2 {
		return ""
	}
	return fmt.Sprintf(" The default configuration's deployment ran %d times per backlog, backlog after backlog, round after round; the drain figures are the runs' medians, the other figures the last run's.", n)
}

// joinCounts lists numbers: "1, 10, 1,000".
func joinCounts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = count(n)
	}
	return strings.Join(s, ", ")
}
