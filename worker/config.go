package worker

import (
	"runtime"
	"time"

	"github.com/nats-io/nuid"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/weavejobs/weave/internal/config"
	"github.com/weavejobs/weave/internal/natsver"
	"github.com/weavejobs/weave/internal/topology"
	"github.com/weavejobs/weave/internal/wire"
)

// ErrInvalidConfig is wrapped by every error New returns for a bad Config. It is one value
// shared by every Weave package: coordinator.ErrInvalidConfig, dispatcher.ErrInvalidConfig and
// spreader.ErrInvalidConfig are the same error.
var ErrInvalidConfig = config.ErrInvalid

// ErrNamespaceNotFound is wrapped by the error Run returns when the namespace's streams do not
// exist. A worker does not create them: the coordinator does when it starts, or 'weave init'.
var ErrNamespaceNotFound = topology.ErrNamespaceNotFound

// ErrServerTooOld is wrapped by the error Run returns when the NATS server is older than Weave
// needs (2.11.0); the error names both versions.
var ErrServerTooOld = natsver.ErrServerTooOld

// Defaults of Config. A zero field means its default.
const (
	DefaultHeartbeatInterval = time.Second
	// idleBeats is IdleHeartbeatInterval's default, in HeartbeatIntervals.
	idleBeats = 5
	// dormantHeartbeat is IdleHeartbeatInterval's default once the worker is dormant (at least
	// idleBeats intervals): a dormant fleet's heartbeats cost the server and the coordinator
	// about as much as its pulls would without dormancy.
	dormantHeartbeat      = 30 * time.Second
	DefaultLease          = topology.DefaultLease
	DefaultDrainTimeout   = 10 * time.Second
	DefaultTimeoutGrace   = time.Second
	DefaultReportLinger   = time.Millisecond
	DefaultMaxReportBatch = 256
	DefaultMaxResultSize  = 64 << 10
)

// Limits of Config.
const (
	// MaxConcurrency bounds Config.Concurrency (heartbeats refuse more).
	MaxConcurrency = 1 << 16
	// MinLease bounds Config.Lease from below: the worker refreshes leases every Lease/3.
	MinLease = 100 * time.Millisecond
	// MaxReportBatchLimit bounds Config.MaxReportBatch.
	MaxReportBatchLimit = 1 << 16
	// reportOverhead is room left in a report message, beside one result, for the batch header,
	// the report's other fields, the subject and headers.
	reportOverhead = 1 << 10
)

// Config configures a Worker. The zero value of every field selects its default, so
// Config{} is valid: a worker of pool "any" in namespace "weave" with one slot per CPU.
type Config struct {
	// Namespace of the streams and subjects to use. Default "weave" (wire.DefaultNamespace).
	// It must match the coordinator's.
	Namespace string

	// ID names this worker in heartbeats and on its report subject: 1-64 characters of
	// [A-Za-z0-9_-], unique among running workers: the coordinator refuses a second process
	// with a live worker's ID (see ErrDuplicateID). Default "w-" followed by a NUID.
	ID string

	// Resources this worker holds. Workers holding the same set form a pool and share its
	// work; the coordinator routes a job that requires or prefers a resource to a pool that
	// holds it. Default none: pool "any".
	Resources []string

	// Concurrency is the number of jobs run at once: exactly this many goroutines run
	// handlers. Default runtime.GOMAXPROCS(0); at most MaxConcurrency.
	Concurrency int

	// Logger receives the worker's log. The zero Logger is silent (as zerolog.Nop()).
	Logger zerolog.Logger

	// HeartbeatInterval is the period of the heartbeats that tell the coordinator this worker
	// is alive and how many of its slots are busy. Default 1s; at most 1h.
	HeartbeatInterval time.Duration

	// IdleHeartbeatInterval is the period of the heartbeats while the worker runs and holds
	// nothing, so that an idle fleet costs the coordinator and the server little: each
	// heartbeat tells the coordinator when to expect the next (it forgets a worker silent for
	// HeartbeatMisses of them), and the first job to arrive brings one at once, as does a
	// coordinator starting its term (it calls the roll: NS.rollcall). Rounded to a
	// multiple of HeartbeatInterval. Default 5 × HeartbeatInterval, and 30s (or 5 ×
	// HeartbeatInterval if longer) once the worker is dormant, idle for a pull's expiry (see
	// Stats.Dormant); equal to HeartbeatInterval, idle workers beat at the same pace.
	IdleHeartbeatInterval time.Duration

	// Lease is how long a work batch stays assigned to this worker without news: the AckWait
	// of the pool's consumer. While any job of a batch is queued, running or being reported,
	// the worker extends the lease every Lease/3, so Lease only bounds how fast a crashed
	// worker's batches go to another worker (and how long a worker cut off from the server
	// goes on starting a batch's queued jobs: extensions count once the server confirms them). All workers of a pool should use the same
	// Lease: each start updates the shared consumer. Default 30s; at least MinLease.
	Lease time.Duration

	// DefaultTimeout bounds an attempt whose job sets no timeout. Default 0: no deadline.
	DefaultTimeout time.Duration

	// NamespaceWait is how long Run waits for the namespace's streams, which the coordinator or
	// 'weave init' creates, before it gives up with an error wrapping ErrNamespaceNotFound: a
	// worker started beside its coordinator (one compose file, two units) may come first.
	// Default 0: it does not wait.
	NamespaceWait time.Duration

	// TimeoutGrace is how long the worker waits, after an attempt's deadline or after
	// canceling it at shutdown, for the handler to return before it reports the attempt
	// failed without it. Such a handler keeps its slot until it returns (see Stats.Stuck).
	// Default 1s.
	TimeoutGrace time.Duration

	// DrainTimeout is how long Run lets running jobs finish after its context is done before
	// it cancels their contexts. Default 10s.
	DrainTimeout time.Duration

	// ReportLinger paces report messages: a report is sent at once when no report message is
	// on its way and none was sent within ReportLinger; otherwise reports gather and go together,
	// at most one message per ReportLinger. A report that could go at once while other jobs of
	// its work batch have not reported yet waits for them, 200µs at most (or ReportLinger if
	// shorter), since jobs started together often end together. When the worker has no job left
	// to report (it is idle), what gathered goes as soon as no message is on its way: a lone
	// job's report is never delayed. Under load few large messages replace many small ones, at
	// the cost of up to ReportLinger on each outcome (set 1ns to send every report as soon as
	// possible).
	//
	// Default: adaptive, 1ms or a tenth of the recent average run time of this worker's
	// handlers, whichever is longer, and at most 10ms: an outcome then waits at most about 10% of
	// its job's own time, and a worker running 20ms jobs sends half the messages it would at 1ms.
	ReportLinger time.Duration

	// MaxReportBatch is the most reports sent in one message. Default 256; at most
	// MaxReportBatchLimit. A message is also sent early when the next report would make it
	// larger than the server's max payload.
	MaxReportBatch int

	// MaxResultSize is the largest result a handler may return, in bytes; a larger result
	// fails the attempt permanently. Error texts longer than this are truncated. Default
	// 64 KiB; at most the server's max payload less 1 KiB.
	MaxResultSize int

	// TracerProvider records each attempt's spans (weave.queue, weave.run, weave.outcome; see
	// docs/operating.md, "Traces"). Default: OpenTelemetry's global provider
	// (otel.GetTracerProvider), read at each job; nothing is recorded while none is installed.
	// Either way a handler's ctx continues the trace of the job's producer.
	TracerProvider trace.TracerProvider

	// clock replaces time.Now for lease lapses, in tests (export_test.go). Nil: time.Now.
	clock func() time.Time
	// siblingWait replaces the constant siblingWait, in tests (export_test.go). 0: the constant.
	siblingWait time.Duration
	// pullExpiry and dormantExpiry replace the constants of the same names, in tests
	// (export_test.go). 0: the constant.
	pullExpiry, dormantExpiry time.Duration
}

// resolved is a validated Config with defaults filled in.
type resolved struct {
	Config
	now            func() time.Time // the clock of lease lapses: time.Now, or a test's
	adaptiveLinger bool             // ReportLinger was not set: it adapts to the handlers' run time
	names          wire.Names
	pool           string
	resources      []string // normalized
	idleBeats      int      // heartbeat periods between two heartbeats while idle (IdleHeartbeatInterval)
	dormantBeats   int      // the same while dormant
}

// Validate reports what New would refuse in c, an error wrapping ErrInvalidConfig, without a
// connection: all but MaxResultSize's fit in the server's max payload, which New checks.
func (c Config) Validate() error {
	_, err := resolve(c, 0)
	return err
}

// resolve validates c and fills in defaults. maxPayload is the server's limit (0 = unknown).
func resolve(c Config, maxPayload int64) (resolved, error) {
	names, err := wire.NewNames(c.Namespace)
	if err != nil {
		return resolved{}, invalid("%v", err)
	}
	c.Namespace = names.Namespace()
	if c.ID == "" {
		c.ID = "w-" + nuid.Next()
	}
	if err := wire.ValidateWorkerID(c.ID); err != nil {
		return resolved{}, invalid("ID: %v", err)
	}
	if err := wire.ValidateResources("held", c.Resources); err != nil {
		return resolved{}, invalid("Resources: %v", err)
	}
	rs := wire.NormalizeResources(c.Resources)

	if c.Concurrency == 0 {
		c.Concurrency = runtime.GOMAXPROCS(0)
	}
	if c.Concurrency < 1 || c.Concurrency > MaxConcurrency {
		return resolved{}, invalid("Concurrency %d outside 1..%d (0: one per CPU)", c.Concurrency, MaxConcurrency)
	}
	adaptiveLinger := c.ReportLinger == 0
	durations := []struct {
		name     string
		v        *time.Duration
		def, min time.Duration
		max      time.Duration
	}{
		{"HeartbeatInterval", &c.HeartbeatInterval, DefaultHeartbeatInterval, time.Millisecond, time.Hour},
		{"IdleHeartbeatInterval", &c.IdleHeartbeatInterval, 0, 0, time.Hour},
		{"Lease", &c.Lease, DefaultLease, MinLease, wire.MaxTimeout},
		{"TimeoutGrace", &c.TimeoutGrace, DefaultTimeoutGrace, 0, time.Hour},
		{"DrainTimeout", &c.DrainTimeout, DefaultDrainTimeout, 0, wire.MaxTimeout},
		{"ReportLinger", &c.ReportLinger, DefaultReportLinger, 0, time.Minute},
		{"DefaultTimeout", &c.DefaultTimeout, 0, 0, wire.MaxTimeout},
		{"NamespaceWait", &c.NamespaceWait, 0, 0, 24 * time.Hour},
	}
	for _, d := range durations {
		if *d.v < 0 {
			return resolved{}, invalid("%s %v is negative", d.name, *d.v)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
		if *d.v != 0 && (*d.v < d.min || *d.v > d.max) {
			return resolved{}, invalid("%s %v outside %v..%v", d.name, *d.v, d.min, d.max)
		}
	}
	dormant := c.IdleHeartbeatInterval // the period while dormant: this when set
	switch {
	case c.IdleHeartbeatInterval == 0:
		c.IdleHeartbeatInterval = min(idleBeats*c.HeartbeatInterval, time.Hour)
		dormant = max(c.IdleHeartbeatInterval, dormantHeartbeat)
	case c.IdleHeartbeatInterval < c.HeartbeatInterval:
		return resolved{}, invalid("IdleHeartbeatInterval %v is shorter than HeartbeatInterval %v", c.IdleHeartbeatInterval, c.HeartbeatInterval)
	}
	if c.MaxReportBatch == 0 {
		c.MaxReportBatch = DefaultMaxReportBatch
	}
	if c.MaxReportBatch < 1 || c.MaxReportBatch > MaxReportBatchLimit {
		return resolved{}, invalid("MaxReportBatch %d outside 1..%d", c.MaxReportBatch, MaxReportBatchLimit)
	}
	if c.MaxResultSize == 0 {
		c.MaxResultSize = DefaultMaxResultSize
	}
	if c.MaxResultSize < 0 {
		return resolved{}, invalid("MaxResultSize %d is negative", c.MaxResultSize)
	}
	if maxPayload > 0 && int64(c.MaxResultSize) > maxPayload-reportOverhead {
		return resolved{}, invalid("MaxResultSize %d does not fit the server's max payload %d less %d bytes of overhead",
			c.MaxResultSize, maxPayload, reportOverhead)
	}
	now := c.clock
	if now == nil {
		now = time.Now
	}
	if c.siblingWait == 0 {
		c.siblingWait = siblingWait
	}
	if c.pullExpiry == 0 {
		c.pullExpiry = pullExpiry
	}
	if c.dormantExpiry == 0 {
		c.dormantExpiry = dormantExpiry
	}
	beats := func(d time.Duration) int { return max(1, int((d+c.HeartbeatInterval/2)/c.HeartbeatInterval)) }
	return resolved{
		Config: c, now: now, adaptiveLinger: adaptiveLinger, names: names, pool: wire.PoolKey(rs), resources: rs,
		idleBeats: beats(c.IdleHeartbeatInterval), dormantBeats: beats(dormant),
	}, nil
}

func invalid(format string, args ...any) error { return config.Errorf(format, args...) }

// timeoutOf returns the attempt's deadline length: the job's own timeout, else DefaultTimeout.
func (c *resolved) timeoutOf(j wire.WorkJob) time.Duration {
	if j.Timeout > 0 {
		return j.Timeout
	}
	return c.DefaultTimeout
}
