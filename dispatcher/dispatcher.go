package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/weavejobs/weave/internal/config"
	"github.com/weavejobs/weave/internal/directget"
	"github.com/weavejobs/weave/internal/natsver"
	"github.com/weavejobs/weave/internal/topology"
	"github.com/weavejobs/weave/internal/tracing"
	"github.com/weavejobs/weave/internal/wire"
)

// Errors callers can branch on with errors.Is. Errors returned by this package wrap one of these,
// a context error, or an error from the NATS client (nats.go and its jetstream package).
var (
	// ErrInvalidConfig reports a Config that New cannot use. It is one value shared by every
	// Weave package: coordinator.ErrInvalidConfig, worker.ErrInvalidConfig and
	// spreader.ErrInvalidConfig are the same error.
	ErrInvalidConfig = config.ErrInvalid
	// ErrInvalidGroup reports a group ID that cannot be used (empty, too long, control characters).
	ErrInvalidGroup = errors.New("weave: invalid group ID")
	// ErrInvalidJob reports a job that fails validation; Publish stops at the first one.
	ErrInvalidJob = errors.New("weave: invalid job")
	// ErrInvalidOption reports an invalid GroupOption (such as a weight out of range).
	ErrInvalidOption = errors.New("weave: invalid option")
	// ErrNotSealed reports that Publish could not publish the group's seal. The coordinator keeps
	// the group open until it is sealed: publish the group again (see Publish) to seal it.
	ErrNotSealed = errors.New("weave: group not sealed")
	// ErrMalformedOutcome reports a message on a group's outcome subject that cannot be decoded.
	ErrMalformedOutcome = errors.New("weave: malformed outcome message")
	// ErrJobNotFound reports that Handle.WaitJob or Handle.WaitKey read the group's summary
	// without meeting the job: it is not in the group (a wrong ID, a key never published or
	// dropped as a duplicate, a job of another incarnation of the group ID), or its outcome is
	// older than the RESULTS stream retains. Waiting longer cannot change the answer.
	ErrJobNotFound = errors.New("weave: job not found")
	// ErrGroupRunning reports that Publish found the group running (an incarnation of the group
	// ID is sealed and has not finished yet, so the coordinator would refuse a new one and every
	// job published with it), or that the coordinator refused a Redrive because the group's
	// latest incarnation is not complete. Both return it with a Handle for that incarnation (a
	// producer publishing a group again after a crash, unaware that its seal was stored, can wait
	// on it). Publish or Redrive again once it has finished.
	ErrGroupRunning = errors.New("weave: group is running")
	// ErrNotFailed reports that the coordinator refused a Redrive with nothing to run again: the
	// group's latest complete
	// incarnation has no failed job, a job ID given is not one of its failed jobs (it succeeded,
	// was canceled, belongs to another group or incarnation, or does not exist), or no complete
	// incarnation of the group is retained (an unknown group, or one older than the result
	// retention).
	ErrNotFailed = errors.New("weave: no such failed job")
	// ErrJobGone reports failed jobs whose messages the JOBS stream no longer holds, so their
	// payloads cannot be published again: the coordinator deletes them ResultRetention after
	// the group finished (their outcomes go at the same time, so this is rare), or an operator
	// deleted them.
	ErrJobGone = errors.New("weave: failed job's message is gone")
	// ErrNamespaceNotFound reports that the namespace's streams do not exist. A dispatcher does
	// not create them: the coordinator does when it starts, or 'weave init'. The error names the
	// namespace, so a misspelt one is plain to see.
	ErrNamespaceNotFound = topology.ErrNamespaceNotFound
	// ErrServerTooOld reports a NATS server older than Weave needs (2.11.0); the error names both
	// versions. The first call that uses the streams checks it.
	ErrServerTooOld = natsver.ErrServerTooOld
)

// Defaults of Config.
const (
	DefaultMaxPending     = 512
	DefaultMaxPayload     = 256 << 10
	DefaultRequestTimeout = 10 * time.Second
	DefaultKeepAlive      = 30 * time.Second

	// MaxMaxPending bounds Config.MaxPending; each Publish call keeps a queue of that size.
	MaxMaxPending = 1 << 16
)

// headerRoom is the part of the server's max_payload kept for a job's headers. The largest headers
// a valid job can have (long group ID and key, 2×64 resources of 128 bytes) take about 18 KiB, so a
// payload within MaxPayload always fits in one message.
const headerRoom = 32 << 10

// Config configures a Dispatcher. The zero value is ready to use.
type Config struct {
	// Namespace under which all of Weave's streams and subjects live: 1–32 characters of
	// [A-Za-z0-9_-]. Default "weave". Producers, coordinator and workers must agree on it.
	Namespace string

	// Logger receives debug logs of group publishing. Default: the zero zerolog.Logger, silent.
	Logger zerolog.Logger

	// MaxPending is how many job publishes may await their acknowledgement at once, across all
	// Publish calls of the Dispatcher. It bounds the memory Publish uses, whatever the group's
	// size. Default 512 (DefaultMaxPending); at most 65,536 (MaxMaxPending).
	MaxPending int

	// MaxPack is the most jobs Publish, and SubmitMany, store in one JOBS message. Jobs without a
	// key that the iterator yields faster than they are published (for SubmitMany: consecutive
	// jobs without a key) travel in packs of up to MaxPack jobs (and 64 KiB), each pack one stored
	// message, so a job costs a fraction of a publish, an acknowledgement and a read; a keyed job
	// (deduplicated by JetStream on its own message ID) and a job yielded alone travel in a message
	// of their own. Default 32 (wire.MaxPack), the most; 1 turns packing off, for coordinators of a
	// build before packs (or, for SubmitMany, before single packs), which refuse them. Job IDs name
	// the message and the job's place in it (see Handle.FirstID).
	MaxPack int

	// MaxPayload is the largest job payload in bytes. Default 256 KiB (DefaultMaxPayload), or the
	// server's max_payload minus 32 KiB kept for headers when that is smaller. New rejects a value
	// above that bound.
	MaxPayload int

	// RequestTimeout is how long the dispatcher waits for the server to answer one request (a
	// publish acknowledgement, a stream or consumer call) when ctx has no earlier deadline. It also
	// bounds the time Publish spends settling and sealing a group after ctx is done or an error
	// stopped it. Default 10s (DefaultRequestTimeout).
	RequestTimeout time.Duration

	// KeepAlive is how often Publish tells the coordinator that the group it is publishing is
	// still being produced, so that a producer slow between jobs is not taken for one that died
	// (the coordinator seals a group that hears nothing for its AbandonAfter, 5 minutes by
	// default). Default 30s (DefaultKeepAlive).
	KeepAlive time.Duration

	// TracerProvider records the weave.publish span of each Publish. Default: OpenTelemetry's
	// global provider (otel.GetTracerProvider), read at each Publish; no span is recorded while
	// none is installed. Each job carries the trace context of Publish's ctx either way (W3C
	// traceparent header), so a handler's ctx continues the producer's trace.
	TracerProvider trace.TracerProvider
}

// Dispatcher publishes groups of jobs to Weave and waits for their outcomes. It is safe for
// concurrent use. The first Handle.WaitSummary starts a subscription that the Dispatcher's later
// waits share; Close stops it. The Dispatcher does not own the NATS connection it was given.
type Dispatcher struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	names wire.Names
	cfg   Config
	log   zerolog.Logger
	// reply is this Dispatcher's reply token: the coordinator publishes the outcomes of the
	// groups it opens to it (wire.Names.OutcomeSubjectTo), and one subscription hears them all.
	reply string

	// slots is a counting semaphore of MaxPending: a publication puts a token in before each async
	// publish and takes one out after settling its acknowledgement.
	slots chan struct{}

	// checkMu guards checked; held while checking that the streams exist, so concurrent first
	// calls wait for one check.
	checkMu sync.Mutex
	checked bool

	// sumMu guards the subscription WaitSummary calls share (see summary.go): sumSub, nil until
	// the first one and after Close; sumWaiters, the waiters by group token; sumClosed, set by
	// Close.
	sumMu      sync.Mutex
	sumSub     *nats.Subscription
	sumWaiters map[string]map[*summaryWaiter]struct{}
	jobWaiters map[string]*groupJobWaiters           // WaitJob and WaitKey calls by group token (see jobwait.go)
	followers  map[string]map[chan struct{}]struct{} // Wait and Outcomes calls by group token (see follow)
	groupSubs  map[string]*groupSub                  // waits on groups another producer opened, by group token (see listen)
	// subscribedGroups counts the groupSubs with a subscription of their own; allSub, the
	// subscription to every outcome, replaces them past maxGroupSubs.
	subscribedGroups int
	allSub           *nats.Subscription
	sumClosed        bool
	// recent holds what the subscription last delivered of the latest groups, by group token,
	// for a waiter registered just after a message of its group went by (see recentGroups).
	recent      map[string]*lastSeen
	recentOrder []string // group tokens in recent, oldest first
	// recentDropped is the latest delivery time of an entry dropped from recent: a group
	// seen after it is still there (see outcomeMark).
	recentDropped time.Time

	// results and jobs read the RESULTS and JOBS streams with direct gets for every wait, check
	// and scan of this Dispatcher, so they share one reply subscription each instead of opening
	// one per read: a subscription and its removal change the server's subject index and drop
	// its match cache, a cost every Publish of a small group would otherwise pay.
	results *directget.Client
	jobs    *directget.Client

	// skipRunningCheck, set by tests that stand in for a coordinator which accepted a second
	// incarnation of a group, lets Publish skip its check for a sealed running one (running).
	skipRunningCheck bool

	tracer *tracing.Tracer // see trace.go

	// waitHook, if set (by tests), is called by each WaitSummary, WaitJob and WaitKey that found
	// nothing stored yet once it waits on the shared subscription.
	waitHook func()
}

// New returns a Dispatcher publishing through nc. It validates cfg and fills in defaults; it does
// no I/O (the first call that uses the streams checks that they exist).
func New(nc *nats.Conn, cfg Config) (*Dispatcher, error) {
	if nc == nil {
		return nil, fmt.Errorf("%w: nil NATS connection", ErrInvalidConfig)
	}
	names, err := wire.NewNames(cfg.Namespace)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	cfg.Namespace = names.Namespace()

	switch {
	case cfg.MaxPending < 0 || cfg.MaxPending > MaxMaxPending:
		return nil, fmt.Errorf("%w: MaxPending %d outside 0..%d", ErrInvalidConfig, cfg.MaxPending, MaxMaxPending)
	case cfg.MaxPending == 0:
		cfg.MaxPending = DefaultMaxPending
	}
	switch {
	case cfg.MaxPack < 0 || cfg.MaxPack > wire.MaxPack:
		return nil, fmt.Errorf("%w: MaxPack %d outside 0..%d", ErrInvalidConfig, cfg.MaxPack, wire.MaxPack)
	case cfg.MaxPack == 0:
		cfg.MaxPack = wire.MaxPack
	}
	if cfg.MaxPayload, err = payloadLimit(cfg.MaxPayload, nc.MaxPayload()); err != nil {
		return nil, err
	}
	switch {
	case cfg.RequestTimeout < 0:
		return nil, fmt.Errorf("%w: negative RequestTimeout %v", ErrInvalidConfig, cfg.RequestTimeout)
	case cfg.RequestTimeout == 0:
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	switch {
	case cfg.KeepAlive < 0:
		return nil, fmt.Errorf("%w: negative KeepAlive %v", ErrInvalidConfig, cfg.KeepAlive)
	case cfg.KeepAlive == 0:
		cfg.KeepAlive = DefaultKeepAlive
	}

	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(cfg.MaxPending),
		jetstream.WithPublishAsyncTimeout(cfg.RequestTimeout),
		jetstream.WithDefaultTimeout(cfg.RequestTimeout),
	)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return &Dispatcher{
		nc:      nc,
		js:      js,
		names:   names,
		cfg:     cfg,
		log:     cfg.Logger.With().Str("component", "dispatcher").Str("namespace", cfg.Namespace).Logger(),
		reply:   nuid.Next(),
		slots:   make(chan struct{}, cfg.MaxPending),
		results: directget.New(nc, names.ResultsStream()),
		jobs:    directget.New(nc, names.JobsStream()),
		tracer:  tracing.New(cfg.TracerProvider),
	}, nil
}

// payloadLimit applies MaxPayload's default and bound given the server's max_payload (0 when
// unknown, for a connection that has not completed its handshake).
func payloadLimit(configured int, serverMax int64) (int, error) {
	if configured < 0 {
		return 0, fmt.Errorf("%w: negative MaxPayload %d", ErrInvalidConfig, configured)
	}
	limit := int64(-1) // no server bound known
	if serverMax > 0 {
		limit = serverMax - headerRoom
		if limit <= 0 {
			return 0, fmt.Errorf("%w: server max_payload %d leaves no room for job payloads beside %d bytes of headers", ErrInvalidConfig, serverMax, headerRoom)
		}
	}
	if configured == 0 {
		configured = DefaultMaxPayload
		if limit >= 0 && int64(configured) > limit {
			configured = int(limit)
		}
		return configured, nil
	}
	if limit >= 0 && int64(configured) > limit {
		return 0, fmt.Errorf("%w: MaxPayload %d exceeds the server's max_payload %d minus %d bytes for headers", ErrInvalidConfig, configured, serverMax, headerRoom)
	}
	return configured, nil
}

// Namespace returns the namespace the dispatcher publishes to.
func (d *Dispatcher) Namespace() string { return d.cfg.Namespace }

// MaxPayload returns the largest job payload the dispatcher accepts, after defaults.
func (d *Dispatcher) MaxPayload() int { return d.cfg.MaxPayload }

// ensure checks once the server's version (ErrServerTooOld) and that the namespace's streams a
// producer uses exist, returning an error wrapping ErrNamespaceNotFound if not; a failed check is done again by the next call. The
// dispatcher never creates streams: that would need stream-create rights, and a misspelt
// namespace would get streams that accept jobs nothing runs.
func (d *Dispatcher) ensure(ctx context.Context) error {
	d.checkMu.Lock()
	defer d.checkMu.Unlock()
	if d.checked {
		return nil
	}
	if err := natsver.CheckConn(d.nc); err != nil {
		return err
	}
	err := d.retry(ctx, func(ctx context.Context) error {
		return topology.Check(ctx, d.js, d.names, d.names.JobsStream(), d.names.ResultsStream())
	})
	if err != nil {
		return err
	}
	d.checked = true
	return nil
}

// finishContext returns a fresh context for work that must happen even though ctx is done: settling
// pending publishes and sealing. It keeps ctx's values and is bounded by RequestTimeout.
func (d *Dispatcher) finishContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), d.cfg.RequestTimeout)
}

// requestContext bounds one request to the server (or a page of direct gets) by RequestTimeout,
// so that a server that does not answer cannot hold a caller whose ctx has no deadline.
func (d *Dispatcher) requestContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d.cfg.RequestTimeout)
}

// retry calls try until it succeeds or fails with an error that will not pass by itself (see
// topology.Retry), within RequestTimeout: each try gets a quarter of it, so a request lost with
// a node (which would wait for the whole window) leaves time to try again.
func (d *Dispatcher) retry(ctx context.Context, try func(context.Context) error) error {
	ctx, cancel := d.requestContext(ctx)
	defer cancel()
	return topology.Retry(ctx, d.cfg.RequestTimeout/4, try, nil)
}

// publishControl publishes a group control message and waits for its acknowledgement. It
// returns the message's stream sequence.
func (d *Dispatcher) publishControl(ctx context.Context, c wire.GroupControl) (uint64, error) {
	msg := &nats.Msg{Subject: d.names.GroupSubject(wire.GroupToken(c.Group)), Header: c.Header()}
	// Retry a while (and within ctx) if the stream has no leader: just created, or a leader
	// change in a cluster.
	ack, err := d.js.PublishMsg(ctx, msg, jetstream.WithRetryAttempts(noLeaderRetries), jetstream.WithRetryWait(50*time.Millisecond))
	if err != nil {
		return 0, fmt.Errorf("weave: publish %s of group %q: %w", c.Op, c.Group, err)
	}
	return ack.Sequence, nil
}

func validateGroupID(id string) error {
	if err := wire.ValidateGroupID(id); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidGroup, err)
	}
	return nil
}
