package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/weavejobs/weave/worker"
)

func newWorkerCmd(g *globals) *cobra.Command {
	var (
		conn    connFlags
		cfg     worker.Config
		h       execHandler
		metrics string
	)
	cmd := &cobra.Command{
		Use:   "worker [flags] -- command [args...]",
		Short: "Run a command for each job, until SIGINT or SIGTERM",
		Long: `Worker runs the command once per job, up to --concurrency at a time.

The command gets the job's payload on stdin, and these environment variables:
  WEAVE_JOB_ID       the job's ID (unique and increasing in the namespace)
  WEAVE_JOB_KEY      the job's key, empty if it has none
  WEAVE_JOB_GROUP    the job's group
  WEAVE_JOB_ATTEMPT  the attempt, 1 for the first
  WEAVE_NAMESPACE, WEAVE_WORKER_ID

Its stdout, at most --max-output bytes, is the job's result. Its stderr goes to the worker's
stderr, each line prefixed "[job ID key "K" attempt N] ", and its end becomes the error of a
failed attempt. The exit status decides the outcome:
  0          success
  65         permanent failure (EX_DATAERR): the job fails at once, without retries
  other      retryable failure (75, EX_TEMPFAIL, is the conventional one): the coordinator
             retries the job later, until its attempts are exhausted
A command killed by a signal, or whose output is too large, fails too (too large: permanently).

When the job's timeout (or --timeout) passes, the command gets SIGTERM, and SIGKILL
--kill-grace later; on Unix the whole process group is signaled, and the command runs in its
own process group so a Ctrl-C in the terminal reaches only the worker.

On SIGINT or SIGTERM the worker stops taking jobs and lets the running ones finish for up to
--drain-timeout, then cancels them as above. A second signal ends it at once.`,
		Example: `  weave worker --resources eu,gpu --concurrency 8 -- ./render.sh
  weave worker -- sh -c 'wc -c'`,
		Args: argsWanted(1, -1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := exec.LookPath(args[0])
			if err != nil {
				return usageErrorf("command %q: %v", args[0], err)
			}
			if h.killGrace < 0 {
				return usageErrorf("--kill-grace %v is negative", h.killGrace)
			}
			h.argv = append([]string{path}, args[1:]...)
			h.maxOutput = cfg.MaxResultSize
			if h.maxOutput == 0 {
				h.maxOutput = worker.DefaultMaxResultSize
			}
			cfg.Namespace = conn.namespace
			h.namespace, h.workerID = cfg.Namespace, cfg.ID
			h.stderr = cmd.ErrOrStderr()
			cfg.Logger = g.log.With().Str("component", "worker").Logger()

			// Said before connecting, which waits for a server that is not up yet.
			if err := cfg.Validate(); errors.Is(err, worker.ErrInvalidConfig) {
				return usageError{errors.New(inFlagWords(err.Error(), workerFlags))}
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			nc, err := conn.connect(ctx, "worker "+cfg.ID, true, g.log)
			if err != nil {
				return err
			}
			defer closeConn(nc)
			w, err := worker.New(nc, cfg, &h)
			if errors.Is(err, worker.ErrInvalidConfig) {
				return usageError{errors.New(inFlagWords(err.Error(), workerFlags))}
			} else if err != nil {
				return err
			}
			if err := serveMetrics(ctx, metrics, w.Collector(), g.log); err != nil {
				return err
			}
			concurrency := cfg.Concurrency
			if concurrency == 0 {
				concurrency = runtime.GOMAXPROCS(0) // the worker's default; logging 0 would mislead
			}
			g.log.Info().Str("id", cfg.ID).Strs("resources", cfg.Resources).Int("concurrency", concurrency).
				Str("command", strings.Join(args, " ")).Str("nats", nc.ConnectedUrlRedacted()).Msg("worker starting")
			err = w.Run(ctx)
			st := w.Stats()
			g.log.Info().Uint64("ok", st.JobsOK).Uint64("failed", st.JobsFailed).Uint64("returned", st.Returned).Msg("worker stopped")
			if errors.Is(err, worker.ErrDuplicateID) {
				return fmt.Errorf("worker ID %q is in use by another running worker of namespace %q: give each worker its own --id", cfg.ID, cfg.Namespace)
			}
			return err
		},
	}
	f := cmd.Flags()
	conn.register(f)
	f.StringVar(&cfg.ID, "id", defaultWorkerID(), "worker ID, unique among running workers: 1-64 characters of [A-Za-z0-9_-]")
	f.StringSliceVar(&cfg.Resources, "resources", nil, "resources this worker holds, comma-separated (jobs may require or prefer them)")
	f.IntVar(&cfg.Concurrency, "concurrency", 0, "jobs run at once (0: one per CPU)")
	f.DurationVar(&cfg.DefaultTimeout, "timeout", 0, "timeout of an attempt whose job sets none (0: no timeout)")
	f.DurationVar(&cfg.DrainTimeout, "drain-timeout", worker.DefaultDrainTimeout, "at shutdown, how long running jobs may finish before they are canceled")
	f.DurationVar(&h.killGrace, "kill-grace", 5*time.Second, "time between SIGTERM and SIGKILL of a command that timed out or was canceled")
	f.IntVar(&cfg.MaxResultSize, "max-output", worker.DefaultMaxResultSize, "largest stdout a command may write, in bytes; more fails the job permanently")
	f.DurationVar(&cfg.HeartbeatInterval, "heartbeat-interval", worker.DefaultHeartbeatInterval, "period of the heartbeats to the coordinator")
	f.DurationVar(&cfg.IdleHeartbeatInterval, "idle-heartbeat-interval", 0, "period of the heartbeats while the worker runs and holds nothing (default 5 × --heartbeat-interval, and 30s once dormant: idle for a pull's expiry)")
	f.Int("replicas", 1, "ignored: a worker does not create streams")
	_ = f.MarkDeprecated("replicas", "a worker no longer creates streams: 'weave init --replicas N' or the coordinator's --replicas does")
	f.StringVar(&metrics, "metrics-addr", "", "serve Prometheus metrics on http://ADDR/metrics, e.g. :9091 (default: off)")
	f.DurationVar(&cfg.Lease, "lease", worker.DefaultLease, "how long a crashed worker's jobs stay assigned to it before another worker gets them")
	f.DurationVar(&cfg.NamespaceWait, "wait-namespace", time.Minute, "how long to wait at start for the namespace's streams, which the coordinator or 'weave init' creates (0: not at all)")
	return cmd
}

// defaultWorkerID is the host name and process ID, made a valid worker ID.
func defaultWorkerID() string {
	host, _ := os.Hostname()
	host = strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		case r == '.':
			return '-'
		}
		return -1
	}, host)
	if len(host) > 48 {
		host = host[:48]
	}
	if host == "" {
		host = "worker"
	}
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}

// workerFlags names the worker.Config fields that a flag of weave worker sets (see inFlagWords).
var workerFlags = map[string]string{
	"ID": "--id", "Resources": "--resources", "Concurrency": "--concurrency", "DefaultTimeout": "--timeout",
	"DrainTimeout": "--drain-timeout", "MaxResultSize": "--max-output", "HeartbeatInterval": "--heartbeat-interval", "IdleHeartbeatInterval": "--idle-heartbeat-interval",
	"Lease": "--lease", "NamespaceWait": "--wait-namespace",
}
