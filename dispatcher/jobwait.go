package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weavejobs/weave/internal/wire"
)

// WaitJob and WaitKey need no consumer either. A waiter is registered on the Dispatcher's shared
// outcome subscription (the one WaitSummary uses) under its job's ID or key, then reads the
// outcomes already stored on the group's subject with batch direct gets. An outcome batch written
// after the registration reaches the waiter through the subscription: the batch is decoded once,
// whatever the number of waiters, and each of its jobs is looked up in the group's waiters by ID
// and by key. So ten thousand WaitJob calls on one group cost one subscription and one decode per
// outcome message, not ten thousand consumers each reading every outcome of the group.
//
// The group's summary, written after all its outcomes, tells a waiter the group has finished; it
// then reads the stored outcomes once more from where it stopped before concluding that the job is
// not in the group (the subscription may deliver a message before the stream serves it, or miss
// one while the connection is down). Rechecks on a growing interval are the backstop for notes the
// subscription missed.

// groupJobWaiters are the WaitJob and WaitKey calls waiting on one group token.
type groupJobWaiters struct {
	all   map[*jobWaiter]struct{}
	byID  map[uint64]map[*jobWaiter]struct{}
	byKey map[string]map[*jobWaiter]struct{}
}

// jobWaiter is one WaitJob or WaitKey call waiting on the shared subscription.
type jobWaiter struct {
	group   string // the group ID, for the outcome returned
	openSeq uint64 // the Handle's incarnation; 0 accepts any
	id      uint64 // the job awaited: by ID, or
	key     string // by key
	ch      chan jobNote
	bad     error // the first malformed message of the group the subscription saw; guarded by sumMu
}

// jobNote is what the shared subscription tells a job waiter. The first note is all it reads.
type jobNote struct {
	out      JobOutcome
	found    bool
	finished bool // the group's summary arrived
	closed   bool // Close ended the subscription: wait some other way
}

func (w *jobWaiter) matches(o *wire.Outcome) bool {
	if w.key != "" {
		return o.Key == w.key
	}
	return o.ID == w.id
}

func (w *jobWaiter) note(n jobNote) {
	select {
	case w.ch <- n:
	default: // it has a note already
	}
}

// watchJob registers a waiter for one job of the group with token gtok, starting the shared
// subscription if needed. It reports false, registering nothing, after Close.
func (d *Dispatcher) watchJob(gtok string, own bool, w *jobWaiter, since outcomeMark) (registered, hurry, quiet bool, err error) {
	d.sumMu.Lock()
	defer d.sumMu.Unlock()
	if ok, err := d.listen(gtok, own); !ok || err != nil {
		return false, false, false, err
	}
	gw := d.jobWaiters[gtok]
	if gw == nil {
		gw = &groupJobWaiters{all: map[*jobWaiter]struct{}{}, byID: map[uint64]map[*jobWaiter]struct{}{}, byKey: map[string]map[*jobWaiter]struct{}{}}
		d.jobWaiters[gtok] = gw
	}
	gw.all[w] = struct{}{}
	if w.key != "" {
		addWaiter(gw.byKey, w.key, w)
	} else {
		addWaiter(gw.byID, w.id, w)
	}
	return true, d.hurry(gtok), d.quietSince(gtok, since), nil
}

// unwatchJob removes a waiter registered by watchJob.
func (d *Dispatcher) unwatchJob(gtok string, own bool, w *jobWaiter) {
	d.sumMu.Lock()
	defer d.sumMu.Unlock()
	d.unlisten(gtok, own)
	gw := d.jobWaiters[gtok]
	if gw == nil {
		return
	}
	delete(gw.all, w)
	if w.key != "" {
		removeWaiter(gw.byKey, w.key, w)
	} else {
		removeWaiter(gw.byID, w.id, w)
	}
	if len(gw.all) == 0 {
		delete(d.jobWaiters, gtok)
	}
}

func addWaiter[K comparable](m map[K]map[*jobWaiter]struct{}, k K, w *jobWaiter) {
	ws := m[k]
	if ws == nil {
		ws = map[*jobWaiter]struct{}{}
		m[k] = ws
	}
	ws[w] = struct{}{}
}

func removeWaiter[K comparable](m map[K]map[*jobWaiter]struct{}, k K, w *jobWaiter) {
	if ws := m[k]; ws != nil {
		delete(ws, w)
		if len(ws) == 0 {
			delete(m, k)
		}
	}
}

// routeJobs hands one decoded message of the group with token gtok to its job waiters: each
// outcome to the waiters of its job, then a summary to all of them, and a decoding error to all
// of them as a note on the side (a waiter keeps waiting, since its job may come later).
func (d *Dispatcher) routeJobs(gtok string, m *nats.Msg, outs []wire.Outcome, sum *wire.GroupSummary, err error) {
	incarnation := m.Header.Get(wire.HdrGroupSeq)
	d.sumMu.Lock()
	defer d.sumMu.Unlock()
	gw := d.jobWaiters[gtok]
	if gw == nil {
		return
	}
	if err != nil {
		for w := range gw.all {
			if w.bad == nil && sameIncarnation(w.openSeq, incarnation) {
				w.bad = fmt.Errorf("%w: group %q, subject %s: %w", ErrMalformedOutcome, w.group, m.Subject, err)
			}
		}
		return
	}
	for i := range outs {
		o := &outs[i]
		for _, ws := range []map[*jobWaiter]struct{}{gw.byID[o.ID], gw.byKey[o.Key]} {
			for w := range ws {
				if w.matches(o) && sameIncarnation(w.openSeq, incarnation) {
					w.note(jobNote{out: jobOutcome(w.group, o), found: true})
				}
			}
		}
	}
	if sum != nil { // after the outcomes it came with: a waiter keeps the first note
		for w := range gw.all {
			if sameIncarnation(w.openSeq, incarnation) {
				w.note(jobNote{finished: true})
			}
		}
	}
}

// closeJobWaiters tells every job waiter that Close ended the subscription. d.sumMu is held.
func (d *Dispatcher) closeJobWaiters() {
	for _, gw := range d.jobWaiters {
		for w := range gw.all {
			w.note(jobNote{closed: true})
		}
	}
	d.jobWaiters = nil
}

// jobScan reads a group's stored outcomes for one job waiter, from where the last read stopped.
type jobScan struct {
	h    *Handle
	w    *jobWaiter
	from uint64 // next RESULTS sequence to read
	bad  error  // the first message that could not be decoded
}

// next reads the outcomes stored since the last call. It reports the job's outcome if found, or
// finished if the group's summary was among them.
func (s *jobScan) next(ctx context.Context) (out JobOutcome, found, finished bool, err error) {
	keep := func(groupSeq string) bool { return sameIncarnation(s.h.openSeq, groupSeq) }
	subject := s.h.d.names.OutcomeSubject(s.h.gtok)
	for m, err := range s.h.d.scanOutcomes(ctx, subject, s.from, math.MaxUint64, keep) {
		if err != nil {
			if errors.Is(err, ErrMalformedOutcome) {
				if s.bad == nil {
					s.bad = err
				}
				continue
			}
			return JobOutcome{}, false, false, fmt.Errorf("weave: read outcomes of group %q: %w", s.h.group, err)
		}
		s.from = m.seq + 1
		for i := range m.outs {
			if s.w.matches(&m.outs[i]) {
				return jobOutcome(s.h.group, &m.outs[i]), true, false, nil
			}
		}
		if m.sum != nil {
			return JobOutcome{}, false, true, nil
		}
	}
	return JobOutcome{}, false, false, nil
}

// waitJob is WaitJob and WaitKey on the shared subscription. It returns ok false, having done
// nothing more to wait, when the subscription is closed (Close); the caller then reads the
// stored outcomes on a growing interval.
func (h *Handle) waitJob(ctx context.Context, what string, w *jobWaiter) (out JobOutcome, ok bool, err error) {
	registered, hurry, quiet, err := h.d.watchJob(h.gtok, h.own, w, h.submitted)
	if err != nil || !registered {
		return JobOutcome{}, registered, err
	}
	defer h.d.unwatchJob(h.gtok, h.own, w)

	scan := &jobScan{h: h, w: w, from: 1}
	// conclude answers once the job is found or the group has finished without it.
	conclude := func(out JobOutcome, found, finished bool, err error) (JobOutcome, bool, error) {
		switch {
		case err != nil:
			return JobOutcome{}, true, err
		case found:
			return out, true, nil
		}
		bad := scan.bad
		if bad == nil {
			h.d.sumMu.Lock()
			bad = w.bad
			h.d.sumMu.Unlock()
		}
		if bad != nil {
			// The job may have been in the message we could not read: not found is not certain.
			return JobOutcome{}, true, fmt.Errorf("weave: %s not among the readable outcomes of group %q: %w", what, h.group, bad)
		}
		return JobOutcome{}, true, fmt.Errorf("%w: %s in group %q, which has finished", ErrJobNotFound, what, h.group)
	}
	// What is stored already, unless nothing of the group can be: a job Submit stored while
	// the subscription listened, and nothing of its group delivered since (see outcomeMark).
	// That saves a read per single job, a tenth of its messages.
	if !quiet {
		if out, found, finished, err := scan.next(ctx); err != nil || found || finished {
			return conclude(out, found, finished, err)
		}
	}
	var (
		found, finished bool
		scanErr         error
	)
	first := firstRecheck
	if hurry {
		first = recheckSoon // an outcome of the group went by just before: it may not be stored yet
	}
	n, noted, err := waitShared(ctx, h.d, w.ch, first, func() bool {
		out, found, finished, scanErr = scan.next(ctx)
		switch {
		case found || finished || errors.Is(scanErr, nats.ErrConnectionClosed):
			return true
		case scanErr != nil && ctx.Err() == nil:
			h.d.log.Debug().Err(scanErr).Str("group", h.group).Msg("recheck a group's outcomes")
		}
		return false
	})
	switch {
	case err != nil:
		return JobOutcome{}, true, fmt.Errorf("weave: read outcomes of group %q: %w", h.group, err)
	case !noted:
		return conclude(out, found, finished, scanErr)
	case n.closed:
		return JobOutcome{}, false, nil
	case n.found:
		return n.out, true, nil
	}
	// The summary came: every outcome was written before it. Read what is stored since the last
	// read; the stream may serve the summary a moment after the subscription delivered it, so
	// read again until it is seen (for at most firstRecheck).
	deadline := time.Now().Add(firstRecheck)
	for {
		out, found, finished, err := scan.next(ctx)
		if err != nil || found || finished || time.Now().After(deadline) {
			return conclude(out, found, finished, err)
		}
		t := time.NewTimer(10 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return JobOutcome{}, true, fmt.Errorf("weave: read outcomes of group %q: %w", h.group, ctx.Err())
		case <-t.C:
		}
	}
}

// outcomeMark is the shared outcome subscription's state at a moment: when, and how many times
// the connection had reconnected. Submit takes one just before it stores a job, if the
// subscription is live. The job's outcome is published after the job is stored, so if the
// subscription listened all along (no reconnect: messages published while disconnected are
// lost to it; it drops none, having no pending limits), it delivers every message of the group
// from then on; and if none is in recent since the mark (nor was dropped from it), none has
// come, and a WaitJob registering now needs to read nothing stored: the subscription will hand
// it the outcome. A zero mark is never quiet.
type outcomeMark struct {
	at         time.Time
	reconnects uint64
}

// outcomeMark returns the mark of now, or the zero mark if the subscription is not live.
func (d *Dispatcher) outcomeMark() outcomeMark {
	d.sumMu.Lock()
	live := d.sumSub != nil && !d.sumClosed
	d.sumMu.Unlock()
	if !live {
		return outcomeMark{}
	}
	return outcomeMark{at: time.Now(), reconnects: d.nc.Stats().Reconnects}
}

// quietSince reports whether the subscription, live at mark, has delivered nothing of the
// group since (see outcomeMark). d.sumMu is held.
func (d *Dispatcher) quietSince(gtok string, mark outcomeMark) bool {
	if mark.at.IsZero() || d.nc.Stats().Reconnects != mark.reconnects || !d.recentDropped.Before(mark.at) {
		return false
	}
	e := d.recent[gtok]
	return e == nil || e.at.Before(mark.at)
}
