package bench_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/weavejobs/weave/cmd/weave/internal/bench"
)

// End-to-end benchmarks: the throughput and latency scenarios of weave bench (this package),
// run once per op, each on its own embedded JetStream server (file storage, temporary
// directory) with every component on its own connection, as separate processes would be. The
// machine they run on may be shared and noisy, so the throughput scenario measures a reference in
// the same run (a raw JetStream work queue) and the report should quote ratios and CPU per job
// rather than absolute rates alone.
//
//	go test -run='^$' -bench=. -benchtime=1x ./cmd/weave/internal/bench/      # what CI runs
//	go test -run='^$' -bench=Throughput -benchtime=3x ./cmd/weave/internal/bench/
//
// Other sizes and rates, CPU profiles split by component and Markdown for BENCHMARKS.md: weave
// bench (--jobs, --rate, --cpuprofile, --markdown).

// runScenario runs one op's scenario on a fresh embedded server, silent unless WEAVE_TEST_LOG is
// set; the scenario stops every component and the server before it returns.
func runScenario[R any](b *testing.B, run func(context.Context, *bench.Env) (R, error)) R {
	b.Helper()
	ctx, cancel := context.WithTimeout(b.Context(), 5*time.Minute)
	defer cancel()
	res, err := run(ctx, &bench.Env{Log: testLogger()})
	if err != nil {
		b.Fatal(err)
	}
	return res
}

// testLogger writes the components' logs to stderr when WEAVE_TEST_LOG is set, as the
// integration tests do; otherwise it is silent.
func testLogger() zerolog.Logger {
	if os.Getenv("WEAVE_TEST_LOG") == "" {
		return zerolog.Nop()
	}
	return zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr}).Level(zerolog.DebugLevel).With().Timestamp().Str("c", "bench").Logger()
}

// BenchmarkThroughput runs the throughput scenario (bench.RunThroughput, one round per op):
// 20,000 no-op jobs of 128 bytes in 200 groups of varying size through Weave and, on the same
// server, as many 128-byte messages through a raw JetStream work queue (async publish, pull
// consume, ack). It reports, over all ops:
//
//	weave-jobs/s    jobs ÷ time from the first Publish to the last group's WaitSummary
//	raw-jobs/s      messages ÷ time from the first publish to the last ack (flushed)
//	ratio           weave-jobs/s ÷ raw-jobs/s
//	ran-jobs/s      jobs ÷ time from the first Publish to the last handler call (Weave)
//	*-cpu-µs/job    CPU time of the whole process (server included) per job, while each path ran
//	                (getrusage; Unix only): less sensitive to other load than the rates
//	weave-cores     CPU time ÷ wall time of the Weave path: near GOMAXPROCS means CPU bound
//	jobs/batch      jobs per work batch received by the workers
//	jobs/report     jobs per report message persisted by the workers
//
// Sub-benchmarks vary the worker fleet (workers × Concurrency), the coordinator's Prefetch
// (0: adaptive, the default) and its MaxBatch (0: the default, 64).
func BenchmarkThroughput(b *testing.B) {
	for _, bc := range []struct {
		workers, conc, prefetch, batch int
	}{
		{1, 64, 0, 0}, // the coordinator's defaults
		{1, 8, 0, 0},  // few slots
		{4, 8, 0, 0},
		{16, 4, 0, 0},
		{2, 32, 0, 0},
		{1, 64, 1, 64}, // a fixed window of one job beyond the slots
		{1, 64, 256, 256},
		{1, 256, 0, 0},
	} {
		prefetch, batch := fmt.Sprint(bc.prefetch), fmt.Sprint(bc.batch)
		if bc.prefetch == 0 {
			prefetch = "auto"
		}
		if bc.batch == 0 {
			batch = "default"
		}
		name := fmt.Sprintf("w%dx%d/prefetch=%s/batch=%s", bc.workers, bc.conc, prefetch, batch)
		cfg := bench.ThroughputConfig{Jobs: 20_000, Workers: bc.workers, Concurrency: bc.conc, Prefetch: bc.prefetch, MaxBatch: bc.batch, Rounds: 1}
		b.Run(name, func(b *testing.B) { benchmarkThroughput(b, cfg) })
	}
}

func benchmarkThroughput(b *testing.B, cfg bench.ThroughputConfig) {
	var (
		n                                   float64 // jobs in all, per path
		weave, ran, raw, weaveCPU, rawCPU   float64 // seconds in all
		batchesPerJob, reportsPerJob, loops float64
	)
	for b.Loop() {
		res := runScenario(b, func(ctx context.Context, env *bench.Env) (*bench.FleetResult, error) {
			r, err := bench.RunThroughput(ctx, env, cfg)
			if err != nil {
				return nil, err
			}
			return &r.Fleets[0], nil
		})
		for _, r := range res.Rounds {
			n += float64(cfg.Jobs)
			weave, ran, raw = weave+r.WeaveSeconds, ran+r.RanSeconds, raw+r.RawSeconds
			weaveCPU, rawCPU = weaveCPU+r.WeaveCPUSeconds, rawCPU+r.RawCPUSeconds
		}
		// Every op runs as many jobs: the mean of batches per job gives jobs per batch in all.
		batchesPerJob += 1 / res.JobsPerWorkBatch
		reportsPerJob += 1 / res.JobsPerReportMsg
		loops++
	}
	weaveRate, rawRate := n/weave, n/raw
	b.ReportMetric(weaveRate, "weave-jobs/s")
	b.ReportMetric(rawRate, "raw-jobs/s")
	b.ReportMetric(weaveRate/rawRate, "ratio")
	b.ReportMetric(n/ran, "ran-jobs/s")
	if weaveCPU > 0 {
		b.ReportMetric(weaveCPU*1e6/n, "weave-cpu-µs/job")
		b.ReportMetric(weaveCPU/weave, "weave-cores")
	}
	if rawCPU > 0 {
		b.ReportMetric(rawCPU*1e6/n, "raw-cpu-µs/job")
	}
	b.ReportMetric(loops/batchesPerJob, "jobs/batch")
	b.ReportMetric(loops/reportsPerJob, "jobs/report")
}

// BenchmarkLatency runs the latency scenario (bench.RunLatency): jobs submitted open loop at
// 1,000 jobs/s for 3 s per op, to one worker of 16 slots running a no-op handler. It reports in
// µs, each percentile averaged over the ops and each maximum the largest:
//
//	start-*   submit → handler start: from just before the job is handed to the dispatcher
//	          (the Publish call for a group's first job, the iterator's yield for later jobs)
//	          to the handler's first line; the submit time travels in the payload
//	done-*    submit → outcome seen by the producer
//	ret-*     handler return → outcome seen: the completion path alone
//	lag-max   the worst lateness of a submission against its schedule (the generator's own
//	          delay; if large, the load was not open loop)
//
// Sub-benchmarks: g1 publishes each job as its own group (one Publish per job); g10 publishes
// groups of 10, each job yielded at its scheduled time while the group is open. "follow" sees
// outcomes through one ordered consumer over the RESULTS stream; "wait" calls Handle.Wait per
// group, as a producer would, which creates a consumer per group, and counts a job done when its
// group's Wait returns (so done includes the wait for the group's later jobs, up to 9 intervals).
// There is no g1/wait: each Wait holds a consumer on the RESULTS stream, and the server allows
// 1,000 per stream by default, which 1,000 single-job groups a second exceed as soon as the
// coordinator falls a second behind.
func BenchmarkLatency(b *testing.B) {
	for _, bc := range []struct {
		name string
		cfg  bench.LatencyConfig
	}{
		{"g1/follow", bench.LatencyConfig{GroupSize: 1}},
		{"g10/follow", bench.LatencyConfig{GroupSize: 10}},
		{"g10/wait", bench.LatencyConfig{GroupSize: 10, Wait: true}},
	} {
		b.Run(bc.name, func(b *testing.B) { benchmarkLatency(b, bc.cfg) })
	}
}

func benchmarkLatency(b *testing.B, cfg bench.LatencyConfig) {
	var start, done, ret []bench.Quantiles
	var lag float64
	for b.Loop() {
		res := runScenario(b, func(ctx context.Context, env *bench.Env) (*bench.LatencyResult, error) {
			return bench.RunLatency(ctx, env, cfg)
		})
		start, done, ret = append(start, res.SubmitStart), append(done, res.SubmitDone), append(ret, res.ReturnDone)
		lag = max(lag, res.MaxLagMS)
	}
	reportQuantiles(b, "start", start, "p50", "p90", "p99", "max")
	reportQuantiles(b, "done", done, "p50", "p90", "p99", "max")
	reportQuantiles(b, "ret", ret, "p50", "p99")
	b.ReportMetric(lag*1000, "lag-max-µs")
}

// reportQuantiles reports the ops' quantiles (milliseconds) as name-which-µs: a percentile's
// mean over the ops, the largest maximum.
func reportQuantiles(b *testing.B, name string, qs []bench.Quantiles, which ...string) {
	for _, w := range which {
		var v float64
		for _, q := range qs {
			switch w {
			case "p50":
				v += q.P50 / float64(len(qs))
			case "p90":
				v += q.P90 / float64(len(qs))
			case "p99":
				v += q.P99 / float64(len(qs))
			case "max":
				v = max(v, q.Max)
			}
		}
		b.ReportMetric(v*1000, name+"-"+w+"-µs")
	}
}

// BenchmarkFleet runs the fleet scenario (bench.RunFleet) at sizes that keep CI quick: single
// jobs at 500/s for 2 s from 1 and from 100 submitters (each its own connection and
// Dispatcher) to 4 × 8 workers, and 5,000 no-op jobs through 8 × 8 and 50 × 8 workers (each its
// own connection), each beside raw JetStream with the same fleet. weave bench fleet runs the
// issue's sizes (up to 3,000 submitters and 1,000 workers) and the idle fleet. It reports, from
// the last op:
//
//	s<n>-p50-µs, s<n>-p99-µs   submit → outcome with n submitters
//	s<n>-cpu-growth            CPU per job with n submitters ÷ with 1
//	w<W>x<S>-ratio             Weave ÷ raw JetStream throughput with that fleet
//	w<W>x<S>-cpu-ratio         CPU per job, Weave ÷ raw JetStream
func BenchmarkFleet(b *testing.B) {
	cfg := bench.FleetConfig{
		Parts:      []string{"submitters", "workers"},
		Submitters: []int{1, 100}, Duration: 2 * time.Second,
		Shapes: []bench.Shape{{Workers: 8, Concurrency: 8}, {Workers: 50, Concurrency: 8}}, Jobs: 5000, Rounds: 1,
	}
	var res *bench.FleetScenarioResult
	for b.Loop() {
		res = runScenario(b, func(ctx context.Context, env *bench.Env) (*bench.FleetScenarioResult, error) {
			return bench.RunFleet(ctx, env, cfg)
		})
	}
	for _, s := range res.Submitters {
		b.ReportMetric(s.Weave.SubmitSeen.P50*1000, fmt.Sprintf("s%d-p50-µs", s.Submitters))
		b.ReportMetric(s.Weave.SubmitSeen.P99*1000, fmt.Sprintf("s%d-p99-µs", s.Submitters))
		b.ReportMetric(s.WeaveCPUGrowth, fmt.Sprintf("s%d-cpu-growth", s.Submitters))
	}
	for _, f := range res.Workers {
		b.ReportMetric(f.Ratio, fmt.Sprintf("w%dx%d-ratio", f.Shape.Workers, f.Shape.Concurrency))
		b.ReportMetric(f.CPURatio, fmt.Sprintf("w%dx%d-cpu-ratio", f.Shape.Workers, f.Shape.Concurrency))
	}
}
