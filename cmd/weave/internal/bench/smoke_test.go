package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weavejobs/weave/internal/leakcheck"
	"github.com/weavejobs/weave/spreader"
)

// testChildEnv, set in the environment of a child process started by a test (Env.ChildCommand
// is this test binary), makes TestMain run RunChild on the last argument instead of the tests.
const testChildEnv = "WEAVE_BENCH_TEST_CHILD"

// testChildEnvOf is an Env whose child processes run this test binary.
func testChildEnvOf() *Env {
	return &Env{ChildCommand: []string{os.Args[0]}, ChildEnv: []string{testChildEnv + "=1"}}
}

func TestMain(m *testing.M) {
	if os.Getenv(testChildEnv) != "" {
		if err := RunChild(context.Background(), &Env{}, os.Args[len(os.Args)-1], os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	leakcheck.Main(m)
}

// TestSmoke runs the throughput and fairness scenarios end to end with tiny parameters, on
// embedded servers, through Run and the renderers. It checks the results are complete and
// consistent, not that targets are met (that depends on the machine). Not parallel: it measures
// time and CPU.
func TestSmoke(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := Config{
		Throughput: ThroughputConfig{Jobs: 500, Groups: 10, Concurrency: 8, Rounds: 1},
		Fairness:   FairnessConfig{Work: 150 * time.Millisecond},
	}
	start := time.Now()
	r, err := Run(ctx, &Env{}, []string{"fairness", "throughput"}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ran in %v", time.Since(start))
	if len(r.Results) != 2 {
		t.Fatalf("%d results", len(r.Results))
	}
	// In the order of Scenarios, whatever the order asked.
	thr, ok := r.Results[0].(*ThroughputResult)
	if !ok {
		t.Fatalf("first result %T", r.Results[0])
	}
	if len(thr.Fleets) != 1 || thr.Fleets[0].Shape != (Shape{1, 8}) {
		t.Fatalf("throughput fleets %+v", thr.Fleets)
	}
	f := thr.Fleets[0]
	if len(f.Rounds) != 1 || f.WeaveJobsPerSec <= 0 || f.RawJobsPerSec <= 0 || math.Abs(f.Ratio-f.WeaveJobsPerSec/f.RawJobsPerSec) > 1e-9 {
		t.Errorf("throughput %+v", f)
	}
	if r := f.Rounds[0]; math.Abs(f.CPURatio-r.WeaveCPUSeconds/r.RawCPUSeconds) > 1e-9 {
		t.Errorf("CPU ratio %.3f, round %+v", f.CPURatio, r)
	}
	if runtime.GOOS == "linux" && (f.WeaveSyscallsPerJob <= 0 || f.RawSyscallsPerJob <= 0) {
		t.Errorf("I/O system calls per job %.2f (Weave) and %.2f (raw): want both counted", f.WeaveSyscallsPerJob, f.RawSyscallsPerJob)
	}
	if f.JobsPerWorkBatch < 1 || f.JobsPerReportMsg < 1 || f.PullsPerBatch <= 0 {
		t.Errorf("jobs per batch %.1f, per report %.1f, pulls per batch %.2f", f.JobsPerWorkBatch, f.JobsPerReportMsg, f.PullsPerBatch)
	}
	if len(thr.Checks) != 2 || thr.Checks[0].Value != f.Ratio || thr.Checks[0].Limit != 0.5 || thr.Checks[1].Value != f.CPURatio || thr.Checks[1].Limit != 2.5 {
		t.Errorf("throughput checks %+v", thr.Checks)
	}

	fair, ok := r.Results[1].(*FairnessResult)
	if !ok {
		t.Fatalf("second result %T", r.Results[1])
	}
	if len(fair.Runs) != 2 || fair.Runs[0].Policy != spreader.RoundRobin.String() || fair.Runs[1].Policy != spreader.LeastInFlight.String() {
		t.Fatalf("fairness runs %+v", fair.Runs)
	}
	for _, run := range fair.Runs {
		if run.BusySlots <= 0 || run.BusySlots > 6.01 || run.WindowToS <= run.WindowFromS {
			t.Errorf("%s: %.2f busy slots, window %.3f–%.3f s", run.Policy, run.BusySlots, run.WindowFromS, run.WindowToS)
		}
		for _, g := range run.Groups {
			if g.Jobs != int(150/g.TaskMS) || g.CompletionS <= 0 || g.IdealCompletionS <= 0 || g.InFlight <= 0 {
				t.Errorf("%s: group %+v", run.Policy, g)
			}
		}
	}
	if len(fair.Checks) != 3 {
		t.Errorf("fairness checks %+v", fair.Checks)
	}
	if r.Machine.CPUs < 1 || r.Machine.NATSServer == "" || r.Finished.Before(r.Started) {
		t.Errorf("report %+v", r)
	}
}

// TestThroughputFleets: by default the throughput scenario measures the four fleets it sets
// targets for; --workers or --concurrency (either) names one fleet instead.
func TestThroughputFleets(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg  ThroughputConfig
		want []Shape
	}{
		{ThroughputConfig{}, []Shape{{1, 64}, {1, 8}, {4, 8}, {16, 4}}},
		{ThroughputConfig{Workers: 16}, []Shape{{16, 64}}},
		{ThroughputConfig{Concurrency: 4}, []Shape{{1, 4}}},
		{ThroughputConfig{Workers: 4, Concurrency: 8, Shapes: []Shape{{2, 2}}}, []Shape{{4, 8}}},
		{ThroughputConfig{Shapes: []Shape{{2, 2}}}, []Shape{{2, 2}}},
	} {
		cfg := c.cfg
		if err := cfg.defaults(); err != nil || !slices.Equal(cfg.Shapes, c.want) || cfg.Rounds != 3 {
			t.Errorf("%+v: fleets %v, %d rounds, %v; want %v, 3 rounds", c.cfg, cfg.Shapes, cfg.Rounds, err, c.want)
		}
	}
	if err := (&ThroughputConfig{Shapes: []Shape{{0, 4}}}).defaults(); err == nil {
		t.Error("a fleet of no worker was accepted")
	}
	for sh, want := range map[Shape]float64{{1, 64}: 0.75, {1, 256}: 0.75, {2, 32}: 0.5, {16, 4}: 0.5, {1, 8}: 0.5} {
		if got := minRatio(sh); got != want {
			t.Errorf("fleet %s: throughput target %.2f, want %.2f", sh, got, want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	var c Config
	if err := c.Validate(Scenarios); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if c.Throughput.Jobs != 20_000 || c.Latency.Rate != 1000 || c.Fairness.Slots != 6 || c.Weights.Slots != 8 || c.Spread.Jobs != 5000 || c.Herd.Slots != 200 || len(c.Scale.Sizes) != 2 {
		t.Errorf("defaults %+v", c)
	}
	for name, bad := range map[string]Config{
		"throughput": {Throughput: ThroughputConfig{Jobs: 10, Groups: 20}},
		"latency":    {Latency: LatencyConfig{PayloadSize: 4}},
		"fairness":   {Fairness: FairnessConfig{Work: time.Millisecond}},
		"weights":    {Weights: WeightsConfig{Slots: 1}},
		"limits":     {Limits: LimitsConfig{Backlog: 5}},
		"single":     {Single: SingleConfig{Rate: 1_000_000}},
		"affinity":   {Affinity: AffinityConfig{Workers: 1}},
		"spread":     {Spread: SpreadConfig{MinTask: 5 * time.Millisecond, MaxTask: time.Millisecond}},
		"herd":       {Herd: HerdConfig{Workers: 10, Slots: 5}},
		"scale":      {Scale: ScaleConfig{Sizes: []int{10}}},
	} {
		if err := bad.Validate([]string{name}); err == nil {
			t.Errorf("%s: bad config accepted: %+v", name, bad)
		}
	}
	if err := c.Validate([]string{"nope"}); err == nil {
		t.Error("unknown scenario accepted")
	}
}

// TestScaleSmall runs the scale scenario in this process with tiny sizes, and one measurement
// through RunChild, the child process's entry point. Memory figures at these sizes are
// noise; it checks they are all there.
func TestScaleSmall(t *testing.T) {
	settleMax = 0 // the figures are not checked: do not wait for earlier deployments' memory
	defer func() { settleMax = 5 * time.Second }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := RunScale(ctx, &Env{}, ScaleConfig{Sizes: []int{1000, 200}, GroupSizes: []int{100, 1}, DrainJobs: 50, Repeat: 3})
	if err != nil {
		t.Fatal(err)
	}
	// Checks, per group size: memory per added job between the sizes (the sizes are too small
	// for the memory at each), then the drain's cost and rate and the admission at the largest
	// size against the smallest; last, single jobs' admission from 100 producers at once.
	if res.Isolated || len(res.Steps) != 4 || len(res.Slopes) != 2 || len(res.Checks) != 9 {
		t.Fatalf("result %+v", res)
	}
	if m := res.ManyProducers; m == nil || m.Producers != manyProducers || m.Jobs != 1000 || m.AdmitSeconds <= 0 {
		t.Fatalf("single jobs from many producers: %+v", m)
	}
	for i, s := range res.Steps {
		if wantGroup := []int{1, 1, 100, 100}[i]; s.GroupSize != wantGroup {
			t.Fatalf("step %d in groups of %d, want %d: group sizes first, then sizes", i, s.GroupSize, wantGroup)
		}
		// Coarsely sampled with the default configuration: its coordinator figure may be 0.
		if s.Admitted != uint64(s.Jobs) || s.Pending != uint64(s.Jobs) || s.Groups != s.Jobs/s.GroupSize || s.DrainJobs != 50 || s.DrainJobsPerS <= 0 || s.NoCache.CoordBytes == 0 || s.Default.ProcessBytes == 0 {
			t.Errorf("step %+v", s)
		}
		if len(s.DrainRuns) != 3 {
			t.Fatalf("%d drain runs at %d jobs, want 3", len(s.DrainRuns), s.Jobs)
		}
		rates := []float64{s.DrainRuns[0].JobsPerS, s.DrainRuns[1].JobsPerS, s.DrainRuns[2].JobsPerS}
		slices.Sort(rates)
		if s.DrainJobsPerS != rates[1] {
			t.Errorf("drain rate %.0f at %d jobs, want the runs' median %.0f (%v)", s.DrainJobsPerS, s.Jobs, rates[1], rates)
		}
	}
	if got := res.Checks[1].Value; got != res.Steps[1].DrainCPUPerJob/res.Steps[0].DrainCPUPerJob {
		t.Errorf("drain cost check measured %v, want the largest size's median over the smallest's", got)
	}
	if res.Steps[0].Jobs != 200 {
		t.Errorf("sizes not sorted: %d first", res.Steps[0].Jobs)
	}

	var out bytes.Buffer
	spec := `{"scale":{"config":{"group_sizes":[100],"drain_jobs":20},"group_size":100,"jobs":300,"groups":3,"defaults":false}}`
	if err := RunChild(ctx, &Env{}, spec, nil, &out); err != nil {
		t.Fatal(err)
	}
	var step ScaleStep
	if err := json.Unmarshal(out.Bytes(), &step); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if step.Jobs != 300 || step.NoCache.CoordBytes == 0 || step.Default.CoordBytes != 0 || step.DrainJobs != 0 {
		t.Errorf("child step %+v", step)
	}
	for _, bad := range []string{"{", "{}"} {
		if err := RunChild(ctx, &Env{}, bad, nil, &out); err == nil {
			t.Errorf("spec %s accepted", bad)
		}
	}
}

// TestFleetSmall runs the fleet scenario's three parts at tiny sizes, the idle coordinator in a
// child process (this test binary), and checks that every figure is there and consistent and
// that the targets are checked where they apply; not that they are met. Not parallel: it
// measures time and CPU.
func TestFleetSmall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := FleetConfig{
		Submitters: []int{1, 20}, Rate: 200, Duration: 300 * time.Millisecond, SubmitFleet: Shape{2, 2},
		Shapes: []Shape{{2, 2}, {8, 1}}, Jobs: 300, Groups: 10, Rounds: 1,
		IdleWorkers: 10, Idle: time.Second,
	}
	res, err := RunFleet(ctx, testChildEnvOf(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Submitters) != 2 {
		t.Fatalf("submitters %+v", res.Submitters)
	}
	for _, s := range res.Submitters {
		for side, x := range map[string]SingleSide{"Weave": s.Weave, "raw": s.Raw} {
			if x.Jobs != 60 || x.SubmitSeen.N != 60 || x.SubmitSeen.P50 <= 0 || x.SubmitSeen.P99 < x.SubmitSeen.P50 {
				t.Errorf("%d submitters, %s: %+v", s.Submitters, side, x)
			}
			if runtime.GOOS == "linux" && x.CPUPerJob <= 0 {
				t.Errorf("%d submitters, %s: no CPU per job", s.Submitters, side)
			}
		}
		if s.Unfinished != 0 || s.WeaveSeconds <= 0 {
			t.Errorf("%d submitters: %d unfinished, %.3f s", s.Submitters, s.Unfinished, s.WeaveSeconds)
		}
	}
	if g := res.Submitters[1]; math.Abs(g.WeaveCPUGrowth-g.Weave.CPUPerJob/res.Submitters[0].Weave.CPUPerJob) > 1e-9 || res.Submitters[0].WeaveCPUGrowth != 1 {
		t.Errorf("CPU growth %.3f and %.3f", res.Submitters[0].WeaveCPUGrowth, g.WeaveCPUGrowth)
	}
	if len(res.Workers) != 2 || res.Workers[0].Shape != (Shape{2, 2}) || res.Workers[1].Shape != (Shape{8, 1}) {
		t.Fatalf("worker fleets %+v", res.Workers)
	}
	for _, f := range res.Workers {
		if len(f.Rounds) != 1 || f.WeaveJobsPerSec <= 0 || f.RawJobsPerSec <= 0 || f.Ratio <= 0 || f.JobsPerWorkBatch < 1 {
			t.Errorf("fleet %s: %+v", f.Shape, f)
		}
	}
	idle := res.Idle
	// The window is the child's, from the parent's "start" to its "stop" a second later: a
	// little shorter when "start" took longer to arrive than "stop".
	if idle == nil || !idle.Isolated || !idle.ServerIncluded || idle.Workers != 10 || idle.Seconds < 0.9 || idle.ServerCPUPct < 0 || idle.WorkersCPUPct < 0 || idle.PullsPerWorkerS < 0 {
		t.Fatalf("idle %+v", idle)
	}
	// No count reaches the submitters' targets, and neither 8 × 8 nor 500 × 2 ran: a throughput
	// and a CPU check per worker fleet, and the idle check.
	if len(res.Checks) != 5 || res.Checks[4].Value != idle.ServerCPUPct || res.Checks[4].Limit != 3 {
		t.Errorf("checks %+v", res.Checks)
	}
	var out bytes.Buffer
	if err := (&Report{Results: []Result{res}}).WriteText(&out); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(out.Bytes(), []byte("an idle fleet")) || !bytes.Contains(out.Bytes(), []byte("raw JetStream with the same fleet")) {
		t.Errorf("report:\n%s", out.String())
	}
}

// TestFleetChecks: the submitters' targets apply from 1,000 submitters, and the CPU growth of
// the worker fleets compares 500 × 2 with 8 × 8.
func TestFleetChecks(t *testing.T) {
	t.Parallel()
	r := &FleetScenarioResult{
		Submitters: []SubmittersResult{
			{Submitters: 1, Weave: SingleSide{CPUPerJob: 100}, WeaveCPUGrowth: 1},
			{Submitters: 1000, Weave: SingleSide{CPUPerJob: 120, SubmitSeen: Quantiles{N: 3000, P50: 0.8, P99: 6}}, WeaveCPUGrowth: 1.2},
		},
		Workers: []FleetResult{
			{Shape: Shape{8, 8}, Ratio: 0.7, CPURatio: 2, WeaveCPUPer1000: 0.04, RawCPUPer1000: 0.02},
			{Shape: Shape{500, 2}, Ratio: 0.4, CPURatio: 3, WeaveCPUPer1000: 0.1, RawCPUPer1000: 0.03},
		},
		Idle: &IdleFleetResult{Workers: 1000, Isolated: true, ServerIncluded: true, ServerCPUPct: 2},
	}
	var got []string
	for _, c := range r.checks() {
		got = append(got, fmt.Sprintf("%s %s %s", c.Name, c.Measured, c.Verdict()))
	}
	want := []string{
		"1,000 submitters: submit → outcome p50 (ms) 0.80 PASS",
		"1,000 submitters: submit → outcome p99 (ms) 6.00 MISS",
		"1,000 submitters: CPU per job ÷ with 1 1.20 PASS",
		"8 × 8: Weave ÷ raw JetStream (same fleet) throughput 0.70 PASS",
		"8 × 8: CPU per job, Weave ÷ raw JetStream (same fleet) 2.00 PASS",
		"500 × 2: Weave ÷ raw JetStream (same fleet) throughput 0.40 MISS",
		"500 × 2: CPU per job, Weave ÷ raw JetStream (same fleet) 3.00 MISS",
		"Weave CPU per job at 500 × 2 ÷ at 8 × 8 2.50 MISS",
		"1,000 idle workers: coordinator + server CPU (% of one core) 2.00 PASS",
	}
	if !slices.Equal(got, want) {
		t.Errorf("checks:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	r.Idle.Isolated = false
	if n := len(r.checks()); n != len(want)-1 {
		t.Errorf("%d checks with the idle fleet in one process, want %d: its figure includes the workers", n, len(want)-1)
	}
	// A count that failed misses a check of its own, beside the figures it measured, if any.
	r.Submitters = append(r.Submitters, SubmittersResult{Submitters: 3000, Error: "coordinator lease lost"})
	if cs := r.checks(); len(cs) != len(want) || cs[3].Name != "3,000 submitters: the run completes" || cs[3].Pass {
		t.Errorf("checks with a failed count: %+v", cs)
	}
	// A worker fleet that failed: its own miss instead of its two checks, and no CPU growth.
	r.Workers[1] = FleetResult{Shape: Shape{500, 2}, Error: "stalled"}
	if cs := r.checks(); len(cs) != len(want)-2 || cs[6].Name != "500 × 2: the run completes" || cs[6].Pass {
		t.Errorf("checks with a failed fleet: %+v", cs)
	}
}

// TestChainsSmoke runs the chains scenario small: every follow-up runs once, after its group's
// job ended, the waiting groups count and are all released once their group is done.
func TestChainsSmoke(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := RunChains(ctx, &Env{}, ChainsConfig{FollowUps: 20, Interval: time.Millisecond, Waiting: 200, Window: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.FollowUpsRan != 20 || r.FollowUpDelay.N != 20 || r.SingleStart.N != 20 || r.FollowUpDelay.P10 < 0 {
		t.Fatalf("follow-ups ran %d, delays %+v, singles %+v", r.FollowUpsRan, r.FollowUpDelay, r.SingleStart)
	}
	if r.HeapPerWaiting <= 0 || r.ReleaseAllS <= 0 || r.ReleasedPerSec <= 0 {
		t.Fatalf("waiting groups: %+v", r)
	}
}
