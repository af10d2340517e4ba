package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/weavejobs/weave/cmd/weave/internal/bench"
	"github.com/weavejobs/weave/internal/config"
)

// benchOptions are weave bench's flags beyond the scenarios' configurations.
type benchOptions struct {
	conn       connFlags
	json, md   bool
	jsonFile   string
	mdFile     string
	full       bool
	strict     bool
	dir        string
	cpuProfile string
	memProfile string
	scaleSizes []int
	inProcess  bool
	child      string // set in a child process started for one measurement
	replicas   int
	natsServer string
}

func newBenchCmd(g *globals) *cobra.Command {
	var (
		o   benchOptions
		cfg bench.Config
	)
	cmd := &cobra.Command{
		Use:   "bench [scenario...]",
		Short: "Measure Weave: throughput, latency, single, fairness, weights, limits, affinity, spread, herd, fleet, scale",
		Long: `Bench measures Weave end to end in this process, each figure beside a reference measured in
the same run where one exists (the machine may be shared and noisy: ratios matter more than
absolute rates), and prints each scenario's numbers, its target and PASS or MISS.

Scenarios (all of them, in this order, when none is named; each takes well under a minute but
fleet, about five):

  throughput  no-op jobs end to end with 1 × 64, 1 × 8, 4 × 8 and 16 × 4 workers × slots, each
              against a raw JetStream work queue on the same server: throughput and CPU per job
  latency     open-loop submission at a fixed rate: submit → start and submit → outcome
  single      single jobs (one message each) at 1,000/s, each submitter waiting, against raw
              JetStream
  fairness    6 slots, groups of 10, 5 and 1 ms tasks, under round robin and least in-flight
  weights     8 slots, groups of 10 and 1 ms tasks with weights 3 and 1, then 1 and 3
  limits      delayed jobs' lateness; a rate and concurrency limit's achieved rate under backlog
  affinity    warm hits of jobs preferring unheld resources, with learned affinity and without
  spread      groups of Zipf sizes: per-group concurrency and gaps, against a simulated FIFO
  chains      a group's completion → its follow-up's start, beside a single job's submit →
              start; memory and CPU of 10,000 groups waiting on one, then their release
  herd        200 idle slots in 8 workers: pulls, CPU, wakeups, ack and report messages per job
  fleet       many submitters (1 to 3,000) and workers (8 × 8 to 1,000 × 1), each on its own
              connection, beside raw JetStream with the same fleet; an idle fleet of 1,000
              workers (several minutes; --fleet-* flags pick the sizes)
  scale       coordinator memory per pending job, admission, drain and restart at 10k and 100k
              jobs (1M with --full), as single jobs and in groups of 10 and 1,000

By default every scenario runs on its own embedded JetStream server (file storage in a
temporary directory, removed afterwards). With --nats it runs on that server instead, each
scenario in a fresh namespace that is deleted at its end. Every component runs in this process
on its own connection, so CPU and memory figures are the whole process's; the output says what
each one includes. With --replicas 3 it starts a cluster of 3 nats-server processes and runs
there, every stream (Weave's and the references') at 3 replicas.`,
		Example: `  weave bench                         # everything, default sizes
  weave bench throughput latency      # two scenarios
  weave bench scale --full            # memory at 10k, 100k and 1M pending jobs
  weave bench scale --scale-group-size 1 --scale-sizes 10000,1000000   # single jobs alone
  weave bench --markdown > results.md # a table for BENCHMARKS.md
  weave bench fleet --fleet-parts workers --fleet-shapes 8x8,500x2   # two worker fleets
  weave bench --replicas 3 throughput --shapes 4x8,200x4   # on 3 nats-server processes, R3
  weave bench --nats nats://host:4222 --json`,
		Args: usageArgs(func(_ *cobra.Command, args []string) error {
			for _, a := range args {
				if !slices.Contains(bench.Scenarios, a) {
					return fmt.Errorf("unknown scenario %q: want one of %s", a, strings.Join(bench.Scenarios, ", "))
				}
			}
			return nil
		}),
		RunE: func(cmd *cobra.Command, args []string) error {
			line := commandLine(cmd, args)
			if o.json && o.md {
				return usageErrorf("--json and --markdown exclude each other")
			}
			if len(o.scaleSizes) > 0 {
				cfg.Scale.Sizes = o.scaleSizes
			} else if o.full {
				cfg.Scale.Sizes = bench.FullScaleSizes
			}
			scenarios := args
			if len(scenarios) == 0 {
				scenarios = bench.Scenarios
			}
			if err := cfg.Validate(scenarios); err != nil {
				return usageError{err}
			}
			log := g.log
			if f := cmd.Flag("log-level"); f == nil || !f.Changed {
				log = g.log.Level(zerolog.WarnLevel) // components' info logs would drown the results
			}
			env := &bench.Env{Dir: o.dir, NamespacePrefix: o.conn.namespace, Log: log, Progress: cmd.ErrOrStderr()}
			if err := env.Validate(); err != nil {
				return usageErrorf("--namespace: %v", err)
			}
			if err := config.Replicas("--replicas", o.replicas); err != nil {
				return usageError{err}
			}
			env.Replicas = o.replicas
			if o.child != "" {
				// Secrets come from the parent through the environment.
				o.conn.password = envOr(benchChildPassword, o.conn.password)
				o.conn.token = envOr(benchChildToken, o.conn.token)
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			if o.replicas > 1 && !cmd.Flags().Changed("nats") && o.child == "" {
				c, err := startBenchCluster(ctx, o.replicas, o.natsServer, o.dir, cmd.ErrOrStderr())
				if err != nil {
					return err
				}
				defer c.stop()
				if _, ok := c.cpu(); ok {
					env.ServerCPU = func() time.Duration { d, _ := c.cpu(); return d }
				}
				// As if given: the components and the child processes connect to the cluster.
				if err := cmd.Flags().Set("nats", c.urls); err != nil {
					return err
				}
			}
			if cmd.Flags().Changed("nats") {
				if err := o.conn.validate(); err != nil {
					return err
				}
				env.Dial = func(ctx context.Context, name string) (*nats.Conn, error) {
					return o.conn.connect(ctx, name, false, log)
				}
			}
			if o.cpuProfile != "" {
				f, err := os.Create(o.cpuProfile)
				if err != nil {
					return err
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return err
				}
				defer pprof.StopCPUProfile()
			}
			if o.child != "" {
				return bench.RunChild(ctx, env, o.child, cmd.InOrStdin(), cmd.OutOrStdout())
			}
			if (slices.Contains(scenarios, "scale") || slices.Contains(scenarios, "fleet")) && !o.inProcess && !testing.Testing() {
				child, childEnv, err := childCommand(cmd, &o)
				if err != nil {
					return err
				}
				env.ChildCommand, env.ChildEnv = child, childEnv
			}
			var memProfile *os.File
			if o.memProfile != "" {
				// Created now, so a bad path is said before the run, not after it.
				f, err := os.Create(o.memProfile)
				if err != nil {
					return err
				}
				memProfile = f
			}
			report, err := bench.Run(ctx, env, args, cfg)
			if memProfile != nil {
				if perr := writeAllocProfile(memProfile); perr != nil {
					return errors.Join(err, perr)
				}
			}
			if report == nil {
				return err
			}
			report.Command = line
			report.Machine.Weave, _ = buildVersion()
			out := cmd.OutOrStdout()
			var werr error
			switch {
			case o.json:
				werr = report.WriteJSON(out)
			case o.md:
				werr = report.WriteMarkdown(out)
			default:
				werr = report.WriteText(out)
			}
			for _, save := range []struct {
				path  string
				write func(io.Writer) error
			}{{o.jsonFile, report.WriteJSON}, {o.mdFile, report.WriteMarkdown}} {
				if save.path != "" {
					werr = errors.Join(werr, writeFile(save.path, save.write))
				}
			}
			if err != nil || werr != nil {
				return errors.Join(err, werr)
			}
			if o.strict && report.Missed() > 0 {
				return silentError{fmt.Errorf("%s missed", count(report.Missed(), "target"))}
			}
			return nil
		},
	}
	f := cmd.Flags()
	o.conn.register(f)
	if fl := f.Lookup("nats"); fl != nil {
		fl.Usage = "NATS server URL to run on (default: an embedded server per scenario)"
		fl.DefValue = ""
	}
	if fl := f.Lookup("namespace"); fl != nil {
		_ = fl.Value.Set("bench")
		fl.DefValue = "bench"
		fl.Usage = "prefix of the fresh namespace each scenario uses: prefix-scenario-random (at most 18 characters)"
	}
	f.BoolVar(&o.json, "json", false, "print the results as JSON")
	f.BoolVar(&o.md, "markdown", false, "print the results as Markdown tables (for BENCHMARKS.md)")
	f.StringVar(&o.jsonFile, "json-file", "", "also write the results as JSON to this file")
	f.StringVar(&o.mdFile, "markdown-file", "", "also write the results as Markdown to this file")
	f.BoolVar(&o.strict, "strict", false, "exit with status 1 when a target is missed")
	f.StringVar(&o.dir, "dir", "", "directory for the embedded servers' storage (default: the system's temporary directory)")
	f.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile to this file (samples carry the label component=...)")
	f.StringVar(&o.memProfile, "memprofile", "", "write an allocation profile (what every allocation site allocated during the run, sampled) to this file at the end")
	f.BoolVar(&o.inProcess, "scale-in-process", false, "scale, fleet: measure in this process instead of fresh child processes (scale: noisier at small sizes; fleet: the idle coordinator's CPU is not told apart from the workers')")
	f.StringVar(&o.child, "child", "", "run one isolated measurement (JSON spec), talking JSON lines on stdin and stdout: how weave bench runs its children")
	_ = f.MarkHidden("child")
	f.IntVar(&o.replicas, "replicas", 0, "run on a cluster of this many nats-server processes (started and stopped by the bench, unless --nats names one), every stream at this many replicas")
	f.StringVar(&o.natsServer, "nats-server", "", "--replicas: the nats-server binary (default: nats-server on $PATH, else built with the go command from this module's version)")
	f.BoolVar(&o.full, "full", false, "scale: also measure 1,000,000 pending jobs")
	f.IntSliceVar(&o.scaleSizes, "scale-sizes", nil, "scale: pending job counts to measure, e.g. 10000,100000,1000000,10000000 (overrides --full)")
	f.IntVar(&cfg.Scale.DrainJobs, "scale-drain-jobs", 0, "scale: jobs run from each backlog to time the drain (default 5,000; at most half the backlog)")
	f.IntSliceVar(&cfg.Scale.GroupSizes, "scale-group-size", nil, "scale: jobs per group of the backlogs, each measured at every size (default 1,10,1000: single jobs, small groups, large groups)")
	f.StringVar(&cfg.Scale.DrainProfile, "scale-drain-profile", "", "scale: write a CPU profile of each backlog's drain alone to PREFIX-g<group size>-<jobs>.prof")
	f.StringVar(&cfg.Scale.AdmitProfile, "scale-admit-profile", "", "scale: write a CPU profile of each backlog's publishing and admission to PREFIX-g<group size>-<jobs>.prof")
	f.StringVar(&cfg.Scale.HeapProfile, "scale-heap-profile", "", "scale: write a heap profile of each backlog (payload cache off, every job admitted) to PREFIX-g<group size>-<jobs>.heap")
	f.IntVar(&cfg.Scale.Repeat, "scale-repeat", 0, "scale: run each backlog's default deployment (drain, restart) this many times, backlogs interleaved, and report the drain's medians (default 3)")

	f.IntVar(&cfg.Throughput.Jobs, "jobs", 20_000, "throughput: jobs per round")
	f.IntVar(&cfg.Throughput.Groups, "groups", 200, "throughput: groups the jobs are split into")
	f.IntVar(&cfg.Throughput.Rounds, "rounds", 3, "throughput: rounds per fleet (Weave and the reference alternate which runs first; the targets take the median round)")
	f.IntVar(&cfg.Throughput.Workers, "workers", 0, "throughput: measure this fleet alone: workers, each with --concurrency slots (default: the fleets 1 × 64, 1 × 8, 4 × 8 and 16 × 4; 1 if only --concurrency is set)")
	f.IntVar(&cfg.Throughput.Concurrency, "concurrency", 0, "throughput: measure this fleet alone: slots per worker (64 if only --workers is set)")
	f.Var(shapesValue{&cfg.Throughput.Shapes}, "shapes", "throughput: the fleets to measure, workers x slots, e.g. 4x8,200x4 (default 1x64,1x8,4x8,16x4)")
	f.StringSliceVar(&cfg.Fleet.Parts, "fleet-parts", nil, "fleet: the parts to run, of submitters, workers, idle (default all)")
	f.IntSliceVar(&cfg.Fleet.Submitters, "fleet-submitters", nil, "fleet: the counts of submitters (default 1,100,1000,3000)")
	f.IntVar(&cfg.Fleet.Rate, "fleet-rate", 0, "fleet: single jobs per second from all submitters together (default 500)")
	f.DurationVar(&cfg.Fleet.Duration, "fleet-duration", 0, "fleet: submission time per count of submitters and side (default 6s)")
	f.Var(shapesValue{&cfg.Fleet.Shapes}, "fleet-shapes", "fleet: the worker fleets, workers x slots (default 8x8,50x8,200x4,500x2,1000x1)")
	f.IntVar(&cfg.Fleet.Jobs, "fleet-jobs", 0, "fleet: no-op jobs per round and fleet (default 20,000)")
	f.IntVar(&cfg.Fleet.Rounds, "fleet-rounds", 0, "fleet: rounds per worker fleet (default 3)")
	f.IntVar(&cfg.Fleet.IdleWorkers, "fleet-idle-workers", 0, "fleet: workers of one slot in the idle fleet (default 1,000)")
	f.DurationVar(&cfg.Fleet.Idle, "fleet-idle", 0, "fleet: the idle fleet's measured window, once its workers are dormant (default 1m)")
	f.StringVar(&cfg.Fleet.IdleProfile, "fleet-idle-profile", "", "fleet: write a CPU profile of the idle window of the coordinator and server's process to this file")
	f.IntVar(&cfg.Latency.Rate, "rate", 1000, "latency: jobs submitted per second")
	f.DurationVar(&cfg.Latency.Duration, "duration", 3*time.Second, "latency: how long jobs are submitted")
	f.DurationVar(&cfg.Single.Duration, "single-duration", 3*time.Second, "single: how long single jobs are submitted (at 1,000/s; longer runs give a steadier p99)")
	f.DurationVar(&cfg.Fairness.Work, "fairness-work", 3*time.Second, "fairness: handler time of each group's jobs in all")
	f.DurationVar(&cfg.Weights.Work, "weights-work", 6*time.Second, "weights: handler time of each group's jobs in all")
	f.IntVar(&cfg.Spread.Jobs, "spread-jobs", 5000, "spread: jobs")
	f.IntVar(&cfg.Spread.Groups, "spread-groups", 200, "spread: groups")
	f.IntVar(&cfg.Herd.Slots, "herd-slots", 200, "herd: idle slots in all")
	f.IntVar(&cfg.Herd.Workers, "herd-workers", 8, "herd: workers the slots are split across")
	f.DurationVar(&cfg.Herd.Idle, "herd-idle", 5*time.Second, "herd: idle window")
	return cmd
}

// commandLine reconstructs the command as given: its path, the flags set and the arguments.
func commandLine(cmd *cobra.Command, args []string) string {
	parts := []string{cmd.CommandPath()}
	parts = append(parts, args...)
	cmd.Flags().Visit(func(f *pflag.Flag) {
		switch f.Name {
		case "password", "token", "creds", "nkey", "user":
			parts = append(parts, "--"+f.Name+"=…")
		default:
			switch v := f.Value.String(); {
			case f.Value.Type() == "bool":
				parts = append(parts, "--"+f.Name)
			case strings.HasSuffix(f.Value.Type(), "Slice"):
				parts = append(parts, "--"+f.Name+"="+strings.Trim(v, "[]"))
			default:
				parts = append(parts, "--"+f.Name+"="+v)
			}
		}
	})
	return strings.Join(parts, " ")
}

// Secrets reach a child process in its environment, not on its command line, where other
// users of the machine could read them.
const (
	benchChildPassword = "WEAVE_BENCH_CHILD_PASSWORD"
	benchChildToken    = "WEAVE_BENCH_CHILD_TOKEN"
)

// childCommand returns the command that runs one measurement in a child process (this
// executable's bench command with the flags that say where and how to connect, and --child,
// followed by the spec the parent appends) and the environment to add for it.
func childCommand(cmd *cobra.Command, o *benchOptions) (args, env []string, err error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, fmt.Errorf("find this executable to run measurements in child processes (or use --scale-in-process): %w", err)
	}
	args = []string{exe, "bench"}
	keep := []string{"nats", "creds", "nkey", "user", "tlscert", "tlskey", "tlsca", "namespace", "dir", "log-level"}
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if slices.Contains(keep, f.Name) {
			args = append(args, "--"+f.Name+"="+f.Value.String())
		}
	})
	if f := cmd.Flag("log-level"); f != nil && f.Changed && !slices.Contains(args, "--log-level="+f.Value.String()) {
		args = append(args, "--log-level="+f.Value.String())
	}
	if o.conn.password != "" {
		env = append(env, benchChildPassword+"="+o.conn.password)
	}
	if o.conn.token != "" {
		env = append(env, benchChildToken+"="+o.conn.token)
	}
	return append(args, "--child"), env, nil
}

// writeFile creates path and writes it with write.
func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writeAllocProfile writes the allocations profile (alloc_space, alloc_objects: everything
// allocated since the process started, sampled) to f and closes it.
func writeAllocProfile(f *os.File) error {
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return fmt.Errorf("write allocation profile: %w", err)
	}
	return f.Close()
}

// shapesValue is a flag holding worker fleets: 4x8,200x4 (workers x slots per worker).
type shapesValue struct{ shapes *[]bench.Shape }

func (v shapesValue) String() string {
	if v.shapes == nil {
		return ""
	}
	parts := make([]string, len(*v.shapes))
	for i, sh := range *v.shapes {
		parts[i] = fmt.Sprintf("%dx%d", sh.Workers, sh.Concurrency)
	}
	return strings.Join(parts, ",")
}

func (v shapesValue) Set(s string) error {
	var shapes []bench.Shape
	for part := range strings.SplitSeq(s, ",") {
		var sh bench.Shape
		if _, err := fmt.Sscanf(strings.TrimSpace(part), "%dx%d", &sh.Workers, &sh.Concurrency); err != nil {
			return fmt.Errorf("fleet %q: want workers x slots, like 4x8", part)
		}
		shapes = append(shapes, sh)
	}
	*v.shapes = shapes
	return nil
}

func (v shapesValue) Type() string { return "fleets" }
