package worker

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// The worker's timing decisions, each in a small unit that owns its timer and reads the clock
// through time.Now, so it is tested exactly with testing/synctest (timing_test.go) and used
// unchanged by the goroutines below. Each unit belongs to the one goroutine named in its
// comment; none is safe for concurrent use, except where a method says so.

// backoff is a pause that doubles after each failure, from lo up to hi, and starts again from lo
// after a success. The shepherd backs off pulls with one, the completer report publishes.
type backoff struct {
	lo, hi time.Duration
	cur    time.Duration // the last pause; 0 after a success
}

// next returns the pause before the next try after one more failure.
func (b *backoff) next() time.Duration {
	b.cur = min(max(2*b.cur, b.lo), b.hi)
	return b.cur
}

// reset starts again from lo: the last try succeeded.
func (b *backoff) reset() { b.cur = 0 }

// pacer paces report messages (Config.ReportLinger): a report goes at once when no report
// message is on its way and none was sent within the linger; otherwise reports gather and go
// together when the linger since the last message has passed. Owned by the completer.
type pacer struct {
	timer *time.Timer
	armed bool      // timer runs; its tick means "send what gathered"
	last  time.Time // when the last message was sent
}

func newPacer() *pacer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &pacer{timer: t}
}

// added decides for a report just added: send now (true), or wait for C. linger is the pause
// in force; inflight tells whether a report message is on its way.
func (p *pacer) added(linger time.Duration, inflight bool) (sendNow bool) {
	wait := linger - time.Since(p.last)
	if !inflight && wait <= 0 {
		return true
	}
	if !p.armed {
		p.timer.Reset(max(wait, 0))
		p.armed = true
	}
	return false
}

// hold arms the timer for d unless it is armed: reports that could go now wait that long.
func (p *pacer) hold(d time.Duration) {
	if !p.armed {
		p.timer.Reset(d)
		p.armed = true
	}
}

// C ticks when the reports that gathered are due; nil when none wait.
func (p *pacer) C() <-chan time.Time {
	if p.armed {
		return p.timer.C
	}
	return nil
}

// sending is called before every send, whatever caused it (C, a full message, the drain): the
// linger starts again from now.
func (p *pacer) sending() {
	p.disarm()
	p.last = time.Now()
}

// disarm stops the timer: nothing waits any more (the tick was received, or the reports went).
func (p *pacer) disarm() {
	if p.armed {
		p.timer.Stop()
		p.armed = false
	}
}

// leaseKeeper keeps the leases of the work batches this worker holds: every Lease/6 it picks
// the batches whose lease was last extended (or which arrived) at least Lease/4 ago, so each
// lease is extended every second tick, every Lease/3, with half a lease to spare for a late
// tick; and it gives up the batches whose lease lapsed meanwhile (the process was stopped, or
// cut off from the server, for longer than the lease), which are the server's to redeliver.
//
// An extension counts only once the server confirms it (batch.confirm): each is sent as a
// request whose answer comes to the keeper's inbox, <inbox>.<token>. A worker whose extensions
// go unanswered for a whole lease (its connection is down, the server is unreachable) cannot
// know that the server kept its batch, so it lets the batch go rather than start its jobs.
// Owned by the completer, except answer, which the inbox's subscription calls.
type leaseKeeper struct {
	lease time.Duration
	now   func() time.Time // cfg.now: time.Now, or a test's clock
	live  map[*batch]struct{}
	held  *atomic.Int64 // set to len(live) for heartbeats (Stats.Held), if set
	tick  *time.Ticker  // runs while live is not empty
	token uint64        // the last extension's

	inbox string             // where the server's answers come, with a token appended
	sub   *nats.Subscription // on inbox.*, once listening
	mu    sync.Mutex         // guards asked
	asked map[uint64]asked   // extensions sent within the last lease, by token
}

// asked is an extension sent: its batch and when.
type asked struct {
	b  *batch
	at time.Time
}

// extension is an extension due: the batch and the token its answer will carry.
type extension struct {
	b     *batch
	token uint64
}

func newLeaseKeeper(lease time.Duration, now func() time.Time) *leaseKeeper {
	return &leaseKeeper{lease: lease, now: now, live: make(map[*batch]struct{}), asked: make(map[uint64]asked)}
}

// listen subscribes to the answers to extensions on a new inbox of nc.
func (k *leaseKeeper) listen(nc *nats.Conn) error {
	k.inbox = nc.NewInbox()
	sub, err := nc.Subscribe(k.inbox+".*", func(m *nats.Msg) {
		// The server's answer is an empty message. A status (503: no consumer took the
		// extension) is no confirmation.
		if m.Header.Get("Status") != "" {
			return
		}
		if token, err := strconv.ParseUint(m.Subject[len(k.inbox)+1:], 36, 64); err == nil {
			k.answer(token)
		}
	})
	if err != nil {
		return err
	}
	k.sub = sub
	return nil
}

// close ends the subscription listen made.
func (k *leaseKeeper) close() {
	if k.sub != nil {
		_ = k.sub.Unsubscribe()
	}
}

// replyTo is the subject the answer to the extension with token goes to.
func (k *leaseKeeper) replyTo(token uint64) string {
	return k.inbox + "." + strconv.FormatUint(token, 36)
}

// answer takes the server's confirmation of the extension with token. Safe for concurrent use.
func (k *leaseKeeper) answer(token uint64) {
	k.mu.Lock()
	a, ok := k.asked[token]
	delete(k.asked, token)
	k.mu.Unlock()
	if ok {
		a.b.confirm(a.at, k.now(), k.lease)
	}
}

// add starts keeping b's lease (b.leaseFrom is its receipt).
func (k *leaseKeeper) add(b *batch) {
	k.live[b] = struct{}{}
	k.count()
	if k.tick == nil {
		k.tick = time.NewTicker(k.lease / 6)
	}
}

// forget stops keeping b's lease: it was acked, or its lease lapsed. An answer still to come
// for it changes nothing that matters; due drops its record within a lease.
func (k *leaseKeeper) forget(b *batch) {
	delete(k.live, b)
	k.count()
	if len(k.live) == 0 {
		k.stop()
	}
}

// count publishes how many batches are kept.
func (k *leaseKeeper) count() {
	if k.held != nil {
		k.held.Store(int64(len(k.live)))
	}
}

// C ticks every Lease/6 while a batch is kept; nil otherwise.
func (k *leaseKeeper) C() <-chan time.Time {
	if k.tick == nil {
		return nil
	}
	return k.tick.C
}

// due is called on each tick. It records an extension of every batch that needs one and returns
// them (the caller sends each, answered to replyTo(token)), and returns the batches whose lease
// lapsed, which it forgets. It drops the records of extensions sent a lease ago or more: an
// answer to one of those could not count.
func (k *leaseKeeper) due() (extend []extension, lapsed []*batch) {
	now := k.now()
	k.mu.Lock()
	defer k.mu.Unlock()
	for token, a := range k.asked {
		if now.Sub(a.at) >= k.lease {
			delete(k.asked, token)
		}
	}
	for b := range k.live {
		switch b.check(now, k.lease) {
		case leaseDue:
			k.token++
			k.asked[k.token] = asked{b: b, at: now}
			extend = append(extend, extension{b, k.token})
		case leaseLapsed:
			lapsed = append(lapsed, b)
		}
	}
	for _, b := range lapsed {
		k.forget(b)
	}
	return extend, lapsed
}

func (k *leaseKeeper) stop() {
	if k.tick != nil {
		k.tick.Stop()
		k.tick = nil
	}
}

// heartbeatLoop calls send at once, then every period, and at once on each signal from beat,
// until stop is closed. It is the heartbeat goroutine's whole schedule. send returns how many
// intervals may pass until the next heartbeat (1, or more while the worker is idle), which its
// heartbeat told the coordinator: the period is that many intervals, so an idle worker's
// goroutine wakes only to send. A signal does not move the period; a change of pace starts the
// new one from the heartbeat that set it.
func heartbeatLoop(interval time.Duration, beat, stop <-chan struct{}, send func() int) {
	every := send()
	t := time.NewTicker(time.Duration(every) * interval)
	defer t.Stop()
	for {
		n := every
		select {
		case <-t.C:
			n = send()
		case <-beat:
			n = send()
		case <-stop:
			return
		}
		if n != every {
			every = n
			t.Reset(time.Duration(every) * interval)
		}
	}
}

// pullWatch times the shepherd's checks of its open pulls (puller.overdue): every period, as a
// pull with server heartbeats needs (its silence must be noticed within two of them); but while
// only dormant pulls are open (no heartbeats: silence tells nothing), once, when the earliest is
// overdue. Owned by the shepherd.
type pullWatch struct {
	period time.Duration
	ticker *time.Ticker // runs while due is zero
	timer  *time.Timer  // armed for due, while only dormant pulls are open
	due    time.Time    // zero while the ticker runs
	armed  bool         // the timer has not fired for due yet
}

func newPullWatch(period time.Duration) *pullWatch {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &pullWatch{period: period, ticker: time.NewTicker(period), timer: t}
}

// watch says, before each wait, when the earliest dormant pull is overdue if only dormant pulls
// are open, else zero; now is the clock due is read against. It changes the timers only when
// that changes (a worker goes dormant or wakes), not for every pull.
func (w *pullWatch) watch(due, now time.Time) {
	switch {
	case due.IsZero() && !w.due.IsZero():
		w.timer.Stop()
		w.due, w.armed = time.Time{}, false
		w.ticker.Reset(w.period)
	case !due.IsZero() && (!due.Equal(w.due) || !w.armed):
		if w.due.IsZero() {
			w.ticker.Stop()
		}
		w.due, w.armed = due, true
		// A millisecond past due: the check finds a pull overdue only strictly after it.
		w.timer.Reset(due.Sub(now) + time.Millisecond)
	}
}

// C ticks when a check is due.
func (w *pullWatch) C() <-chan time.Time {
	switch {
	case w.due.IsZero():
		return w.ticker.C
	case w.armed:
		return w.timer.C
	}
	return nil
}

// fired is called after C ticked.
func (w *pullWatch) fired() { w.armed = false }

func (w *pullWatch) stop() {
	w.ticker.Stop()
	w.timer.Stop()
}

// drainSchedule holds the drain's two deadlines: DrainTimeout after the drain began, the running
// handlers' contexts are canceled (force); TimeoutGrace after that, the attempts still running
// are reported without their handlers (abandon). Owned by the shepherd.
type drainSchedule struct {
	drainTimeout, grace time.Duration
	timer               *time.Timer
	next                drainStep // what the timer's tick means
}

type drainStep uint8

const (
	drainIdle    drainStep = iota // not draining, or both deadlines passed
	drainForce                    // the tick cancels the handlers' contexts
	drainAbandon                  // the tick reports the attempts still running
)

// begin starts the schedule when the drain begins.
func (d *drainSchedule) begin() {
	d.timer = time.NewTimer(d.drainTimeout)
	d.next = drainForce
}

// C ticks at the next deadline; nil when none is ahead.
func (d *drainSchedule) C() <-chan time.Time {
	if d.next == drainIdle {
		return nil
	}
	return d.timer.C
}

// fired is called on a tick of C and returns what is due now, arming the next deadline.
func (d *drainSchedule) fired() drainStep {
	step := d.next
	switch step {
	case drainForce:
		d.timer.Reset(d.grace)
		d.next = drainAbandon
	case drainAbandon:
		d.next = drainIdle
	}
	return step
}

func (d *drainSchedule) stop() {
	if d.timer != nil {
		d.timer.Stop()
	}
	d.next = drainIdle
}
