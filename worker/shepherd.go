package worker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/weavejobs/weave/internal/topology"
	"github.com/weavejobs/weave/internal/transient"
	"github.com/weavejobs/weave/internal/wire"
)

const (
	// pullExpiry is how long a pull request waits at the server for messages. It also bounds
	// how long a pull left at a consumer leader that moved away can wait, which the heartbeats
	// below do not show (the old leader's node is still up): a longer expiry would let losing a
	// node pause a pool's job starts that long.
	pullExpiry = 10 * time.Second
	// dormantExpiry is how long the pull of a dormant worker waits (see shepherd.dormant), without
	// the server's heartbeats. The server walks all of a consumer's waiting pulls each time one
	// arrives, expires or is due a heartbeat, so a pool of idle workers costs it in proportion to
	// the square of their number and to how often their pulls come and go: dormancy takes that
	// rate down by an order of magnitude. It bounds how long a dormant worker may miss work when
	// its pull is lost without a word from the server (nothing tells of it but the expiry).
	dormantExpiry = time.Minute
	// pullHeartbeat is how often the server signals an open pull that it is alive; two missed
	// end the pull, so a pull lost with a node (or a consumer leader that moved) is noticed
	// within two seconds rather than ten (the default heartbeat, 5s).
	pullHeartbeat = time.Second
	// idlePullHeartbeat is pullHeartbeat for a pull made with nothing running or queued: the
	// server's heartbeats to a thousand idle workers' pulls were most of what an idle fleet
	// cost it, and an idle worker loses less to noticing a lost pull later.
	idlePullHeartbeat = 5 * time.Second
	// maxOpenPulls bounds this worker's pull requests open at once. A consumer holds 512 by
	// default, shared by all workers of its pool.
	maxOpenPulls = 2
	// Back-off after a pull that failed or ended early without messages. The cap bounds how
	// long a worker may go on waiting once its consumer has a leader again after an election
	// (at 5 s it added up to 5 s to a node loss's pause in the chaos test); failing pulls are
	// cheap "no responders" answers, so one every 2 s per worker is no load.
	minPullBackoff = 250 * time.Millisecond
	maxPullBackoff = 2 * time.Second
	// repairTimeout bounds one attempt to re-create a deleted stream or consumer.
	repairTimeout = 10 * time.Second
	// absorbLimit bounds how many ready events the shepherd handles before it decides on
	// pulls, so that a burst of completions becomes one pull rather than several.
	absorbLimit = 64
)

// errPullEndedEarly marks a pull request that ended long before its expiry without messages or
// error, which the server does for a consumer that no longer exists.
var errPullEndedEarly = errors.New("pull request ended early without messages")

// The shepherd's select has one case per pull lane.
var _ = [1]struct{}{}[maxOpenPulls-2]

type repairResult struct {
	cons jetstream.Consumer
	err  error
}

// taskQueue is a FIFO of tasks received and not yet started.
type taskQueue struct {
	buf  []*task
	head int
}

func (q *taskQueue) len() int     { return len(q.buf) - q.head }
func (q *taskQueue) push(t *task) { q.buf = append(q.buf, t) }
func (q *taskQueue) pop() *task {
	t := q.buf[q.head]
	q.buf[q.head] = nil
	q.head++
	if q.head == len(q.buf) {
		q.buf, q.head = q.buf[:0], 0
	}
	return t
}

// shepherd is the one goroutine that owns the worker's scheduling state: the local queue, which
// slots sleep, which tasks run, and how many messages open pull requests may still bring. It
// decides every pull (only for free slots), every wakeup (one sleeper per job, never more) and
// every outcome that goes to the completer, and it runs the drain.
type shepherd struct {
	cfg   *resolved
	nc    *nats.Conn
	js    jetstream.JetStream
	log   zerolog.Logger
	stats *counters
	beat  chan<- struct{} // asks the heartbeat goroutine for an early heartbeat; never blocks
	// idleBeat is set while the latest heartbeat said the worker was idle (Worker.idleBeat).
	idleBeat *atomic.Bool
	// pullsFailing: pulls have failed since the last one that went through; pullOutage logs
	// such a run of failures once at its start and once at its end (a node loss the cluster
	// mends by itself made a warning of every failed pull).
	pullsFailing bool
	pullOutage   *transient.Outage

	// Channels. The shepherd reads its open pulls' lanes (puller.lanes), done, expired and
	// repaired, and writes the slots' channels and reports. Writers of the channels it reads
	// select on quit, which it closes on return.
	done     chan completion   // written by slot goroutines
	cancels  *cancelRegistry   // its queued channel: cancellations of jobs not running here
	expired  chan *task        // written by watchdog timers of attempts with a deadline
	repaired chan repairResult // written by the repair goroutine
	quit     chan struct{}
	// drainStarted is closed when the drain begins, for Run to bound it.
	drainStarted chan struct{}
	// reports is read by the completer and closed by the shepherd on return. A send blocks
	// while the completer cannot keep up, which is the worker's backpressure.
	reports chan<- completerEvent

	// State, owned by the shepherd goroutine.
	puller  *puller         // its lanes' pull state is the shepherd's too
	acks    *ackQueue       // acks the completer hands to the next pulls
	pullCtx context.Context // canceled when the drain begins: ends repairs
	queue   taskQueue
	// sleeping are the channels of the slots waiting for a task, the last to sleep on top: a
	// slot's channel has room for one task and the shepherd sends it one only when it is
	// awake (onDone) or taken from here, so a send never blocks and wakes exactly that slot.
	// Set to every slot's channel before run.
	sleeping  []chan<- *task
	active    map[*task]struct{} // handed to a slot, outcome not reported yet
	stuck     int                // reported without their handler, which has not returned
	credits   int                // messages that open pulls may still bring
	openPulls int                // lanes with a pull open
	// dormant: the last pull ended at its expiry without work while the worker ran and held
	// nothing: its next pulls wait dormantExpiry, without heartbeats, and its own heartbeats
	// come every dormant period (Config.IdleHeartbeatInterval), until work comes or a pull ends
	// otherwise (an error, a reconnect, the server's silence past the expiry). The server
	// tells a pull of its end when it can (a restart ends the connection, which the worker
	// renews; a consumer's new leader answers the old one's pulls with an error), so a dormant
	// worker gets work as fast as an active one; the expiry bounds the rest.
	dormant   bool
	backoff   backoff
	retry     *time.Timer // pull back-off timer; nil when not backing off
	repairing bool
	draining  bool
	fatal     error
}

// run schedules until the drain is complete: ctx done (or a fatal error), no task active and no
// pull open. force cancels every handler's context; run calls it DrainTimeout after the drain
// began, and abandons handlers still running TimeoutGrace later.
func (s *shepherd) run(ctx context.Context, force context.CancelFunc) error {
	defer close(s.quit)
	defer close(s.reports)
	pullCtx, stopPulls := context.WithCancel(ctx)
	defer stopPulls()
	s.pullCtx = pullCtx
	s.stats.sleeping.Store(int64(len(s.sleeping)))
	s.active = make(map[*task]struct{}, s.cfg.Concurrency)
	s.backoff = backoff{lo: minPullBackoff, hi: maxPullBackoff}
	s.pullOutage = transient.New(s.log, "worker: pulls of work")
	defer s.pullsThrough()
	// A reconnect loses the server's side of open pulls: renew them at once rather than wait
	// for their missing heartbeats. A closed connection ends the worker.
	status := s.nc.StatusChanged(nats.CONNECTED, nats.CLOSED)
	defer s.nc.RemoveStatusListener(status)

	// Open pulls are checked for missed heartbeats and overdue ends once per heartbeat.
	watch := newPullWatch(pullHeartbeat)
	lanes := s.puller.lanes
	drain := drainSchedule{drainTimeout: s.cfg.DrainTimeout, grace: s.cfg.TimeoutGrace}
	defer func() {
		watch.stop()
		drain.stop()
		if s.retry != nil {
			s.retry.Stop()
		}
	}()
	ctxDone := ctx.Done()
	var canceled <-chan struct{} // cancellations of jobs not running here
	if s.cancels != nil {
		canceled = s.cancels.queued
	}
	s.pull()
	for {
		if !s.draining && (ctxDone == nil || s.fatal != nil) {
			s.startDrain(stopPulls)
			drain.begin()
		}
		if s.draining && len(s.active) == 0 && s.openPulls == 0 && !s.repairing {
			break
		}
		var retryC <-chan time.Time
		if s.retry != nil {
			retryC = s.retry.C
		}
		s.watchPulls(watch)
		select {
		case m := <-laneC(lanes[0]):
			s.onLane(lanes[0], m)
		case m := <-laneC(lanes[1]):
			s.onLane(lanes[1], m)
		case c := <-s.done:
			s.onDone(c)
		case <-canceled:
			s.dropCanceled()
		case <-watch.C():
			watch.fired()
			s.checkPulls(s.cfg.now())
		case t := <-s.expired:
			s.onExpired(t)
		case r := <-s.repaired:
			s.onRepaired(r)
		case st, ok := <-status:
			if !ok {
				status = nil
				continue
			}
			s.onStatus(st)
		case <-retryC:
			s.retry = nil
		case <-ctxDone:
			ctxDone = nil
		case <-drain.C():
			switch drain.fired() {
			case drainForce:
				if len(s.active) > 0 {
					s.log.Warn().Int("running", len(s.active)).Stringer("drain_timeout", s.cfg.DrainTimeout).
						Msg("worker: drain timeout, canceling running jobs")
				}
				force()
			case drainAbandon:
				s.abandonAll()
			}
		}
		s.absorb()
		s.pull()
	}
	s.log.Debug().Int("stuck", s.stuck).Msg("worker: drain complete")
	return s.fatal
}

// laneC is l's channel if a pull is open on it, else nil (its case never fires).
func laneC(l *lane) <-chan laneMsg {
	if l.busy {
		return l.msgs
	}
	return nil
}

// absorb handles events that are already waiting, so that their effect on pulls is decided
// once ("batch, then signal once").
func (s *shepherd) absorb() {
	lanes := s.puller.lanes
	for range absorbLimit {
		select {
		case m := <-laneC(lanes[0]):
			s.onLane(lanes[0], m)
		case m := <-laneC(lanes[1]):
			s.onLane(lanes[1], m)
		case c := <-s.done:
			s.onDone(c)
		default:
			return
		}
	}
}

// pull opens a pull request for the slots that nothing covers yet: sleeping slots, less queued
// jobs, less messages open pulls may still bring. A message may hold several jobs; the extra ones
// wait in the queue.
func (s *shepherd) pull() {
	// Pulls go on while a repair runs: the error behind it ("no responders") also comes from a
	// cluster electing the consumer's leader, and then the repair's own requests may wait out
	// their timeout while the consumer is back already.
	if s.draining || s.retry != nil || s.openPulls >= maxOpenPulls {
		return
	}
	want := len(s.sleeping) - s.queue.len() - s.credits
	if want <= 0 {
		return
	}
	// The oldest ack the completer handed over goes with the pull (see ackQueue).
	ack := s.acks.take()
	expiry, hb := s.cfg.pullExpiry, pullHeartbeat
	switch {
	case !s.idle():
	case s.dormant:
		expiry, hb = s.cfg.dormantExpiry, 0
	default:
		hb = idlePullHeartbeat
	}
	hb = min(hb, expiry/2) // the server refuses a pull whose heartbeats come less than twice
	if _, err := s.puller.pull(want, expiry, hb, ack); err != nil {
		if ack != nil {
			_ = ack.Ack() // best effort; if lost, its batch is redelivered after its lease
		}
		s.pullFailed(err)
		return
	}
	s.openPulls++
	s.credits += want
	s.stats.pulls.Add(1)
	if ack != nil {
		s.stats.acksWithPulls.Add(1)
	}
}

// idle tells whether the worker runs nothing and has nothing queued.
func (s *shepherd) idle() bool { return len(s.active) == 0 && s.queue.len() == 0 }

// setDormant sets whether the worker is dormant (see dormant).
func (s *shepherd) setDormant(dormant bool) {
	if s.dormant != dormant {
		s.dormant = dormant
		s.stats.dormant.Store(dormant)
	}
}

// wake ends dormancy for another cause than work: the next pulls are an active worker's, and
// the coordinator hears at once (a dormant worker's heartbeats are far apart).
func (s *shepherd) wake() {
	if s.dormant {
		s.setDormant(false)
		s.beatNow()
	}
}

// beatNow asks for a heartbeat at once if the last said the worker was idle: the coordinator
// expects the next one only after the idle period.
func (s *shepherd) beatNow() {
	if s.idleBeat.Load() {
		select {
		case s.beat <- struct{}{}:
		default:
		}
	}
}

// watchPulls tells w when the open pulls need checking: once the earliest dormant pull is overdue
// if only dormant pulls are open, else every heartbeat.
func (s *shepherd) watchPulls(w *pullWatch) {
	var due time.Time
	for _, l := range s.puller.lanes {
		switch {
		case !l.busy:
		case l.heartbeat > 0:
			w.watch(time.Time{}, time.Time{})
			return
		default:
			if at := l.started.Add(l.expires + time.Second); due.IsZero() || at.Before(due) {
				due = at
			}
		}
	}
	w.watch(due, s.cfg.now())
}

// onLane takes a message read from lane l, whose pull is open.
func (s *shepherd) onLane(l *lane, m laneMsg) {
	w, ended, err := s.puller.receive(l, m)
	if w != nil {
		s.onBatch(w)
	}
	if ended {
		s.onPullEnd(l, err)
	}
}

// checkPulls gives up the open pulls that are overdue at now (puller.overdue).
func (s *shepherd) checkPulls(now time.Time) {
	for _, l := range s.puller.lanes {
		if !l.busy {
			continue
		}
		if give, err := s.puller.overdue(l, now); give {
			s.puller.abandon(l, s.onBatch)
			s.onPullEnd(l, err)
			s.wake() // the server did not end it: pull as an active worker until one expires
		}
	}
}

// endPulls gives up every open pull, on purpose (a drain, a reconnect): no back-off follows.
func (s *shepherd) endPulls() {
	for _, l := range s.puller.lanes {
		if l.busy {
			s.puller.abandon(l, s.onBatch)
			s.pullEnded(l)
		}
	}
}

// onBatch takes a work batch that an open pull received.
func (s *shepherd) onBatch(msg workMsg) {
	s.credits--
	s.stats.batches.Add(1)
	data := msg.Data()
	jobs, err := wire.DecodeWork(data)
	wire.WorkTraces(msg.Headers(), jobs)
	wire.WorkProofs(msg.Headers(), jobs)
	wire.WorkAfter(msg.Headers(), jobs)
	if err == nil && len(jobs) == 0 {
		err = fmt.Errorf("%w: work batch without jobs", wire.ErrMalformed)
	}
	if err != nil {
		// It can never succeed: terminate it rather than let it come back after every lease.
		s.stats.malformed.Add(1)
		s.log.Error().Err(err).Str("subject", msg.Subject()).Int("bytes", len(data)).
			Msg("worker: malformed work batch terminated")
		if err := msg.TermWithReason("weave: " + err.Error()); err != nil {
			s.log.Warn().Err(err).Msg("worker: terminate malformed work batch")
		}
		var seq uint64
		if md, err := msg.Metadata(); err == nil {
			seq = md.Sequence.Stream
		}
		if _, err := s.js.PublishMsgAsync(&nats.Msg{Subject: s.cfg.names.RejectSubject(), Header: nats.Header(wire.RejectionHeader(msg.Subject(), seq, err.Error()))}); err != nil {
			s.log.Warn().Err(err).Msg("worker: record a rejected work batch")
		}
		return
	}
	at := msg.ReceivedAt()
	b := &batch{msg: msg, jobs: len(jobs), received: at, leaseFrom: at}
	s.reports <- completerEvent{batch: b}
	var deliveries uint64
	if md, err := msg.Metadata(); err == nil {
		deliveries = md.NumDelivered
	}
	for _, wj := range jobs {
		t := &task{
			job: Job{
				ID: wj.ID, Group: wj.Group, Key: wj.Key, Payload: wj.Payload,
				Attempt: int(wj.Attempt), Timeout: wj.Timeout, After: afterResults(wj.After),
			},
			timeout: s.cfg.timeoutOf(wj),
			batch:   b,
			trace:   wj.Trace,
			proof:   wj.Proof,
		}
		switch {
		case deliveries > 1:
			// The batch's lease ran out before: the worker that held it died or stalled. Its
			// attempts are lost (failed, retried by the coordinator), not run again here: some
			// may have been reported already, and a job that kills its worker must not go on
			// killing workers past its MaxAttempts.
			s.lose(t, deliveries)
		case s.draining:
			s.returnJob(t)
		default:
			s.queue.push(t)
		}
	}
	// Every job queued first, then the wakeups: one sleeper per job.
	for len(s.sleeping) > 0 {
		t := s.next()
		if t == nil {
			break
		}
		slot := s.sleeping[len(s.sleeping)-1]
		s.sleeping = s.sleeping[:len(s.sleeping)-1]
		s.start(t)
		slot <- t
		s.stats.wakeups.Add(1)
	}
	s.gauges()
	s.setDormant(false)
	s.beatNow() // no longer idle: the coordinator hears so now, not at the end of the idle period
}

// onDone takes a slot's outcome and gives the slot its next task: the oldest queued job, run by
// this already awake goroutine; or, with nothing queued, counts it as sleeping.
func (s *shepherd) onDone(c completion) {
	t := c.task
	switch {
	case c.dropped:
		delete(s.active, t)
		s.drop(t)
	case t.reported:
		s.stuck--
		s.log.Warn().Uint64("job", t.job.ID).Int("attempt", t.job.Attempt).
			Msg("worker: handler returned after its attempt was reported; outcome discarded, slot back in use")
	default:
		delete(s.active, t)
		s.report(t, c.out)
	}
	if next := s.next(); next != nil {
		s.start(next)
		c.slot <- next
	} else {
		s.sleeping = append(s.sleeping, c.slot)
	}
	s.gauges()
}

// dropCanceled reports canceled, at once, the queued jobs a cancellation named: a job sent ahead
// of this worker's slots would otherwise wait for a slot to be reported (and its group to end).
func (s *shepherd) dropCanceled() {
	kept := s.queue.buf[:s.queue.head]
	for _, t := range s.queue.buf[s.queue.head:] {
		// A lapsed batch's job is left to next, which drops it unreported (its batch comes back).
		if t.batch.lapsed(s.cfg.now(), s.cfg.Lease) || !s.cancels.takeEarly(t.job.ID) {
			kept = append(kept, t)
			continue
		}
		s.report(t, outcome{kind: kindCanceled, report: wire.Report{
			ID: t.job.ID, Attempt: uint32(t.job.Attempt), Status: wire.StatusCanceled, Data: []byte(canceledQueued),
		}})
	}
	clear(s.queue.buf[len(kept):])
	s.queue.buf = kept
	if s.queue.head == len(s.queue.buf) {
		s.queue.buf, s.queue.head = s.queue.buf[:0], 0
	}
	s.gauges()
}

// canceledQueued is the error of a job canceled before it started.
const canceledQueued = "job canceled before it started"

// next takes the oldest queued task whose batch's lease has not lapsed, or returns nil. The
// tasks of a lapsed batch are dropped without a report: the server redelivers their batch, and
// the worker that receives it reports them lost (ARCHITECTURE.md, "Job state machine"). Running
// them here as well would run them twice, after the coordinator has given up on them.
func (s *shepherd) next() *task {
	for s.queue.len() > 0 {
		t := s.queue.pop()
		if !t.batch.lapsed(s.cfg.now(), s.cfg.Lease) {
			return t
		}
		s.drop(t)
	}
	return nil
}

// drop forgets a task of a lapsed batch.
func (s *shepherd) drop(t *task) {
	t.reported = true
	s.stats.dropped.Add(1)
	s.log.Warn().Uint64("job", t.job.ID).Int("attempt", t.job.Attempt).Stringer("lease", s.cfg.Lease).
		Msg("worker: job not started: its batch's lease lapsed (was the process stopped?), so it was redelivered")
}

// onExpired reports an attempt whose handler has ignored its deadline for TimeoutGrace. The
// handler keeps its slot until it returns.
func (s *shepherd) onExpired(t *task) {
	if _, ok := s.active[t]; !ok {
		return // it returned in time; the timer lost the race
	}
	s.abandon(t, kindTimeout, fmt.Sprintf("timeout after %v: the handler ignored its context and had not returned %v later",
		t.timeout, s.cfg.TimeoutGrace))
}

// abandonAll reports every attempt still running TimeoutGrace after a forced shutdown.
func (s *shepherd) abandonAll() {
	for t := range s.active {
		s.abandon(t, kindShutdown, fmt.Sprintf("canceled at worker shutdown: the handler had not returned %v after its context was canceled",
			s.cfg.TimeoutGrace))
	}
}

func (s *shepherd) abandon(t *task, k kind, text string) {
	delete(s.active, t)
	s.stuck++
	s.stats.abandoned.Add(1)
	s.log.Warn().Uint64("job", t.job.ID).Int("attempt", t.job.Attempt).Str("reason", text).
		Msg("worker: attempt reported without its handler, which keeps its slot until it returns")
	s.report(t, outcome{kind: k, report: wire.Report{
		ID: t.job.ID, Attempt: uint32(t.job.Attempt), Status: wire.StatusError,
		Duration: clampDuration(time.Since(t.started)), Data: []byte(wire.Truncate(text, s.cfg.MaxResultSize)),
	}})
	s.gauges()
}

func (s *shepherd) start(t *task) {
	t.started = time.Now()
	s.active[t] = struct{}{}
	s.stats.jobsRun.Add(1)
	s.stats.mx.started(t.job.Attempt)
}

// returnJob gives back a job that was not started: the coordinator releases it again, and the
// attempt does not count.
func (s *shepherd) returnJob(t *task) {
	s.report(t, outcome{kind: kindReturned, report: wire.Report{
		ID: t.job.ID, Attempt: uint32(t.job.Attempt), Status: wire.StatusReturned,
	}})
}

func (s *shepherd) lose(t *task, deliveries uint64) {
	s.report(t, outcome{kind: kindLost, report: wire.Report{
		ID: t.job.ID, Attempt: uint32(t.job.Attempt), Status: wire.StatusLapsed, Data: []byte(wire.LapsedText(deliveries)),
	}})
}

// report counts an outcome and hands it to the completer.
func (s *shepherd) report(t *task, out outcome) {
	t.reported = true
	out.report.Proof = t.proof // the coordinator accepts the report for this release only
	s.stats.mx.observe(out.report.Duration, !t.started.IsZero())
	if !t.started.IsZero() {
		// The coordinator tells queueing here apart from round trips when it sizes its window.
		out.report.Waited = clampDuration(t.started.Sub(t.batch.received))
	}
	switch out.kind {
	case kindOK:
		s.stats.jobsOK.Add(1)
	case kindReturned:
		s.stats.returned.Add(1)
	case kindLost:
		s.stats.lost.Add(1)
	case kindCanceled:
		s.stats.canceled.Add(1)
	case kindTimeout:
		s.stats.timeouts.Add(1)
		s.stats.jobsFailed.Add(1)
	default:
		s.stats.jobsFailed.Add(1)
	}
	s.reports <- completerEvent{batch: t.batch, report: out.report, isReport: true, span: out.span}
}

// startDrain stops pulling and returns every job not started.
func (s *shepherd) startDrain(stopPulls context.CancelFunc) {
	s.draining = true
	s.stats.draining.Store(true)
	close(s.drainStarted)
	// Giving up a pull unsubscribes its inbox, so the server stops delivering to it; a batch
	// already on its way is not received and goes to another worker after its lease. Batches
	// received already are returned (onBatch, draining).
	stopPulls()
	s.endPulls()
	if s.retry != nil {
		s.retry.Stop()
		s.retry = nil
	}
	returned := 0
	for t := s.next(); t != nil; t = s.next() {
		s.returnJob(t)
		returned++
	}
	s.gauges()
	select {
	case s.beat <- struct{}{}:
	default:
	}
	ev := s.log.Info().Int("running", len(s.active)).Int("returned", returned)
	if s.fatal != nil {
		ev = s.log.Error().Err(s.fatal).Int("running", len(s.active)).Int("returned", returned)
	}
	ev.Msg("worker: draining")
}

// onPullEnd follows the end of lane l's pull, with err (nil for its normal ends): after one that
// brought nothing, long before its expiry or with an error, the next pull waits (pullFailed).
func (s *shepherd) onPullEnd(l *lane, err error) {
	s.pullEnded(l)
	switch {
	case s.draining:
		return // ended on purpose
	case l.received > 0 || (err == nil && s.cfg.now().Sub(l.started) >= l.expires/2):
		s.backoff.reset()
		s.pullsThrough()
		if l.received == 0 && s.idle() {
			s.setDormant(true) // it waited out its expiry for nothing
		}
		return
	}
	s.wake()
	if err == nil {
		err = errPullEndedEarly
	}
	s.pullFailed(err)
}

// pullEnded counts lane l's pull as ended: what it did not bring is no longer expected.
func (s *shepherd) pullEnded(l *lane) {
	s.openPulls--
	s.credits -= l.requested - l.received
}

// pullFailed backs off before the next pull and, if the consumer seems gone, re-creates it.
func (s *shepherd) pullFailed(err error) {
	if s.nc.IsClosed() {
		s.fatal = fmt.Errorf("weave: worker %s: %w", s.cfg.ID, nats.ErrConnectionClosed)
		return
	}
	pause := s.backoff.next()
	s.retry = time.NewTimer(pause)
	if errors.Is(err, context.Canceled) {
		return // a pull canceled by a drain or shutdown is not a failure
	}
	s.log.Debug().Err(err).Stringer("backoff", pause).Msg("worker: pull failed")
	if !s.pullsFailing {
		s.pullsFailing = true
		s.pullOutage.Begin("pull", err, time.Now())
	} else {
		s.pullOutage.Again(err)
	}
	if !s.repairing && consumerGone(err) {
		s.repair()
	}
}

// pullsThrough ends a run of failed pulls: a pull went through (or the worker stops).
func (s *shepherd) pullsThrough() {
	if s.pullsFailing {
		s.pullsFailing = false
		s.pullOutage.End(time.Now())
	}
}

// consumerGone reports whether a pull error suggests that the consumer or its stream no longer
// exists. A pull sent to a missing consumer has no responders.
func consumerGone(err error) bool {
	for _, e := range []error{jetstream.ErrConsumerDeleted, jetstream.ErrConsumerNotFound, jetstream.ErrStreamNotFound,
		nats.ErrNoResponders, errPullEndedEarly} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// repair re-creates the pool's consumer in the background (someone deleted it).
func (s *shepherd) repair() {
	s.repairing = true
	ctx := s.pullCtx
	go func() {
		ctx, cancel := context.WithTimeout(ctx, repairTimeout)
		defer cancel()
		cons, err := tryEnsureConsumer(ctx, s.js, s.cfg)
		s.repaired <- repairResult{cons: cons, err: err} // the shepherd waits for it before returning
	}()
}

// onStatus handles a change of the connection's status.
func (s *shepherd) onStatus(st nats.Status) {
	switch st {
	case nats.CLOSED:
		s.fatal = fmt.Errorf("weave: worker %s: %w", s.cfg.ID, nats.ErrConnectionClosed)
	case nats.CONNECTED:
		s.log.Info().Int("pulls", s.openPulls).Msg("worker: reconnected, renewing pull requests")
		s.endPulls()
		s.wake()
		if s.retry != nil {
			s.retry.Stop()
			s.retry = nil
		}
		s.backoff.reset()
	}
}

func (s *shepherd) onRepaired(r repairResult) {
	s.repairing = false
	if r.err != nil {
		if !s.draining {
			// The next failed pull repairs again: part of the pulls' outage.
			s.log.Debug().Err(r.err).Msg("worker: re-create consumer")
			if s.pullsFailing {
				s.pullOutage.Again(r.err)
			} else {
				s.pullOutage.Once("re-create consumer", r.err, time.Now())
			}
		}
		return
	}
	s.log.Info().Str("consumer", s.cfg.names.WorkConsumer(s.cfg.pool)).Msg("worker: consumer re-created")
}

// gauges publishes the state that Stats and heartbeats read.
func (s *shepherd) gauges() {
	s.stats.sleeping.Store(int64(len(s.sleeping)))
	s.stats.queued.Store(int64(s.queue.len()))
	s.stats.stuck.Store(int64(s.stuck))
}

// ensureConsumer checks that the namespace's streams a worker uses exist (a worker does not create
// them: see ErrNamespaceNotFound) and creates or updates the pool's durable consumer. A worker
// (re)started while a cluster elects leaders waits that out rather than exit: errors that pass by
// themselves are tried again, pausing up to 2s, until ctx ends.
func ensureConsumer(ctx context.Context, js jetstream.JetStream, cfg *resolved, log zerolog.Logger) (jetstream.Consumer, error) {
	nsDeadline, nsLogged := time.Now().Add(cfg.NamespaceWait), false
	for {
		var cons jetstream.Consumer
		err := topology.Retry(ctx, ensureTimeout, func(ctx context.Context) (err error) {
			cons, err = tryEnsureConsumer(ctx, js, cfg)
			return err
		}, func(err error, pause time.Duration) {
			log.Warn().Err(err).Stringer("retry_in", pause).Msg("worker: streams not reachable yet; trying again")
		})
		if !errors.Is(err, ErrNamespaceNotFound) || !time.Now().Before(nsDeadline) || ctx.Err() != nil {
			return cons, err
		}
		// Config.NamespaceWait: the coordinator may be starting too.
		if !nsLogged {
			log.Warn().Err(err).Stringer("wait", cfg.NamespaceWait).Msg("worker: waiting for the namespace's streams")
			nsLogged = true
		}
		t := time.NewTimer(namespacePoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
	}
}

// namespacePoll is how often a worker waiting for its namespace (Config.NamespaceWait) looks.
const namespacePoll = 250 * time.Millisecond

// ensureTimeout bounds one try of ensureConsumer.
const ensureTimeout = 5 * time.Second

func tryEnsureConsumer(ctx context.Context, js jetstream.JetStream, cfg *resolved) (jetstream.Consumer, error) {
	if err := topology.Check(ctx, js, cfg.names, cfg.names.WorkStream(), cfg.names.EventsStream()); err != nil {
		return nil, err
	}
	cc := topology.WorkConsumer(cfg.names, cfg.pool, cfg.Lease)
	cons, err := js.CreateOrUpdateConsumer(ctx, cfg.names.WorkStream(), cc)
	if err != nil && strings.Contains(strings.ToLower(err.Error()), "max waiting") {
		// The server cannot change it, and a consumer an earlier release created has its
		// default: keep that one's rather than fail (the worker role may not read its info).
		cc.MaxWaiting = topology.DefaultMaxWaiting
		cons, err = js.CreateOrUpdateConsumer(ctx, cfg.names.WorkStream(), cc)
	}
	if err != nil {
		return nil, fmt.Errorf("weave: create consumer %s: %w", cc.Durable, err)
	}
	return cons, nil
}
