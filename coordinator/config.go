package coordinator

import (
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/weavejobs/weave/coordinator/internal/engine"
	"github.com/weavejobs/weave/internal/config"
	"github.com/weavejobs/weave/internal/wire"
	"github.com/weavejobs/weave/spreader"
)

// StreamOptions tunes the streams the coordinator (or InitNamespace) creates when they do not
// exist yet (replicas, dedup window, storage), and the result retention. Replicas is 0 or 1 for
// a single server, 3 for a cluster, at most 5; anything else is refused with ErrInvalidConfig.
type StreamOptions = config.StreamOptions

// ErrInvalidConfig is wrapped by every error New and InitNamespace return for settings they
// cannot use. It is one value shared by every Weave package: worker.ErrInvalidConfig,
// dispatcher.ErrInvalidConfig and spreader.ErrInvalidConfig are the same error.
var ErrInvalidConfig = config.ErrInvalid

// Defaults of Config.
const (
	DefaultMaxAttempts        = 5
	DefaultRetryBase          = time.Second
	DefaultRetryMax           = 5 * time.Minute
	DefaultMaxBatch           = 64
	DefaultMaxBatchBytes      = 512 << 10
	DefaultLeaseTTL           = 10 * time.Second
	DefaultTrimInterval       = 10 * time.Second
	DefaultHeartbeatMisses    = 3
	DefaultRescueAfter        = 5 * time.Second
	DefaultReleaseParallelism = 4
	DefaultReadAhead          = 16
	DefaultPayloadCache       = 32 << 20
	DefaultAbandonAfter       = 5 * time.Minute
	DefaultLearnAffinity      = time.Minute
	DefaultOutcomeLinger      = 10 * time.Millisecond
)

// DefaultPrefetch is Config.Prefetch's default: 0, a window that adapts to the jobs. The fleet
// may then hold about slots·(1/b − 1) released jobs beyond its slots, where b is the measured
// share of a release's round trip that the handler runs: one job for long jobs, up to 16 per slot
// for very short ones (and within Feeders − slots when Feeders is set).
const DefaultPrefetch = 0

// Config configures a Coordinator. The zero value is valid and gives the documented defaults.
type Config struct {
	// Namespace isolates this deployment's streams and subjects. Default "weave".
	Namespace string

	// Logger receives the coordinator's logs. Default: silent.
	Logger zerolog.Logger

	// Feeders is the number of groups scheduled at once (feeder slots). 0 (default) means auto:
	// the live workers' total slots plus the prefetch window (at least one), following the
	// fleet as workers come and go.
	Feeders int

	// Policy orders the active groups' jobs: spreader.LeastInFlight (default) or
	// spreader.RoundRobin.
	Policy spreader.Policy

	// MaxInFlightPerGroup caps the jobs of one group released at once. 0 (default): no cap.
	MaxInFlightPerGroup int

	// Prefetch is how many released jobs the fleet may hold beyond its slots, so a slot that
	// frees starts its next job at once instead of waiting a round trip for the next release.
	// 0 (default) adapts it to the jobs: about slots·(1/b − 1), where b is the measured share of
	// a release's time the handler runs (so ~1 for long jobs, up to 16 per slot for very short
	// ones), and the auto Feeders follows as slots + Prefetch, keeping groups spread; with
	// Feeders set, it stays within Feeders − slots. n > 0 fixes it; -1 releases only into free
	// slots.
	Prefetch int

	// QueueAhead is how many jobs per slot a worker may be handed beyond its slots, to wait in
	// its queue, when its pool's slots are all taken and prefetched jobs go out: a work batch
	// then holds up to (1 + QueueAhead) times one worker's share of the pool's slots instead of
	// that share. Workers of one or two slots then cost fewer messages per job. A job waiting in
	// a worker's queue starts when a slot of that worker frees, even if another worker fell idle
	// meanwhile. 0 (default): while the pool's handlers run at most half of each job's time
	// from release to report, not counting waits in a worker's queue (short jobs), enough that
	// a batch holds about 16 jobs (15 per slot for workers of one slot, 7 for two, 3 for four, 1
	// for eight or more), else none; n > 0 fixes it; -1: never. Only jobs of the prefetch window
	// go ahead, so Prefetch -1 turns it off too.
	QueueAhead int

	// MaxAttempts is the attempt limit of jobs that do not set their own. Default 5.
	MaxAttempts int

	// RetryBase and RetryMax shape the retry delay: attempt n waits a uniformly random time in
	// [0, min(RetryMax, RetryBase·2^(n-1))] (exponential backoff with full jitter), unless the
	// handler asked for a specific delay. Defaults 1s and 5m.
	RetryBase, RetryMax time.Duration

	// MaxBatch bounds the jobs in one work batch. Default 64.
	MaxBatch int

	// MaxBatchBytes bounds the payload bytes of one work batch; a single larger job still goes
	// alone. Default 512 KiB, and never above the server's max payload.
	MaxBatchBytes int

	// LeaseTTL is how long the coordinator lease lives without renewal; a standby takes over
	// within about this long after the holder dies. Default 10s.
	LeaseTTL time.Duration

	// HeartbeatMisses is how many heartbeat periods of silence make a worker dead, its slots
	// forgotten. Default 3.
	HeartbeatMisses int

	// RescueAfter is how long a pool may have no live worker before the coordinator takes back
	// the jobs released to it and not yet run, and sends them to other pools. A job a dead
	// worker was running comes back once its lease runs out. Default 5s.
	RescueAfter time.Duration

	// ReleaseParallelism is the number of release pipelines (journal, payload fetch, publish)
	// in flight at once. Default 4.
	ReleaseParallelism int

	// ReadAhead is how many of a group's next jobs are read along with one being released, so
	// the payloads of the following releases are already at hand. Default 16.
	ReadAhead int

	// PayloadCacheBytes bounds the memory of the cache of job messages about to be released
	// (payloads, headers and bookkeeping, about 300 bytes per message beyond its payload).
	// Default 32 MiB.
	PayloadCacheBytes int

	// AbandonAfter is how long a group that is not sealed may go without a new job or a
	// keep-alive from its producer before the coordinator seals it with the jobs it has (its
	// summary then says Abandoned). The Go dispatcher keeps its groups alive while Publish runs
	// (every dispatcher.Config.KeepAlive, 30s by default), so only a producer that died or a
	// client that never seals is cut off; keep AbandonAfter several keep-alive periods long.
	// Default 5m.
	AbandonAfter time.Duration

	// LearnAffinity is how long a pool that ran a job by fallback (it holds none of the
	// resources the job prefers) stays preferred for those resources: later jobs preferring them
	// go to it rather than to a pool that ran none of them, so they find its caches warm. A
	// learned resource ranks below one the pool holds and never meets a requirement. Default
	// 1m; negative turns learning off.
	LearnAffinity time.Duration

	// OutcomeLinger is, under load, the least time between two outcome messages of one group:
	// while the coordinator writes more than 16 outcome messages per OutcomeLinger (1,600 a
	// second by default), outcomes that end within it of their group's previous outcome message
	// wait until it has passed and go in one message; with more than 16 groups waiting, the wait
	// stretches so that they share about 16 messages per OutcomeLinger (at most 1s: 1,000 groups
	// running at once write each about every 0.6s). Groups interleave, so without it a busy
	// coordinator stores about one outcome message per job. Below that
	// load, and for a complete group (a single job, the last jobs before Handle.Wait returns),
	// outcomes are written at once; WaitJob, WaitKey and Outcomes on a group of a busy
	// coordinator see them up to this much later (or the stretched wait). Default 10ms; negative
	// writes every outcome at once.
	OutcomeLinger time.Duration

	// TrimInterval is how often the coordinator deletes what the streams no longer need to hold:
	// EVENTS records below the oldest one the state depends on, and the outcomes of groups
	// finished more than Streams.ResultRetention ago. Default 10s.
	TrimInterval time.Duration

	// Streams tunes the streams this coordinator creates when they do not exist (replicas,
	// dedup window; workers and producers never create them), and ResultRetention, which the
	// coordinator applies to finished groups whoever created the streams. Replicas 0 takes the
	// replicas of the namespace's existing streams (1 for a new namespace) for the streams and
	// the lease and release-key buckets it creates.
	Streams StreamOptions

	// Alarms holds the alarms' thresholds (see AlarmConfig and docs/operating.md, "Alarms").
	Alarms AlarmConfig

	// now is the clock; tests replace it.
	now func() time.Time
}

// Validate reports, as New would, a field out of range (an error wrapping ErrInvalidConfig): a
// command can check its flags before it connects.
func (c Config) Validate() error {
	_, err := c.withDefaults()
	return err
}

func (c Config) withDefaults() (Config, error) {
	if _, err := wire.NewNames(c.Namespace); err != nil {
		return c, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	if c.Policy != spreader.LeastInFlight && c.Policy != spreader.RoundRobin {
		return c, fmt.Errorf("%w: unknown policy %d", ErrInvalidConfig, c.Policy)
	}
	for name, v := range map[string]int{
		"Feeders": c.Feeders, "MaxInFlightPerGroup": c.MaxInFlightPerGroup,
		"MaxAttempts": c.MaxAttempts, "MaxBatch": c.MaxBatch, "MaxBatchBytes": c.MaxBatchBytes,
		"HeartbeatMisses": c.HeartbeatMisses, "ReleaseParallelism": c.ReleaseParallelism,
		"ReadAhead": c.ReadAhead, "PayloadCacheBytes": c.PayloadCacheBytes,
	} {
		if v < 0 {
			return c, fmt.Errorf("%w: %s is %d, must not be negative", ErrInvalidConfig, name, v)
		}
	}
	if c.Prefetch < -1 {
		return c, fmt.Errorf("%w: Prefetch is %d, must be -1 (only into free slots) or more", ErrInvalidConfig, c.Prefetch)
	}
	if c.QueueAhead < -1 {
		return c, fmt.Errorf("%w: QueueAhead is %d, must be -1 (never beyond a worker's slots) or more", ErrInvalidConfig, c.QueueAhead)
	}
	if c.MaxAttempts > wire.MaxAttemptsLimit {
		return c, fmt.Errorf("%w: MaxAttempts %d above %d", ErrInvalidConfig, c.MaxAttempts, wire.MaxAttemptsLimit)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"RetryBase", c.RetryBase}, {"RetryMax", c.RetryMax}, {"LeaseTTL", c.LeaseTTL},
		{"TrimInterval", c.TrimInterval}, {"RescueAfter", c.RescueAfter}, {"AbandonAfter", c.AbandonAfter},
	} {
		if d.v < 0 {
			return c, fmt.Errorf("%w: %s is %v, must not be negative", ErrInvalidConfig, d.name, d.v)
		}
	}
	if c.RetryBase != 0 && c.RetryMax != 0 && c.RetryBase > c.RetryMax {
		return c, fmt.Errorf("%w: RetryBase %v above RetryMax %v (the first retry would wait longer than the longest)", ErrInvalidConfig, c.RetryBase, c.RetryMax)
	}
	if c.LeaseTTL != 0 && c.LeaseTTL < time.Second {
		return c, fmt.Errorf("%w: LeaseTTL %v below 1s (the server's minimum for KV expiry markers)", ErrInvalidConfig, c.LeaseTTL)
	}
	if err := c.Streams.Validate("Streams."); err != nil {
		return c, err
	}
	setDefault(&c.MaxAttempts, DefaultMaxAttempts)
	setDefault(&c.MaxBatch, DefaultMaxBatch)
	setDefault(&c.MaxBatchBytes, DefaultMaxBatchBytes)
	setDefault(&c.HeartbeatMisses, DefaultHeartbeatMisses)
	setDefault(&c.ReleaseParallelism, DefaultReleaseParallelism)
	setDefault(&c.ReadAhead, DefaultReadAhead)
	setDefault(&c.PayloadCacheBytes, DefaultPayloadCache)
	setDefault(&c.RetryBase, DefaultRetryBase)
	setDefault(&c.RetryMax, DefaultRetryMax)
	setDefault(&c.LeaseTTL, DefaultLeaseTTL)
	setDefault(&c.TrimInterval, DefaultTrimInterval)
	setDefault(&c.RescueAfter, DefaultRescueAfter)
	setDefault(&c.AbandonAfter, DefaultAbandonAfter)
	setDefault(&c.LearnAffinity, DefaultLearnAffinity)
	setDefault(&c.OutcomeLinger, DefaultOutcomeLinger)
	replicas := c.Streams.Replicas
	c.Streams = c.Streams.WithDefaults()
	c.Streams.Replicas = replicas // 0: the namespace's, learned when Run starts (prepare)
	alarms, err := c.Alarms.withDefaults()
	if err != nil {
		return c, err
	}
	c.Alarms = alarms
	if c.now == nil {
		c.now = time.Now
	}
	return c, nil
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// engineConfig is what the engine reads of c (defaults applied).
func (c Config) engineConfig() engine.Config {
	return engine.Config{
		Logger:              c.Logger,
		Feeders:             c.Feeders,
		Policy:              c.Policy,
		MaxInFlightPerGroup: c.MaxInFlightPerGroup,
		Prefetch:            c.Prefetch,
		QueueAhead:          c.QueueAhead,
		MaxAttempts:         c.MaxAttempts,
		RetryBase:           c.RetryBase,
		RetryMax:            c.RetryMax,
		MaxBatch:            c.MaxBatch,
		HeartbeatMisses:     c.HeartbeatMisses,
		AbandonAfter:        c.AbandonAfter,
		LearnAffinity:       c.LearnAffinity,
		ResultRetention:     c.Streams.ResultRetention,
		OutcomeLinger:       c.OutcomeLinger,
		Now:                 c.now,
	}
}
