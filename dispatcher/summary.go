package dispatcher

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weavejobs/weave/internal/directget"
	"github.com/weavejobs/weave/internal/wire"
)

// WaitSummary needs no consumer of its own: it reads a finished group's summary with one direct
// get of the last message on the group's outcome subject, and learns of summaries written later
// from core NATS (the coordinator's publish reaches the subject's core subscribers as well as the
// stream). The coordinator publishes a group's outcomes to the reply token of the Dispatcher that
// opened it (wire.Names.OutcomeSubjectTo), so one subscription to that token, shared by the
// Dispatcher's waits, hears of its own groups and of no other producer's: what a producer
// receives does not grow with the number of producers. A Handle of a group another producer
// opened (Attach, Redrive) listens to that group's subjects instead, one subscription pair per
// group however many waits share it. A waiter is registered on the subscription before it looks
// for a stored summary, so a summary written in between reaches it one way or the other.

// directGetAPI is the direct get request subject prefix of the default JetStream API, which New
// uses.
const directGetAPI = "$JS.API.DIRECT.GET."

// Rechecks of the stored summary while waiting: a backstop for summaries the subscription missed
// (written while the connection was down, or not yet visible to the direct get, on a replica that
// lags, when the waiter was registered).
const (
	firstRecheck = 2 * time.Second
	maxRecheck   = 30 * time.Second
	// recheckSoon is the first recheck of a follower signalled of a message it could not read
	// yet; it doubles from there.
	recheckSoon = 10 * time.Millisecond
)

// outcomesPrefix is the message prefix (format version and kind) of an outcome batch.
var outcomesPrefix = wire.AppendOutcomes(nil, nil)[:2]

// recentGroups bounds Dispatcher.recent. A message reaches the subscription as the server
// stores it, sometimes a moment before a direct get can read it: a waiter registered in that
// moment would neither be told of it nor find it stored, and would wait for its first recheck
// (firstRecheck, 2s). So the subscription remembers what it last delivered of the latest groups:
// a WaitSummary registering takes its summary from there, and the other waits read again soon.
const recentGroups = 1024

// lastSeen is what the shared subscription last delivered of a group: when, and the latest
// summary, if one came, with its incarnation header.
type lastSeen struct {
	at          time.Time
	summary     *summaryNote
	incarnation string
}

// seen returns the group's entry in recent, adding it (and dropping the oldest beyond
// recentGroups) if it has none. d.sumMu is held.
func (d *Dispatcher) seen(gtok string) *lastSeen {
	e := d.recent[gtok]
	if e == nil {
		if len(d.recentOrder) >= recentGroups {
			if old := d.recent[d.recentOrder[0]]; old.at.After(d.recentDropped) {
				d.recentDropped = old.at
			}
			delete(d.recent, d.recentOrder[0])
			d.recentOrder = d.recentOrder[1:]
		}
		d.recentOrder = append(d.recentOrder, gtok)
		e = &lastSeen{}
		d.recent[gtok] = e
	}
	return e
}

// hurry reports whether a message of the group went by within firstRecheck: a waiter
// registering now may not find it stored yet, so it reads again soon (recheckSoon, doubling)
// rather than after firstRecheck. d.sumMu is held.
func (d *Dispatcher) hurry(gtok string) bool {
	e := d.recent[gtok]
	return e != nil && time.Since(e.at) < firstRecheck
}

// summaryWaiter is one WaitSummary call waiting on the shared subscription.
type summaryWaiter struct {
	openSeq uint64           // the Handle's incarnation; 0 accepts any
	ch      chan summaryNote // buffered: the first note is all the waiter reads
}

// summaryNote is what the shared subscription tells a waiter.
type summaryNote struct {
	sum    Summary
	err    error // a malformed message of the group
	closed bool  // Close ended the subscription: wait some other way
}

// Close stops the subscriptions the Dispatcher shares between its waits (Wait, Outcomes,
// WaitSummary, WaitJob and WaitKey; started by the first one) and its reads of the RESULTS
// stream. It does not close the NATS connection, and the Dispatcher remains usable: calls
// waiting at that moment, or made afterwards, read the stored outcomes on a growing interval
// (firstRecheck up to maxRecheck) instead of being told of new ones. Call Close when done with
// the Dispatcher; a Dispatcher that never waited has nothing to stop. Close may be called more
// than once.
func (d *Dispatcher) Close() {
	d.sumMu.Lock()
	defer d.sumMu.Unlock()
	d.sumClosed = true
	for _, sub := range []*nats.Subscription{d.sumSub, d.allSub} {
		if sub != nil {
			unsubscribe(d, sub)
		}
	}
	d.sumSub, d.allSub = nil, nil
	for _, gs := range d.groupSubs {
		gs.stop(d)
	}
	d.groupSubs, d.subscribedGroups = nil, 0
	for _, ws := range d.sumWaiters {
		for w := range ws {
			select {
			case w.ch <- summaryNote{closed: true}:
			default: // it has a note already
			}
		}
	}
	d.sumWaiters = nil
	d.closeJobWaiters()
	// Followers read once more and go on with rechecks alone (see follow).
	for _, sigs := range d.followers {
		for sig := range sigs {
			wake(sig)
		}
	}
	d.followers = nil
	d.results.Close()
	d.jobs.Close()
}

// wake signals a follower without blocking: one pending signal is all it needs, as it reads
// everything stored since its last read.
func wake(sig chan struct{}) {
	select {
	case sig <- struct{}{}:
	default:
	}
}

// watchGroup registers a follower of the group with token gtok (see follow), starting the shared
// subscription if needed; each message on the group's outcome subject then signals sig. It
// reports false, registering nothing, after Close; and whether a message of the group went by
// just now (see recentGroups), which the follower's first reads may miss.
func (d *Dispatcher) watchGroup(gtok string, own bool, sig chan struct{}) (registered, recent bool, err error) {
	d.sumMu.Lock()
	defer d.sumMu.Unlock()
	if ok, err := d.listen(gtok, own); !ok || err != nil {
		return false, false, err
	}
	recent = d.hurry(gtok)
	sigs := d.followers[gtok]
	if sigs == nil {
		sigs = map[chan struct{}]struct{}{}
		d.followers[gtok] = sigs
	}
	sigs[sig] = struct{}{}
	return true, recent, nil
}

// unwatchGroup removes a follower registered by watchGroup.
func (d *Dispatcher) unwatchGroup(gtok string, own bool, sig chan struct{}) {
	d.sumMu.Lock()
	defer d.sumMu.Unlock()
	d.unlisten(gtok, own)
	if sigs := d.followers[gtok]; sigs != nil {
		delete(sigs, sig)
		if len(sigs) == 0 {
			delete(d.followers, gtok)
		}
	}
}

// watchSummary registers a waiter for the summary of the group with token gtok, starting the
// shared subscription if needed. It returns nil after Close.
func (d *Dispatcher) watchSummary(gtok string, own bool, openSeq uint64) (*summaryWaiter, error) {
	d.sumMu.Lock()
	defer d.sumMu.Unlock()
	if ok, err := d.listen(gtok, own); !ok || err != nil {
		return nil, err
	}
	w := &summaryWaiter{openSeq: openSeq, ch: make(chan summaryNote, 1)}
	ws := d.sumWaiters[gtok]
	if ws == nil {
		ws = map[*summaryWaiter]struct{}{}
		d.sumWaiters[gtok] = ws
	}
	ws[w] = struct{}{}
	if e := d.recent[gtok]; e != nil && e.summary != nil && sameIncarnation(openSeq, e.incarnation) {
		w.ch <- *e.summary // it went by just before: the waiter need not find it stored
	}
	return w, nil
}

// subscribeOutcomes starts the shared subscription if needed and reports whether it runs: not
// after Close. d.sumMu is held.
func (d *Dispatcher) subscribeOutcomes() (bool, error) {
	switch {
	case d.sumClosed:
		return false, nil
	case d.sumSub != nil:
		return true, nil
	}
	sub, err := d.subscribe(d.names.ReplyOutcomes(d.reply))
	if err != nil {
		return false, err
	}
	d.sumSub = sub
	d.recent = map[string]*lastSeen{}
	d.sumWaiters = map[string]map[*summaryWaiter]struct{}{}
	d.jobWaiters = map[string]*groupJobWaiters{}
	d.followers = map[string]map[chan struct{}]struct{}{}
	d.groupSubs = map[string]*groupSub{}
	return true, nil
}

// subscribe subscribes routeOutcomes to subject.
func (d *Dispatcher) subscribe(subject string) (*nats.Subscription, error) {
	sub, err := d.nc.Subscribe(subject, d.routeOutcomes)
	if err != nil {
		return nil, fmt.Errorf("weave: subscribe to outcomes (%s): %w", subject, err)
	}
	// Messages of groups nobody waits for are dropped at once, so the backlog stays short;
	// dropping messages on a burst would leave waiters to their rechecks.
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("weave: subscribe to outcomes (%s): %w", subject, err)
	}
	return sub, nil
}

// maxGroupSubs bounds the groups another producer opened that a Dispatcher subscribes to one by
// one (listen). Past it (a producer restarted and attaching to its earlier groups, say) one
// subscription to every outcome of the namespace replaces them until those waits end: a
// subscription costs the client a goroutine and the server an entry in its subject index, and
// thousands of them cost more than hearing of every group for a while.
const maxGroupSubs = 256

// groupSub is a subscription to the outcomes of a group another producer opened, and the waits
// that use it. sub is nil while the subscription to every outcome (Dispatcher.allSub) covers it.
type groupSub struct {
	sub   *nats.Subscription
	users int
}

// listen starts the shared subscription if needed and, for a wait on a group this Dispatcher did
// not open (own false), a subscription to that group's outcomes (see maxGroupSubs), counting the
// waits on it. It reports false after Close. d.sumMu is held.
func (d *Dispatcher) listen(gtok string, own bool) (bool, error) {
	if ok, err := d.subscribeOutcomes(); !ok || err != nil || own {
		return ok, err
	}
	if gs := d.groupSubs[gtok]; gs != nil {
		gs.users++
		return true, nil
	}
	gs := &groupSub{users: 1}
	switch {
	case d.allSub != nil:
	case d.subscribedGroups < maxGroupSubs:
		sub, err := d.subscribe(d.names.GroupOutcomes(gtok))
		if err != nil {
			return false, err
		}
		gs.sub = sub
		d.subscribedGroups++
	default:
		sub, err := d.subscribe(d.names.ReplyOutcomes(d.reply))
		if err != nil {
			return false, err
		}
		d.allSub = sub
		for _, other := range d.groupSubs {
			other.stop(d)
		}
		d.subscribedGroups = 0
	}
	d.groupSubs[gtok] = gs
	return true, nil
}

// unlisten ends a wait registered by listen: a group's subscription stops with its last wait, the
// subscription to every outcome with the last wait on a group another producer opened. d.sumMu is
// held.
func (d *Dispatcher) unlisten(gtok string, own bool) {
	gs := d.groupSubs[gtok]
	if own || gs == nil {
		return
	}
	if gs.users--; gs.users > 0 {
		return
	}
	if gs.sub != nil {
		gs.stop(d)
		d.subscribedGroups--
	}
	delete(d.groupSubs, gtok)
	if len(d.groupSubs) == 0 && d.allSub != nil {
		unsubscribe(d, d.allSub)
		d.allSub = nil
	}
}

// stop ends the group's subscription.
func (gs *groupSub) stop(d *Dispatcher) {
	if gs.sub != nil {
		unsubscribe(d, gs.sub)
		gs.sub = nil
	}
}

// unsubscribe ends an outcome subscription; a connection closed meanwhile ended it already.
func unsubscribe(d *Dispatcher, sub *nats.Subscription) {
	if err := sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) && !errors.Is(err, nats.ErrBadSubscription) {
		d.log.Debug().Err(err).Str("subject", sub.Subject).Msg("stop an outcome subscription")
	}
}

// unwatchSummary removes a waiter registered by watchSummary.
func (d *Dispatcher) unwatchSummary(gtok string, own bool, w *summaryWaiter) {
	d.sumMu.Lock()
	defer d.sumMu.Unlock()
	d.unlisten(gtok, own)
	if ws := d.sumWaiters[gtok]; ws != nil {
		delete(ws, w)
		if len(ws) == 0 {
			delete(d.sumWaiters, gtok)
		}
	}
}

// routeOutcomes is the shared subscription's handler: it notes when it saw each group (see
// recentGroups), remembers and hands a summary (or a malformed message) to the WaitSummary
// waiters of its group and incarnation, and an outcome batch to the WaitJob waiters of the jobs
// in it (see routeJobs); a batch nobody waits for is not decoded.
func (d *Dispatcher) routeOutcomes(m *nats.Msg) {
	gtok, ok := d.names.ParseOutcomeSubject(m.Subject)
	if !ok {
		return
	}
	isBatch := bytes.HasPrefix(m.Data, outcomesPrefix)
	d.sumMu.Lock()
	jobWaiting := d.jobWaiters[gtok] != nil
	for sig := range d.followers[gtok] {
		wake(sig)
	}
	d.seen(gtok).at = time.Now() // a summary it holds stays: a later incarnation's batch does not replace it
	d.sumMu.Unlock()
	if !jobWaiting && isBatch {
		return
	}
	outs, sum, err := wire.DecodeOutcomeMsg(m.Data)
	if jobWaiting {
		d.routeJobs(gtok, m, outs, sum, err)
	}
	if isBatch {
		return
	}
	var note summaryNote
	switch {
	case err != nil:
		note.err = fmt.Errorf("%w: group token %q, subject %s: %w", ErrMalformedOutcome, gtok, m.Subject, err)
	case sum != nil:
		note.sum = summaryOf(sum)
	default:
		return // not reached: a message without the outcomes prefix is a summary or malformed
	}
	incarnation := m.Header.Get(wire.HdrGroupSeq)
	d.sumMu.Lock()
	defer d.sumMu.Unlock()
	// Remembered, then handed to the waiters registered now, under one lock: a waiter
	// registering at any moment gets it one way or the other.
	e := d.seen(gtok)
	e.summary, e.incarnation = &note, incarnation
	for w := range d.sumWaiters[gtok] {
		if !sameIncarnation(w.openSeq, incarnation) {
			continue
		}
		select {
		case w.ch <- note:
		default: // it has a note already
		}
	}
}

// sameIncarnation reports whether a message with the given Weave-Group-Seq header belongs to the
// incarnation openSeq of a Handle (0 accepts any; so does a message without the header).
func sameIncarnation(openSeq uint64, hdr string) bool {
	return openSeq == 0 || hdr == "" || hdr == strconv.FormatUint(openSeq, 10)
}

// waitSummary is WaitSummary on the shared subscription. It returns ok false, having done
// nothing more to wait, when the subscription is closed (Close); the caller then reads the
// stored outcomes on a growing interval.
func (h *Handle) waitSummary(ctx context.Context) (sum Summary, ok bool, err error) {
	if err := h.resolveIncarnation(ctx); err != nil {
		return Summary{}, false, err
	}
	w, err := h.d.watchSummary(h.gtok, h.own, h.openSeq)
	if err != nil || w == nil {
		return Summary{}, false, err
	}
	defer h.d.unwatchSummary(h.gtok, h.own, w)

	s, found, err := h.storedSummary(ctx)
	if err != nil || found {
		return s, true, err
	}
	var stored error
	n, noted, err := waitShared(ctx, h.d, w.ch, firstRecheck, func() bool {
		s, found, err := h.storedSummary(ctx)
		switch {
		case found || errors.Is(err, ErrMalformedOutcome) || errors.Is(err, nats.ErrConnectionClosed):
			sum, stored = s, err
			return true
		case err != nil && ctx.Err() == nil:
			h.d.log.Debug().Err(err).Str("group", h.group).Msg("recheck a group's summary")
		}
		return false
	})
	switch {
	case err != nil:
		return Summary{}, true, fmt.Errorf("weave: read outcomes of group %q: %w", h.group, err)
	case !noted:
		return sum, true, stored
	case n.closed:
		return Summary{}, false, nil
	}
	return n.sum, true, n.err
}

// waitShared waits for a waiter's note from the shared subscription (on ch). As the backstop for
// notes the subscription missed (written while the connection was down, or before the stream
// served them), it calls recheck after first (firstRecheck, or recheckSoon when a message of the
// group went by just before the waiter registered), then at doubling intervals up to
// maxRecheck, until recheck reports that it has the answer. It reports whether a note came, or
// returns ctx's error.
func waitShared[N any](ctx context.Context, d *Dispatcher, ch <-chan N, first time.Duration, recheck func() bool) (note N, noted bool, err error) {
	if hook := d.waitHook; hook != nil {
		hook()
	}
	interval := first
	timer := time.NewTimer(interval)
	defer timer.Stop()
	for {
		select {
		case n := <-ch:
			return n, true, nil
		case <-ctx.Done():
			return note, false, ctx.Err()
		case <-timer.C:
			if recheck() {
				return note, false, nil
			}
			interval = min(2*interval, maxRecheck)
			timer.Reset(interval)
		}
	}
}

// storedSummary reads the last message on the group's outcome subject with a direct get and
// returns the summary it holds, if it is one of the Handle's incarnation.
func (h *Handle) storedSummary(ctx context.Context) (Summary, bool, error) {
	stream := h.d.names.ResultsStream()
	req, err := json.Marshal(struct {
		LastBySubject string `json:"last_by_subj"`
	}{h.d.names.OutcomeSubject(h.gtok)})
	if err != nil {
		return Summary{}, false, err
	}
	m, err := h.d.directGet(ctx, directGetAPI+stream, req)
	if err != nil {
		return Summary{}, false, fmt.Errorf("weave: read the summary of group %q: %w", h.group, err)
	}
	if status := m.Header.Get("Status"); status != "" {
		if status == "404" {
			return Summary{}, false, nil // no outcome stored yet
		}
		return Summary{}, false, fmt.Errorf("weave: read the summary of group %q: direct get from %s: status %s %s", h.group, stream, status, m.Header.Get("Description"))
	}
	if !sameIncarnation(h.openSeq, m.Header.Get(wire.HdrGroupSeq)) {
		return Summary{}, false, nil // another incarnation's outcome
	}
	_, sum, err := wire.DecodeOutcomeMsg(m.Data)
	if err != nil {
		return Summary{}, false, fmt.Errorf("%w: group %q, %s sequence %s: %w", ErrMalformedOutcome, h.group, stream, m.Header.Get("Nats-Sequence"), err)
	}
	if sum == nil {
		return Summary{}, false, nil // the group is running
	}
	return summaryOf(sum), true, nil
}

// leaderSummary is storedSummary asked of the RESULTS stream's leader (the message get API),
// not of whichever replica answers a direct get: one that has not stored the summary yet says
// the group is running, although its summary already reached the outcomes' subscribers (Wait).
func (h *Handle) leaderSummary(ctx context.Context) (bool, error) {
	rctx, cancel := context.WithTimeout(ctx, h.d.cfg.RequestTimeout)
	defer cancel()
	m, err := directget.LastBySubject(rctx, h.d.nc, h.d.names.ResultsStream(), h.d.names.OutcomeSubject(h.gtok))
	switch {
	case errors.Is(err, directget.ErrNotFound):
		return false, nil // no outcome stored
	case err != nil:
		return false, fmt.Errorf("weave: read the summary of group %q: %w", h.group, err)
	case !sameIncarnation(h.openSeq, m.Header.Get(wire.HdrGroupSeq)):
		return false, nil // another incarnation's outcome
	}
	_, sum, err := wire.DecodeOutcomeMsg(m.Data)
	return err == nil && sum != nil, nil
}

// directGet sends a direct get request, each attempt bounded by RequestTimeout. A stream just
// created, or changing leaders in a cluster, may have no server answering direct gets for a
// while: it retries then, like publishControl, 50ms apart and within ctx.
func (d *Dispatcher) directGet(ctx context.Context, subject string, req []byte) (*nats.Msg, error) {
	for attempt := 0; ; attempt++ {
		rctx, cancel := context.WithTimeout(ctx, d.cfg.RequestTimeout)
		m, err := d.nc.RequestWithContext(rctx, subject, req)
		cancel()
		if !errors.Is(err, nats.ErrNoResponders) || attempt >= noLeaderRetries {
			return m, err
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}
