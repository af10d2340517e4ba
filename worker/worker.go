package worker

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/rs/zerolog"

	"github.com/weavejobs/weave/internal/asyncpub"
	"github.com/weavejobs/weave/internal/natsver"
	"github.com/weavejobs/weave/internal/tracing"
	"github.com/weavejobs/weave/internal/wire"
)

// ErrAlreadyStarted is returned by a second call of Run.
var ErrAlreadyStarted = errors.New("weave: worker already started")

// finalFlushTimeout is how long Run waits for the last reports to be persisted, beyond
// DrainTimeout and TimeoutGrace, before it gives up on them.
const finalFlushTimeout = 5 * time.Second

// rollCallJitter bounds how long a worker waits to answer a roll call with a heartbeat: a
// thousand workers' answers spread over it instead of arriving together.
const rollCallJitter = 500 * time.Millisecond

// Worker runs the jobs of one pool with a bounded number of goroutines. Create it with New and
// run it with Run; Stats may be called at any time, from any goroutine.
type Worker struct {
	nc      *nats.Conn
	cfg     resolved
	handler Handler
	log     zerolog.Logger
	stats   counters
	started atomic.Bool
	// idleBeat is set while the latest heartbeat told the coordinator the worker was idle (and
	// so that the next comes later): the shepherd asks for one at once when a batch arrives.
	idleBeat atomic.Bool
	// Set by Run before its goroutines start, read-only after.
	runID   string // this process's run: in heartbeats and report message IDs
	hbInbox string // where heartbeats ask the coordinator to answer a refusal (watchRefusals)
}

// New validates cfg and returns a worker that runs jobs with h over nc. Errors for a bad
// configuration wrap ErrInvalidConfig. New does no I/O; Run creates what it needs.
func New(nc *nats.Conn, cfg Config, h Handler) (*Worker, error) {
	if nc == nil {
		return nil, invalid("nil NATS connection")
	}
	if f, ok := h.(HandlerFunc); h == nil || ok && f == nil {
		return nil, invalid("nil Handler")
	}
	r, err := resolve(cfg, nc.MaxPayload())
	if err != nil {
		return nil, err
	}
	w := &Worker{
		nc:      nc,
		cfg:     r,
		handler: h,
		log:     r.Logger.With().Str("worker", r.ID).Str("pool", r.pool).Logger(),
	}
	w.stats.sleeping.Store(int64(r.Concurrency))
	w.stats.mx.run = newRunHistogram(r.ID, r.pool)
	return w, nil
}

// ID returns the worker's ID.
func (w *Worker) ID() string { return w.cfg.ID }

// Pool returns the key of the worker's pool (see wire.PoolKey): "any", or "p" and 16 hex digits.
func (w *Worker) Pool() string { return w.cfg.pool }

// Stats returns the worker's counters.
func (w *Worker) Stats() Stats { return w.stats.snapshot(w.cfg.Concurrency) }

// Run checks the server's version (an error wrapping ErrServerTooOld if it is older than Weave
// needs) and that the namespace's streams exist (an error wrapping ErrNamespaceNotFound if not),
// creates or updates the pool's consumer, then pulls and runs jobs until ctx is done. It may be
// called once.
//
// When ctx is done Run drains: it stops pulling, returns the jobs it holds but has not started
// (reported with the wire status "released", which costs no attempt), and lets running jobs
// finish for up to DrainTimeout. Then it cancels their contexts; handlers still running TimeoutGrace later are
// reported failed and left behind (their goroutines end when they return). Run returns once every
// report is persisted and its batches acked, after a last heartbeat that tells the coordinator
// this worker has stopped.
//
// Run returns nil after a clean drain, an error from setup, an error wrapping
// ErrReportsNotPersisted if JetStream did not acknowledge the last reports within 5s more, or an
// error wrapping nats.ErrConnectionClosed if nc was closed under it. It returns an error wrapping
// ErrDuplicateID if the coordinator refuses the worker because another running worker has its
// ID: before any work is pulled, or later (after a drain) if the coordinator started after both.
func (w *Worker) Run(ctx context.Context) error {
	if !w.started.CompareAndSwap(false, true) {
		return ErrAlreadyStarted
	}
	cfg := &w.cfg
	if err := natsver.CheckConn(w.nc); err != nil {
		return fmt.Errorf("weave: worker %s: %w", cfg.ID, err)
	}
	w.runID = nuid.Next()
	ctx, refused := context.WithCancelCause(ctx)
	defer refused(nil)
	if err := w.join(ctx); err != nil {
		return fmt.Errorf("weave: worker %s: %w", cfg.ID, err)
	}
	refusals, err := w.watchRefusals(refused)
	if err != nil {
		return fmt.Errorf("weave: worker %s: subscribe to heartbeat answers: %w", cfg.ID, err)
	}
	defer func() { _ = refusals.Unsubscribe() }()
	js, err := jetstream.New(w.nc, jetstream.WithPublishAsyncTimeout(reportAckTimeout))
	if err != nil {
		return fmt.Errorf("weave: worker %s: %w", cfg.ID, err)
	}
	if _, err := ensureConsumer(ctx, js, cfg, w.log); err != nil {
		return fmt.Errorf("weave: worker %s: %w", cfg.ID, err)
	}
	pl, err := newPuller(w.nc, cfg.now, cfg.names.WorkStream(), cfg.names.WorkConsumer(cfg.pool), maxOpenPulls, cfg.Concurrency)
	if err != nil {
		return fmt.Errorf("weave: worker %s: %w", cfg.ID, err)
	}
	defer pl.close()

	// Handlers' contexts keep ctx's values but not its cancellation: they are canceled only
	// when the drain runs out of time (forceAll below), or at Run's return for a handler still
	// stuck then.
	forced, markForced := context.WithCancel(context.Background())
	defer markForced()
	giveUpCtx, giveUp := context.WithCancelCause(context.Background())
	defer giveUp(nil)

	n := cfg.Concurrency
	var (
		quit     = make(chan struct{})                              // closed by the shepherd on return
		reports  = make(chan completerEvent, min(max(n, 64), 1024)) // shepherd → completer
		done     = make(chan completion)                            // slots → shepherd
		expired  = make(chan *task)                                 // watchdog timers → shepherd
		exited   = make(chan struct{}, n)                           // slots → Run, one per returned goroutine
		beat     = make(chan struct{}, 1)                           // shepherd → heartbeats: send one now
		draining = make(chan struct{})                              // closed by the shepherd when it starts draining
	)
	maxPayload := int(w.nc.MaxPayload())
	if maxPayload <= 0 {
		maxPayload = 1 << 20
	}
	pub := asyncpub.New(w.nc, reportAckTimeout) // every report publish resolves: a lost ack times out
	defer pub.Close()
	leases := newLeaseKeeper(cfg.Lease, cfg.now)
	leases.held = &w.stats.held
	if err := leases.listen(w.nc); err != nil {
		return fmt.Errorf("weave: worker %s: subscribe to lease extensions' answers: %w", cfg.ID, err)
	}
	defer leases.close()
	acks := new(ackQueue) // the completer's acks, handed to the shepherd's next pulls
	comp := &completer{
		cfg: cfg, nc: w.nc, pub: pub, log: w.log, stats: &w.stats, leases: leases, acks: acks,
		subject:  cfg.names.ReportSubject(cfg.pool, cfg.ID),
		maxBytes: maxPayload - reportOverhead/2,
		runID:    w.runID,
		in:       reports,
	}
	shep := &shepherd{
		cfg: cfg, nc: w.nc, js: js, log: w.log, stats: &w.stats, beat: beat, idleBeat: &w.idleBeat, puller: pl, acks: acks,
		done: done, expired: expired, repaired: make(chan repairResult),
		quit: quit, reports: reports, drainStarted: draining,
	}
	// Cancellation requests (core NATS) cancel the contexts of the jobs they name.
	cancels := newCancelRegistry()
	shep.cancels = cancels
	force := func() {
		markForced() // first: an attempt its cancellation ends is reported as shutdown's
		cancels.forceAll()
	}
	defer force()
	cancelSub, err := w.nc.Subscribe(cfg.names.CancelSubject(), func(m *nats.Msg) {
		ids, err := wire.DecodeCancel(m.Data)
		if err != nil {
			w.log.Warn().Err(err).Msg("worker: malformed cancel request")
			return
		}
		cancels.cancel(ids, time.Now())
	})
	if err != nil {
		return fmt.Errorf("weave: worker %s: subscribe to cancellations: %w", cfg.ID, err)
	}
	defer func() { _ = cancelSub.Unsubscribe() }()
	// A coordinator starting its term calls the roll: heartbeat now, after a random part of
	// rollCallJitter so that a fleet's heartbeats do not all arrive at once.
	rollSub, err := w.nc.Subscribe(cfg.names.RollCallSubject(), func(*nats.Msg) {
		time.AfterFunc(rand.N(rollCallJitter), func() {
			select {
			case beat <- struct{}{}:
			default: // one is due already
			}
		})
	})
	if err != nil {
		return fmt.Errorf("weave: worker %s: subscribe to roll calls: %w", cfg.ID, err)
	}
	defer func() { _ = rollSub.Unsubscribe() }()
	heldSub, err := w.answerHeld(cancels) // see held.go
	if err != nil {
		return fmt.Errorf("weave: worker %s: subscribe to held-job requests: %w", cfg.ID, err)
	}
	defer func() { _ = heldSub.Unsubscribe() }()

	sl := &slots{
		handler: w.handler, base: context.WithoutCancel(ctx), forced: forced, cancels: cancels, grace: cfg.TimeoutGrace, maxResult: cfg.MaxResultSize,
		log: w.log, stats: &w.stats,
		lapsed: func(t *task) bool { return t.batch.lapsed(cfg.now(), cfg.Lease) },
		tracer: tracing.New(cfg.TracerProvider), workerID: cfg.ID,
		done: done, expired: expired, quit: quit, exited: exited,
	}

	w.log.Info().Int("concurrency", n).Strs("resources", cfg.resources).Msg("worker: running")

	// Goroutines, each owned by Run, which waits for all of them below (except slots stuck in
	// a handler that ignores its context).
	compDone := make(chan error, 1)
	go func() { compDone <- comp.run(giveUpCtx) }()
	// Each slot waits for tasks on a channel of its own (see slots); all sleep at first.
	channels := make([]chan *task, n)
	shep.sleeping = make([]chan<- *task, n)
	for i := range channels {
		channels[i] = make(chan *task, 1)
		shep.sleeping[i] = channels[i]
	}
	sl.start(channels)
	shepDone := make(chan error, 1)
	go func() { shepDone <- shep.run(ctx, force) }()
	hbStop, hbDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(hbDone)
		w.heartbeats(beat, hbStop)
	}()

	// The drain begins when ctx is done or the shepherd meets a fatal error. It is bounded:
	// DrainTimeout for running jobs, TimeoutGrace after canceling them, then finalFlushTimeout
	// for the last reports.
	<-draining
	budget := time.NewTimer(cfg.DrainTimeout + cfg.TimeoutGrace + finalFlushTimeout)
	defer budget.Stop()
	var compErr error
	select {
	case compErr = <-compDone:
	case <-budget.C:
		giveUp(fmt.Errorf("drain took longer than %v", cfg.DrainTimeout+cfg.TimeoutGrace+finalFlushTimeout))
		compErr = <-compDone
	}
	shepErr := <-shepDone
	for range n - shep.stuck {
		<-exited
	}
	close(hbStop)
	<-hbDone
	w.heartbeat(true)
	if err := w.nc.FlushTimeout(time.Second); err != nil {
		w.log.Debug().Err(err).Msg("worker: flush last heartbeat")
	}
	st := w.Stats()
	w.log.Info().Uint64("jobs", st.JobsRun).Uint64("ok", st.JobsOK).Uint64("failed", st.JobsFailed).
		Uint64("returned", st.Returned).Int("stuck", st.Stuck).Msg("worker: stopped")
	if cause := context.Cause(ctx); errors.Is(cause, ErrDuplicateID) {
		return errors.Join(fmt.Errorf("weave: worker %s: %w", cfg.ID, cause), shepErr, compErr)
	}
	return errors.Join(shepErr, compErr)
}

// heartbeats publishes a heartbeat every HeartbeatInterval, and at once on a signal from beat,
// until stop is closed.
func (w *Worker) heartbeats(beat <-chan struct{}, stop <-chan struct{}) {
	heartbeatLoop(w.cfg.HeartbeatInterval, beat, stop, func() int { return w.heartbeat(false) })
}

// heartbeat publishes a heartbeat and returns how many HeartbeatIntervals it says may pass until
// the next: idleBeats while the worker runs and holds nothing (dormantBeats once dormant), else 1.
func (w *Worker) heartbeat(stopped bool) int {
	hb := w.heartbeatMsg(stopped)
	every := 1
	switch {
	case hb.Busy > 0 || *hb.Held > 0 || hb.Draining:
	case w.stats.dormant.Load():
		every = w.cfg.dormantBeats
	default:
		every = w.cfg.idleBeats
	}
	hb.IntervalMS = int64(every) * w.cfg.HeartbeatInterval.Milliseconds()
	w.idleBeat.Store(every > 1)
	// Core NATS: a lost heartbeat is replaced by the next one. The reply subject is where the
	// coordinator answers a refusal (watchRefusals); it answers nothing else.
	subject := w.cfg.names.HeartbeatSubject(w.cfg.pool, w.cfg.ID)
	if err := w.nc.PublishRequest(subject, w.hbInbox, hb.Marshal()); err != nil {
		w.log.Debug().Err(err).Msg("worker: publish heartbeat")
	}
	return every
}
