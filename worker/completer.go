package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/weavejobs/weave/internal/asyncpub"
	"github.com/weavejobs/weave/internal/transient"
	"github.com/weavejobs/weave/internal/wire"
)

// ErrReportsNotPersisted is returned by Run when it stopped before JetStream acknowledged every
// report. The work batches of those reports were not acked, so they run again elsewhere after
// their lease: no outcome is lost, but some attempts repeat.
var ErrReportsNotPersisted = errors.New("weave: worker stopped with reports not persisted")

const (
	// reportAckTimeout bounds the wait for JetStream to acknowledge one report message.
	reportAckTimeout = 5 * time.Second
	// maxInflightReports bounds report messages awaiting their acknowledgement; beyond it the
	// completer stops taking reports, which holds up the shepherd and so the whole worker.
	maxInflightReports = 64
	// Back-off between publishes of a report message that failed.
	minReportBackoff = 50 * time.Millisecond
	maxReportBackoff = 2 * time.Second
	// maxAdaptiveLinger caps the adaptive report linger (see Config.ReportLinger).
	maxAdaptiveLinger = 10 * time.Millisecond
	// siblingWait is the longest a report that would go at once waits for the other jobs of its
	// work batch, which, started together, often end together (see completer.add).
	siblingWait = 200 * time.Microsecond
	// reportFieldsSize bounds a report's encoding beside its data: three varints, the status
	// byte and the data's length.
	reportFieldsSize = 3*10 + 1 + 10
	// proofFieldsSize bounds a report's entry in the Weave-Proof header beside the proof itself:
	// the job ID, the attempt and the separators (and the header's name, for the first).
	proofFieldsSize = len(wire.HdrProof) + 4 + 20 + 1 + 10 + 1
)

// batch is one work-batch message. It is acked once the reports of all its jobs are persisted.
type batch struct {
	msg      workMsg
	jobs     int
	received time.Time // when the worker got it; a job's wait is from here to its start

	// Owned by the completer.
	persisted int  // reports persisted by JetStream
	reported  int  // reports the completer received
	settled   bool // acked or lapsed: its reports no longer count in completer.unreported

	// The batch's lease as far as this worker can be sure of it (see lapsed): guarded by mu,
	// read by the shepherd, the slots, the completer and the answers to extensions.
	mu        sync.Mutex
	leaseFrom time.Time // the receipt (see lane.stamp), or the sending of the latest extension the server confirmed in time
	asked     time.Time // the sending of the last extension, confirmed or not (zero: none yet)
	gone      bool      // the lease lapsed: the batch is redelivered, never extended or acked here
}

// leaseState is what a batch's lease needs at a tick of the lease keeper.
type leaseState uint8

const (
	leaseRecent leaseState = iota // extended (or asked to be) less than a quarter lease ago
	leaseDue                      // due for an extension
	leaseLapsed                   // lapsed: the server's to redeliver
)

// check tells what b's lease needs at now: an extension once a quarter lease has passed since
// the last one sent (or since its receipt), none once it has lapsed. For leaseDue it records
// the extension's sending at now.
func (b *batch) check(now time.Time, lease time.Duration) leaseState {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.gone || now.Sub(b.leaseFrom) >= lease {
		b.gone = true
		return leaseLapsed
	}
	if now.Sub(b.leaseFrom) < lease/4 || !b.asked.IsZero() && now.Sub(b.asked) < lease/4 {
		return leaseRecent
	}
	b.asked = now
	return leaseDue
}

// confirm takes the server's answer, at now, to an extension sent at sent. The lease then runs
// from the sending, but only if it had not lapsed by now: the server handled the extension at
// some moment between its sending and now, so only then is it sure that the lease held without
// a gap (an extension delayed past the lease, in a buffer while the connection was down, renews
// whoever holds the batch by then). It reports whether it counted.
func (b *batch) confirm(sent, now time.Time, lease time.Duration) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.gone {
		return false
	}
	if now.Sub(b.leaseFrom) >= lease {
		b.gone = true
		return false
	}
	if sent.After(b.leaseFrom) {
		b.leaseFrom = sent
	}
	return true
}

// lapsed reports whether the batch's lease ran out: a whole lease has passed since its receipt
// or the last extension the server confirmed in time. That happens when the process was stopped
// (SIGSTOP, a long GC or VM pause) or cut off from the server for longer than its lease; the
// server may then have redelivered the batch, and the worker that gets it reports its jobs lost,
// so the jobs not started here must not start. The clock is monotonic, so a wall clock change
// neither triggers nor hides it.
func (b *batch) lapsed(now time.Time, lease time.Duration) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.gone && now.Sub(b.leaseFrom) >= lease {
		b.gone = true
	}
	return b.gone
}

// completerEvent is the shepherd's message to the completer: a new batch to keep leased or, if
// isReport, the report of one of batch's jobs. A batch comes before its reports.
type completerEvent struct {
	batch    *batch
	report   wire.Report
	isReport bool
	span     trace.Span // the report's weave.outcome span, or nil (trace.go)
}

// publication is one report message on its way to JetStream.
type publication struct {
	msg     *nats.Msg
	id      string       // Nats-Msg-Id, so a retry after a lost acknowledgement is deduplicated
	batches []*batch     // the batch of each report in the message
	spans   []trace.Span // weave.outcome spans to end once stored
	fut     jetstream.PubAckFuture
	err     error // set when the last publish failed; fut is then nil
}

// completer is the goroutine that batches reports into messages, publishes them, acks each
// work batch once all its reports are persisted, and extends the lease of every batch not yet
// acked.
type completer struct {
	cfg   *resolved
	nc    *nats.Conn
	pub   *asyncpub.Publisher // publishes the report messages
	log   zerolog.Logger
	stats *counters
	// failing: the head publication has failed since it was last persisted; outage logs such a
	// run of failures once at its start and once at its end, not per try.
	failing  bool
	outage   *transient.Outage
	subject  string // this worker's report subject
	maxBytes int    // largest report message
	runID    string // prefix of message IDs, unique per Run

	in <-chan completerEvent // written and closed by the shepherd

	// State, owned by the completer goroutine.
	pending        []wire.Report
	pendingBatches []*batch
	pendingBytes   int
	pendingSpans   []trace.Span
	pace           *pacer         // when the pending reports go
	avgRun         time.Duration  // recent average handler run time, for the adaptive linger
	holding        bool           // reports that would have gone at once wait for their batch's others (see add)
	unreported     int            // jobs of the batches held that have not reported: 0 when the worker is idle
	inflight       []*publication // publish order; only the head's outcome is awaited
	retry          *time.Timer    // set while waiting to publish the head again
	backoff        backoff
	leases         *leaseKeeper // the batches not acked yet; listening before run
	seq            uint64
	lastBatch      *batch      // the latest batch received
	held           *batch      // persisted, its ack held back (see ack)
	heldTimer      *time.Timer // runs while held is set: acks held past holdAck (created once)
	acks           *ackQueue   // acks handed to the shepherd's next pulls (see handOver)
	queueTimer     *time.Timer // runs while acks may hold some of ours (created once)
	queueArmed     bool
}

// ackQueue holds acknowledgements the completer hands to the shepherd, so that each goes in
// the shepherd's next pull request (+NXT): a worker that gets its batches one at a time (many
// workers with few slots each) then sends the server one message per batch instead of two.
// Whichever of the two takes an ack out sends it: the shepherd with a pull, or the completer
// alone once it has waited ackWait (or, beyond maxQueuedAcks, at once).
type ackQueue struct {
	mu sync.Mutex
	q  []queuedAck // oldest first
}

type queuedAck struct {
	msg workMsg
	at  time.Time
}

// maxQueuedAcks bounds the acks waiting for a pull: a pull carries one.
const maxQueuedAcks = 4

// push queues m, handed over at at, and returns the oldest ack if the queue was full: it is
// for the caller to send.
func (a *ackQueue) push(m workMsg, at time.Time) (over workMsg) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.q) == maxQueuedAcks {
		over = a.q[0].msg
		a.q = append(a.q[:0], a.q[1:]...)
	}
	a.q = append(a.q, queuedAck{msg: m, at: at})
	return over
}

// take removes and returns the oldest queued ack, or nil.
func (a *ackQueue) take() workMsg {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.q) == 0 {
		return nil
	}
	m := a.q[0].msg
	a.q = append(a.q[:0], a.q[1:]...)
	return m
}

// due removes and returns the acks queued at or before t, and when the oldest left was queued
// (zero if none is left).
func (a *ackQueue) due(t time.Time) (msgs []workMsg, next time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for n < len(a.q) && !a.q[n].at.After(t) {
		msgs = append(msgs, a.q[n].msg)
		n++
	}
	a.q = append(a.q[:0], a.q[n:]...)
	if len(a.q) > 0 {
		next = a.q[0].at
	}
	return msgs, next
}

// holdAck bounds how long the ack of the latest batch received waits (see completer.ack).
const holdAck = 50 * time.Millisecond

// run works until the shepherd has closed in and every report is persisted, or until ctx is
// canceled (Run gives up waiting): then it discards what is left and returns an error wrapping
// ErrReportsNotPersisted.
func (c *completer) run(ctx context.Context) error {
	c.pace = newPacer()
	c.backoff = backoff{lo: minReportBackoff, hi: maxReportBackoff}
	c.outage = transient.New(c.log, "worker: publishes of reports")
	defer c.through()
	defer func() {
		c.pace.disarm()
		if c.retry != nil {
			c.retry.Stop()
		}
		c.releaseHeld()                         // its reports are persisted
		c.sendQueued(time.Now().Add(time.Hour)) // every ack still queued: no pull will take them now
		if c.queueTimer != nil {
			c.queueTimer.Stop()
		}
		c.leases.stop()
	}()

	in := c.in
	for in != nil || len(c.pending) > 0 || len(c.inflight) > 0 {
		var (
			inC                       <-chan completerEvent
			lingerC, retryC, refreshC <-chan time.Time
			heldC, queueC             <-chan time.Time
			okC                       <-chan *jetstream.PubAck
			errC                      <-chan error
		)
		if in != nil && len(c.inflight) < maxInflightReports {
			inC = in
		}
		lingerC, refreshC = c.pace.C(), c.leases.C()
		if c.held != nil {
			heldC = c.heldTimer.C
		}
		if c.queueArmed {
			queueC = c.queueTimer.C
		}
		if len(c.inflight) > 0 {
			head := c.inflight[0]
			switch {
			case head.fut != nil:
				okC, errC = head.fut.Ok(), head.fut.Err()
			case c.nc.IsClosed():
				return c.giveUp(in, nats.ErrConnectionClosed)
			case c.retry == nil:
				c.failed(head.err)
			}
			if c.retry != nil {
				retryC = c.retry.C
			}
		}
		select {
		case ev, ok := <-inC:
			if !ok {
				in = nil
				c.flush()
				continue
			}
			c.add(ev)
		case <-lingerC:
			c.pace.disarm()
			c.flush()
		case <-okC:
			c.persisted()
		case err := <-errC:
			c.inflight[0].fut, c.inflight[0].err = nil, err
			c.failed(err)
		case <-retryC:
			c.retry = nil
			c.stats.reportRetries.Add(1)
			c.publish(c.inflight[0])
		case <-refreshC:
			c.extendLeases()
		case <-heldC:
			c.releaseHeld()
		case <-queueC:
			c.queueArmed = false
			c.sendQueued(time.Now().Add(-c.ackWait()))
		case <-ctx.Done():
			return c.giveUp(in, context.Cause(ctx))
		}
	}
	return nil
}

func (c *completer) add(ev completerEvent) {
	if !ev.isReport {
		c.leases.add(ev.batch)
		c.unreported += ev.batch.jobs
		c.lastBatch = ev.batch
		if c.held != nil {
			// A later batch came: the held ack may go, with the shepherd's next pull, which it
			// sends once this batch's jobs leave slots free.
			b := c.held
			c.heldTimer.Stop()
			c.held = nil
			c.handOver(b)
		}
		return
	}
	size := len(ev.report.Data) + reportFieldsSize
	if ev.report.Proof != "" {
		size += len(ev.report.Proof) + proofFieldsSize // headers count against the server's max payload too
	}
	if len(c.pending) > 0 && c.pendingBytes+size > c.maxBytes {
		c.flush()
	}
	c.pending = append(c.pending, ev.report)
	c.pendingBatches = append(c.pendingBatches, ev.batch)
	if ev.span != nil {
		c.pendingSpans = append(c.pendingSpans, ev.span)
	}
	c.pendingBytes += size
	ev.batch.reported++
	if !ev.batch.settled {
		c.unreported--
	}
	// Group commit, at most one message per ReportLinger: with no report message on its way and
	// none sent for ReportLinger, send at once (a lone report is delayed only while others of its
	// batch have yet to report, siblingWait at most); otherwise gather reports until that much
	// time has passed since the last message. Under load this turns many small messages into few
	// large ones.
	if len(c.pending) >= c.cfg.MaxReportBatch {
		c.flush()
		return
	}
	c.noteRun(ev.report.Duration)
	siblings := ev.batch.reported < ev.batch.jobs
	switch {
	case c.unreported == 0 && len(c.inflight) == 0:
		c.flush() // no job left to report and none on its way: a worker gone idle holds nothing back
	case c.holding && !siblings:
		c.flush() // the last report of a batch came: what waited for it goes
	case c.pace.added(c.lingerTime(), len(c.inflight) > 0):
		// It would go at once; if jobs of its batch have not reported yet, they wait a little
		// for them (a batch of short jobs then takes one report message, not two).
		if siblings {
			c.pace.hold(min(c.lingerTime(), c.cfg.siblingWait))
			c.holding = true
			return
		}
		c.flush()
	}
}

// noteRun adds a handler's run time to the recent average (reports of jobs not run have none).
func (c *completer) noteRun(d time.Duration) {
	if d > 0 {
		c.avgRun += (d - c.avgRun) / 8
	}
}

// lingerTime is how long reports may gather before a message: ReportLinger, or by default a
// tenth of the recent average run time if longer, within maxAdaptiveLinger. A report delayed that
// long adds about a tenth to its job's time from release to outcome, and the coordinator sizes its
// prefetch window from that time, so its slots stay fed.
func (c *completer) lingerTime() time.Duration {
	if !c.cfg.adaptiveLinger {
		return c.cfg.ReportLinger
	}
	return min(max(c.cfg.ReportLinger, c.avgRun/10), maxAdaptiveLinger)
}

// flush publishes the pending reports as one message.
func (c *completer) flush() {
	c.holding = false
	if len(c.pending) == 0 {
		c.pace.disarm()
		return
	}
	c.pace.sending()
	c.seq++
	data := wire.AppendReports(make([]byte, 0, c.pendingBytes+64), c.cfg.ID, c.pending)
	msg := &nats.Msg{Subject: c.subject, Data: data}
	msg.Header = wire.SetReportProofs(msg.Header, c.pending)
	p := &publication{
		msg:     msg,
		id:      fmt.Sprintf("%s.%d", c.runID, c.seq),
		batches: c.pendingBatches,
		spans:   c.pendingSpans,
	}
	c.pendingSpans = nil
	clear(c.pending) // drop references to results: data holds a copy
	c.pending, c.pendingBatches, c.pendingBytes = c.pending[:0], nil, 0
	c.inflight = append(c.inflight, p)
	c.publish(p)
}

func (c *completer) publish(p *publication) {
	if p.msg.Header.Get(jetstream.MsgIDHeader) == "" {
		if p.msg.Header == nil {
			p.msg.Header = nats.Header{}
		}
		p.msg.Header.Set(jetstream.MsgIDHeader, p.id)
		p.msg.Header.Set(jetstream.ExpectedStreamHeader, c.cfg.names.EventsStream())
	}
	fut, err := c.pub.Publish(p.msg)
	if err != nil {
		p.fut, p.err = nil, err // a nil future, not a nil *Future in the interface
		return
	}
	p.fut, p.err = fut, nil
}

// persisted handles the acknowledgement of the head publication: every batch whose reports are
// now all persisted is acked.
func (c *completer) persisted() {
	p := c.inflight[0]
	c.inflight[0] = nil
	c.inflight = c.inflight[1:]
	c.backoff.reset()
	c.through()
	c.stats.reportBatches.Add(1)
	endOutcomes(p.spans)
	for _, b := range p.batches {
		b.persisted++
		switch {
		case b.lapsed(c.cfg.now(), c.cfg.Lease):
			// Redelivered: acking would end the lease of the worker that holds it now. Its
			// jobs not started here were dropped (see shepherd.next), so it never completes.
			c.forget(b)
		case b.persisted == b.jobs:
			c.ack(b)
		}
	}
	if c.unreported == 0 && len(c.inflight) == 0 && len(c.pending) > 0 {
		c.flush() // idle, and the last message is stored: what gathered meanwhile goes
	}
}

// ack acknowledges b, whose reports are all persisted (handOver), except that the ack of the
// latest batch this worker received is held until a later batch came (then handed over), or
// holdAck: WORK is a work queue, and acking the last message of its last file-store block makes
// the server replace the block (a new file, a tombstone, the old file removed). A pool that keeps
// up with single jobs would empty WORK, and pay for a replacement, after nearly every job.
// Handed over, the ack goes with the shepherd's next pull, not when the later batch arrives: the
// server and the worker are busy with that batch then. So held is never a batch older than lastBatch.
func (c *completer) ack(b *batch) {
	if b == c.lastBatch {
		c.releaseHeld() // older than b, which stays in WORK
		c.held = b
		if c.heldTimer == nil {
			c.heldTimer = time.NewTimer(holdAck)
		} else {
			c.heldTimer.Reset(holdAck) // stopped by releaseHeld, or fired and received
		}
		return
	}
	c.handOver(b)
}

// handOver acks b, whose reports are all persisted and which is not the latest batch: with the
// shepherd's next pull, if one comes within ackWait (see ackQueue), else alone.
func (c *completer) handOver(b *batch) {
	c.forget(b) // no more extensions: it is acked within ackWait, a quarter lease at most
	if over := c.acks.push(b.msg, time.Now()); over != nil {
		c.ackAlone(over)
	}
	if !c.queueArmed {
		if c.queueTimer == nil {
			c.queueTimer = time.NewTimer(c.ackWait())
		} else {
			c.queueTimer.Reset(c.ackWait()) // stopped, or fired and received
		}
		c.queueArmed = true
	}
}

// ackWait is how long a handed-over ack waits for a pull: holdAck, and at most a quarter lease,
// since its lease is no longer extended (leases are extended every third of one).
func (c *completer) ackWait() time.Duration { return min(holdAck, c.cfg.Lease/4) }

// sendQueued sends alone the queued acks handed over at or before t, and arms the queue timer
// for the next one due, if any is left.
func (c *completer) sendQueued(t time.Time) {
	due, next := c.acks.due(t)
	for _, m := range due {
		c.ackAlone(m)
	}
	if !next.IsZero() && !c.queueArmed {
		c.queueTimer.Reset(max(time.Until(next.Add(c.ackWait())), 0))
		c.queueArmed = true
	}
}

// ackAlone sends m's ack in a message of its own. Fire and forget: if the ack is lost, the batch
// is redelivered after its lease (and its jobs reported lapsed).
func (c *completer) ackAlone(m workMsg) {
	if err := m.Ack(); err != nil {
		c.log.Warn().Err(err).Msg("worker: ack work batch; it will run again after its lease")
	}
}

// releaseHeld acks the batch whose ack was held, if any.
func (c *completer) releaseHeld() {
	if b := c.held; b != nil {
		c.heldTimer.Stop()
		c.held = nil
		c.sendAck(b)
	}
}

func (c *completer) sendAck(b *batch) {
	c.ackAlone(b.msg)
	c.forget(b)
}

// forget stops keeping b leased.
func (c *completer) forget(b *batch) {
	c.leases.forget(b)
	c.settle(b)
}

// settle stops counting b's jobs that have not reported (a lapsed batch's jobs not started here
// never will) in unreported.
func (c *completer) settle(b *batch) {
	if !b.settled {
		b.settled = true
		c.unreported -= b.jobs - b.reported
	}
}

// failed schedules the head publication to be published again.
func (c *completer) failed(err error) {
	pause := c.backoff.next()
	c.retry = time.NewTimer(pause)
	c.log.Debug().Err(err).Stringer("backoff", pause).Str("msg_id", c.inflight[0].id).Msg("worker: publish reports failed")
	if !c.failing {
		c.failing = true
		c.outage.Begin("publish reports", err, time.Now())
	} else {
		c.outage.Again(err)
	}
}

// through ends a run of failed report publications: one was persisted (or the completer stops).
func (c *completer) through() {
	if c.failing {
		c.failing = false
		c.outage.End(time.Now())
	}
}

// extendLeases sends an extension (InProgress) for each batch whose lease is due for one (see
// leaseKeeper). A batch whose lease lapsed meanwhile (the process was stopped or cut off) is not
// extended: it is the server's to redeliver.
func (c *completer) extendLeases() {
	extend, lapsed := c.leases.due()
	for _, b := range lapsed {
		c.settle(b)
	}
	if len(lapsed) > 0 { // one line for the batches that lapsed together
		c.log.Warn().Stringer("lease", c.cfg.Lease).Int("batches", len(lapsed)).Msg("worker: work batches' leases lapsed (was the process stopped or cut off from the server?); their jobs not started are left to the worker they are redelivered to")
	}
	for _, e := range extend {
		if err := e.b.msg.InProgress(c.leases.replyTo(e.token)); err != nil {
			// Sent again at the next third of the lease: part of an outage, if any.
			c.log.Debug().Err(err).Msg("worker: extend work batch lease")
			c.outage.Once("extend work batch lease", err, time.Now())
		}
	}
}

// giveUp abandons the reports not persisted: their batches are not acked and run again after
// their lease. It consumes in until the shepherd closes it.
func (c *completer) giveUp(in <-chan completerEvent, cause error) error {
	lost, batches := len(c.pending), len(c.leases.live)
	for _, p := range c.inflight {
		lost += len(p.batches)
	}
	if in != nil {
		for ev := range in {
			if ev.isReport {
				lost++
			} else {
				batches++
			}
		}
	}
	c.log.Error().Err(cause).Int("reports", lost).Int("batches", batches).
		Msg("worker: stopped with reports not persisted; their batches run again after their lease")
	return fmt.Errorf("%w: %d reports of %d batches: %w", ErrReportsNotPersisted, lost, batches, cause)
}
