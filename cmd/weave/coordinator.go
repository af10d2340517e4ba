package main

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/spf13/cobra"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/spreader"
)

func newCoordinatorCmd(g *globals) *cobra.Command {
	var (
		conn    connFlags
		cfg     coordinator.Config
		policy  string
		metrics string
	)
	cmd := &cobra.Command{
		Use:   "coordinator",
		Short: "Run the coordinator of a namespace until SIGINT or SIGTERM",
		Long: `Coordinator admits groups, schedules their jobs onto worker pools and tracks every job's
state. Run one per namespace: a second one waits as a standby and takes over within
--lease-ttl (and about half a second) when the first dies. It creates the namespace's streams
that do not exist (see 'weave init'), and the lease bucket. It runs until SIGINT or SIGTERM:
whatever ends a term of coordination (the lease lost, writes failing for longer than
--lease-ttl, a failed replay), it logs the error and stands by again.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := spreader.ParsePolicy(policy)
			if err != nil {
				return usageError{err}
			}
			cfg.Policy = p
			if cfg.RetryBase > cfg.RetryMax {
				return usageErrorf("--retry-base %v is above --retry-max %v: the first retry would wait longer than the longest", cfg.RetryBase, cfg.RetryMax)
			}
			cfg.Namespace = conn.namespace
			cfg.Logger = g.log.With().Str("component", "coordinator").Logger()
			// The rules coordinator.New applies, checked before connecting: a bad flag is said
			// at once, not after waiting for a server.
			if err := cfg.Validate(); err != nil {
				return usageError{errors.New(inFlagWords(err.Error(), coordinatorFlags))}
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			nc, err := conn.connect(ctx, "coordinator", true, g.log)
			if err != nil {
				return err
			}
			defer closeConn(nc)
			c, err := coordinator.New(nc, cfg)
			if errors.Is(err, coordinator.ErrInvalidConfig) {
				return usageError{errors.New(inFlagWords(err.Error(), coordinatorFlags))}
			} else if err != nil {
				return err
			}
			if err := serveMetrics(ctx, metrics, c.Collector(), g.log); err != nil {
				return err
			}
			g.log.Info().Str("namespace", conn.namespace).Str("policy", p.String()).Str("nats", nc.ConnectedUrlRedacted()).Msg("coordinator starting")
			if err := standBy(ctx, c.Run, g.log); err != nil {
				return err
			}
			g.log.Info().Msg("coordinator stopped")
			return nil
		},
	}
	f := cmd.Flags()
	conn.register(f)
	f.IntVar(&cfg.Feeders, "feeders", 0, "groups scheduled at once (0: live worker slots + the prefetch window)")
	f.StringVar(&policy, "policy", spreader.LeastInFlight.String(), "scheduling policy: least-in-flight or round-robin")
	f.IntVar(&cfg.MaxInFlightPerGroup, "max-in-flight-per-group", 0, "cap on the jobs of one group running at once (0: none)")
	f.IntVar(&cfg.Prefetch, "prefetch", coordinator.DefaultPrefetch, "jobs released beyond the free slots, fleet-wide (0: adapts to the jobs' durations; -1: only into free slots)")
	f.IntVar(&cfg.QueueAhead, "queue-ahead", 0, "jobs per slot a worker may hold beyond its slots once its pool's are all taken (0: a batch of ~16 for short jobs, else 0; -1: never)")
	f.IntVar(&cfg.MaxAttempts, "max-attempts", coordinator.DefaultMaxAttempts, "attempts of jobs that do not set their own")
	f.DurationVar(&cfg.RetryBase, "retry-base", coordinator.DefaultRetryBase, "retry delay of the first retry (exponential backoff with full jitter)")
	f.DurationVar(&cfg.RetryMax, "retry-max", coordinator.DefaultRetryMax, "longest retry delay")
	f.IntVar(&cfg.MaxBatch, "max-batch", coordinator.DefaultMaxBatch, "jobs in one work batch, at most")
	f.DurationVar(&cfg.LeaseTTL, "lease-ttl", coordinator.DefaultLeaseTTL, "coordinator lease TTL: how fast a standby takes over")
	f.IntVar(&cfg.HeartbeatMisses, "heartbeat-misses", coordinator.DefaultHeartbeatMisses, "missed worker heartbeats after which a worker is dead")
	f.DurationVar(&cfg.RescueAfter, "rescue-after", coordinator.DefaultRescueAfter, "how long a pool may have no live worker before its jobs go to other pools")
	f.DurationVar(&cfg.AbandonAfter, "abandon-after", coordinator.DefaultAbandonAfter, "how long a group that is not sealed may go without a job or keep-alive before the coordinator seals it")
	f.DurationVar(&cfg.LearnAffinity, "learn-affinity", coordinator.DefaultLearnAffinity, "how long a pool that ran a job by fallback stays preferred for the resources the job prefers (negative: off)")
	f.DurationVar(&cfg.OutcomeLinger, "outcome-linger", coordinator.DefaultOutcomeLinger, "under load (above 16 outcome messages per linger), the least time between two outcome messages of one group; a complete group's outcomes and a light load's are written at once (negative: every outcome at once)")
	f.IntVar(&cfg.Streams.Replicas, "replicas", 0, "replicas of the streams and buckets this coordinator creates (3 for a cluster; 1 to 5; 0: those of the namespace's streams, or 1 for a new namespace)")
	f.DurationVar(&cfg.Streams.DedupWindow, "dedup-window", 0, "how long job keys are remembered for deduplication, if this coordinator creates the streams (0: 2m)")
	f.DurationVar(&cfg.Streams.ResultRetention, "result-retention", 0, "how long a finished group's outcomes (and failed jobs' payloads) are kept (0: 24h)")
	f.StringVar(&metrics, "metrics-addr", "", "serve Prometheus metrics on http://ADDR/metrics, e.g. :9090 (default: off)")
	registerAlarmFlags(f, &cfg.Alarms)
	return cmd
}

// Pauses between terms of a coordinator that keep failing.
const (
	termRetryFirst = 100 * time.Millisecond
	termRetryMax   = 5 * time.Second
)

// standBy runs terms of coordination until ctx ends (SIGINT or SIGTERM). Whatever ends a term
// (a lost lease, a cluster that could not take the coordinator's writes, a failed replay, the
// streams unreachable at start), the process stays up: it logs the error, pauses (doubling the
// pause while terms keep failing at once, up to termRetryMax) and runs again, as a standby that
// takes the lease once it is free. It returns an error only for what no retry can mend: a server
// too old for Weave; nil once ctx ends.
func standBy(ctx context.Context, run func(context.Context) error, log zerolog.Logger) error {
	pause := termRetryFirst
	for {
		began := time.Now()
		err := run(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, coordinator.ErrServerTooOld) {
			return err
		}
		if err == nil {
			err = errors.New("coordinator stopped by itself")
		}
		if time.Since(began) > termRetryMax {
			pause = termRetryFirst // a term that lasted: start backing off afresh
		}
		log.Error().Err(err).Stringer("retry_in", pause).Msg("coordinator term ended; standing by to take the lease again")
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		pause = min(2*pause, termRetryMax)
	}
}

// coordinatorFlags names the coordinator.Config fields that a flag of weave coordinator sets, so
// that a validation error speaks of the flag the user typed rather than the Go field.
var coordinatorFlags = map[string]string{
	"Feeders": "--feeders", "MaxInFlightPerGroup": "--max-in-flight-per-group", "Prefetch": "--prefetch", "QueueAhead": "--queue-ahead",
	"MaxAttempts": "--max-attempts", "RetryBase": "--retry-base", "RetryMax": "--retry-max",
	"MaxBatch": "--max-batch", "LeaseTTL": "--lease-ttl", "HeartbeatMisses": "--heartbeat-misses",
	"RescueAfter": "--rescue-after", "AbandonAfter": "--abandon-after", "LearnAffinity": "--learn-affinity",
	"OutcomeLinger":    "--outcome-linger",
	"Streams.Replicas": "--replicas", "Streams.DedupWindow": "--dedup-window",
	"Streams.ResultRetention": "--result-retention",
}

// inFlagWords rewrites a coordinator config error in flag names: "RetryBase 10s above
// RetryMax 1s" becomes "--retry-base 10s above --retry-max 1s".
func inFlagWords(msg string, flags map[string]string) string {
	words := strings.Fields(msg)
	for i, w := range words {
		if f, ok := flags[w]; ok {
			words[i] = f
		}
	}
	return strings.Join(words, " ")
}
