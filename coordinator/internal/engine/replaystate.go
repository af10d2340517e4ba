package engine

import (
	"cmp"
	"container/heap"
	"slices"
	"strings"
	"time"

	"github.com/weavejobs/weave/internal/jobindex"
	"github.com/weavejobs/weave/internal/journal"
	"github.com/weavejobs/weave/internal/wire"
)

// Replay rebuilds the state from the streams. The JOBS feed gives the groups and their jobs
// (through feed); the EVENTS stream gives the reports and the retry decisions (through report and
// journalRecord); the RESULTS stream gives the outcomes already written (outcomeReplay); the WORK
// stream gives the batches released and not yet acknowledged (endReplay's alive).
//
// No release is journaled: a worker acknowledges a batch only after the report covering it is
// stored, so every job ever released is still in WORK or has a report in EVENTS.

// AliveJob is a job found in a WORK batch: released, not yet acknowledged.
type AliveJob struct {
	Attempt uint32
	Pool    string
	Rel     uint64 // the release, from the batch's proof (0 for a batch without one)
}

// replayState is the engine's part that holds what replay collects before the state is rebuilt
// (see endReplay); dropped when replay ends. Owned by the loop.
type replayState struct {
	reports map[uint64]reportAt      // latest report per job
	retries map[uint64]journal.Entry // latest retry decision per job
	history map[uint64][]wire.Attempt
	cancels []replayCancel // cancels read, applied once the state is rebuilt
	// lateCancels are cancels stored lately and refused as they were read: answered at the end.
	lateCancels []replayCancel
	// alive are the jobs whose batches are in WORK, scanned before EVENTS is read: a report
	// about the attempt of such a batch is proven by it (see replayReport).
	alive map[uint64]AliveJob
	// unproven are the reports read that do not prove their release (see unproven), in EVENTS
	// order: judged by the live path once the state is rebuilt, except those refusedLive.
	unproven    []reportAt
	refusedLive map[refusedReport]bool // reports refused and journaled before the restart
	// refusedOpens are the JOBS sequences of opens a coordinator refused (journal.KindRefusedOpen):
	// deferred ones among them are refused again, as they were live.
	refusedOpens map[uint64]bool
	// deferred are the incarnations opened after a sealed one not known to be complete, in
	// arrival order, decided by endReplay (see deferredOpen); deferredOf finds one by its open
	// sequence.
	deferred   []*deferredOpen
	deferredOf map[uint64]*deferredOpen
	// summarized holds, by open sequence, for the incarnations whose summary is stored, the JOBS
	// sequence of their last message when they completed, if the summary says it: a cancel after
	// it came too late.
	summarized map[uint64]uint64
	// heldOpens are opens with edges stored lately, whose producer may still wait for the
	// answer (Publish waits RequestTimeout): answered once replay has bound them.
	heldOpens []heldOpen
}

// heldOpen is an open with edges read during replay, to answer at its end.
type heldOpen struct {
	seq uint64
	c   wire.GroupControl
}

// deferredOpen is an incarnation (opened at seq) whose open (or single job) replay read while
// its group ID's previous incarnation (opened at prev) was sealed and not known to be complete,
// or while a redrive of the ID asked before it was not followed by its own open (redrives): live,
// such an open is accepted only once prev is complete, and refused while a redrive is starting;
// replay learns that from the reports and outcomes, read after JOBS. Meanwhile it is tracked like
// any incarnation (one a coordinator accepted may have run jobs), and endReplay decides it
// (decideDeferred).
type deferredOpen struct {
	seq, prev uint64
	redrives  []uint64      // the redrive requests of its ID read before it without their open, in stream order
	msgs      []deferredMsg // the JOBS messages applied to it, its open first: refused with it
	decided   bool
	refused   bool
}

// deferredMsg is a JOBS message applied to a deferred incarnation: an open (on the job subject:
// a single job), a seal or a keep-alive, or (c nil) a job message.
type deferredMsg struct {
	subject string
	seq     uint64
	c       *wire.GroupControl
}

// deferOpen defers, during replay, the decision on the incarnation opened at seq by c (see
// deferredOpen), prev being the one before it if it is not known to be complete (0 if none).
func (e *Engine) deferOpen(seq, prev uint64, subject string, c wire.GroupControl) {
	var reqs []uint64
	if c.Redrive == 0 {
		reqs = e.rd.pendingRedrives(c.Group)
	}
	if prev == 0 && len(reqs) == 0 {
		return // a new group ID, or a redrive's own open after a complete incarnation: nothing to decide
	}
	rs := e.replay
	h := &deferredOpen{seq: seq, prev: prev, redrives: reqs, msgs: []deferredMsg{{subject: subject, seq: seq, c: &c}}}
	if rs.deferredOf == nil {
		rs.deferredOf = map[uint64]*deferredOpen{}
	}
	rs.deferredOf[seq] = h
	rs.deferred = append(rs.deferred, h)
}

// noteDeferred records, during replay, a JOBS message applied to the incarnation opened at inc
// if it is deferred.
func (e *Engine) noteDeferred(inc uint64, subject string, seq uint64, c *wire.GroupControl) {
	if !e.Replaying() {
		return
	}
	// A single job's message is its open and its job: recorded once.
	if h := e.replay.deferredOf[inc]; h != nil && h.msgs[len(h.msgs)-1].seq != seq {
		h.msgs = append(h.msgs, deferredMsg{subject: subject, seq: seq, c: c})
	}
}

// effective returns the incarnation that messages applied to the one opened at seq would have
// gone to live: seq, or, if its open was refused, the incarnation before it (0 if none).
func (rs *replayState) effective(seq uint64) uint64 {
	for h := rs.deferredOf[seq]; h != nil && h.refused; h = rs.deferredOf[seq] {
		seq = h.prev
	}
	return seq
}

// decideDeferred decides a deferred incarnation as the live coordinator did, or would have: it is
// kept if a coordinator accepted it (one of its jobs was released or has an outcome stored, or it
// is complete), else refused while a redrive was starting (redrivenBefore), else kept if the
// incarnation before it is complete; a refused open is refused with every message that joined
// it, for the reasons the live coordinator gives, and forgotten. Called once the reports are
// decided, with the cancels in stream order (a cancel may complete the one before it); after
// replay, so refusals are recorded, counted and their messages deleted.
func (e *Engine) decideDeferred(rs *replayState, h *deferredOpen) {
	if h.decided {
		return
	}
	h.decided = true
	if ph := rs.deferredOf[h.prev]; ph != nil {
		e.decideDeferred(rs, ph)
	}
	// Records are found again after anything that may forget one (which moves records).
	r := e.groups.table.get(h.seq)
	prev, ok := e.prevOf(rs, h)
	if r == nil || !ok {
		return // not expected: no incarnation is forgotten before replay ends but by this
	}
	if prev != nil {
		e.completeIfDone(prev)
	}
	if c := e.recCounts(r); e.complete(r) || c.Pending+c.Delayed < c.Total() {
		return // a coordinator accepted it: one of its jobs was released or has ended
	}
	why := ""
	if req := e.redrivenBefore(h, r.id, prev); req != 0 {
		why = BeingRedriven(r.id, req)
	} else if (prev == nil || e.complete(prev)) && !rs.refusedOpens[h.seq] {
		return // kept, unless a coordinator refused it, and crashed before deleting it
	}
	e.refuseDeferred(rs, h, prev, why)
}

// redrivenBefore returns the redrive request that was starting, live, when the deferred
// incarnation h of group ID id was opened, prev being the incarnation before it (nil if none),
// or 0. Of the requests read before h's open without their own open (h.redrives), one whose open
// follows was accepted, and before h's open was read (accepted after, it would have found h
// complete, which a coordinator accepted, or refused h for the incarnation before). One without
// its open was never answered; if it is to be accepted once h is not counted, the live
// coordinator may have accepted it before it read h's open, or not: nothing stored says which,
// so the open is refused, lest replay accept an open the live coordinator refused.
func (e *Engine) redrivenBefore(h *deferredOpen, id string, prev *groupRec) uint64 {
	for _, req := range h.redrives {
		if e.rd.redriveOpened(req) {
			return req
		}
	}
	if len(h.redrives) > 0 {
		if refusal, wait := e.judgeRedrive(id, prev, h.seq); refusal == nil && !wait {
			return h.redrives[0]
		}
	}
	return 0
}

// refuseRedriven is told, during replay, that the open of the redrive asked at req of group ID
// id is read. If the latest incarnation is a producer's open read after that request and not
// sealed, the live coordinator refused it while the redrive was starting (accepted, it would be
// complete before the redrive was accepted): it is refused now, so that the redrive's open does
// not resume it.
func (e *Engine) refuseRedriven(id string, req uint64) {
	rs := e.replay
	r := e.groups.table.latest(id)
	if r == nil || e.sealed(r) {
		return
	}
	h := rs.deferredOf[r.openSeq]
	if h == nil || h.decided || !slices.Contains(h.redrives, req) {
		return
	}
	h.decided = true
	if prev, ok := e.prevOf(rs, h); ok {
		e.refuseDeferred(rs, h, prev, BeingRedriven(id, req))
	}
}

// prevOf returns the record of the incarnation before the deferred one h as live saw it (nil if
// none: h opened its group ID, or the ones before it were refused), and false if that one is not
// tracked, which is not expected.
func (e *Engine) prevOf(rs *replayState, h *deferredOpen) (*groupRec, bool) {
	seq := rs.effective(h.prev)
	if seq == 0 {
		return nil, true
	}
	prev := e.groups.table.get(seq)
	return prev, prev != nil
}

// refuseDeferred refuses the deferred incarnation h, prev being the incarnation before it (nil
// if none), with every message that joined it: its opens for reason why (if not empty, else the
// live reason for an open of a running group), the others as live for prev. It is then forgotten.
func (e *Engine) refuseDeferred(rs *replayState, h *deferredOpen, prev *groupRec, why string) {
	r := e.groups.table.get(h.seq)
	h.refused = true
	g, c := e.liveOf(r), e.recCounts(r)
	id, alone := r.id, r.flags&recSingle != 0
	for _, m := range h.msgs {
		switch {
		case m.c == nil:
			e.Reject(m.subject, m.seq, e.joinRefusal(m.subject, id, prev))
		case m.c.Op == wire.OpSeal:
			e.applySeal(m.subject, m.seq, *m.c, prev)
		case m.c.Op == wire.OpKeepAlive:
			e.applyKeepAlive(m.subject, m.seq, *m.c, prev)
		// The open (or single job): journaled as refused, so that a later replay finding it
		// before its delete refuses it again whatever the records it read are by then.
		case why != "":
			e.refuseOpen(m.subject, m.seq, why)
		case strings.HasPrefix(m.subject, e.names.JobSubject("")):
			e.refuseOpen(m.subject, m.seq, SingleRunning(id))
		default:
			e.refuseOpen(m.subject, m.seq, OpenRunning(id))
		}
	}
	// Its jobs were never admitted: out of the scheduler, the index and the count (its entry in
	// the line, if any, is skipped once it is forgotten).
	if g != nil && g.inSched {
		e.sched.Cancel(g)
		g.inSched = false
	}
	for _, st := range []jobindex.State{jobindex.Pending, jobindex.Delayed} {
		for _, jid := range slices.Collect(e.groupJobs(h.seq, alone, st)) {
			_, _ = e.idx.Move(jid, jobindex.Canceled) // not a transition any job made: not in the metrics
			e.prio.drop(jid)
		}
	}
	e.stats.Admitted -= c.Total()
	var prevSeq uint64
	if prev != nil {
		prevSeq = prev.openSeq // prev may move once h is forgotten
	}
	e.untrack(h.seq)
	e.stopWaiting(h.seq)
	if e.groups.table.latest(id) == nil {
		if prev := e.groups.table.get(prevSeq); prev != nil {
			e.groups.table.setLatest(prev)
		}
	}
	if req := e.rd.replayOpens[h.seq]; req != 0 {
		// A redrive's open refused: its request, if stored, is decided as one without an open
		// (still counting as accepted for the opens between them: see redrivenBefore).
		if _, ok := e.rd.replayAsks[req]; ok && !slices.Contains(e.rd.replayOpen, req) {
			e.rd.replayOpen = append(e.rd.replayOpen, req)
			slices.Sort(e.rd.replayOpen)
		}
	}
}

// refusedReport names one report of a report message: a journal.KindRefused entry.
type refusedReport struct {
	seq, id uint64
	attempt uint32
}

// replayCancel is a cancel, c, read during replay on subject at seq: of the group, or of some
// of its jobs; sealed: the group was sealed before it; answer: it was stored lately, so it is
// answered when replay ends (see applyCancel).
type replayCancel struct {
	g       *group
	subject string
	seq     uint64
	c       wire.GroupControl
	sealed  bool
	answer  bool
}

// reportAt is a report seen during replay, applied once the journal has been read.
type reportAt struct {
	pool   string // of the subject it came on
	worker string
	seq    uint64 // in EVENTS
	rel    uint64 // the release it proved (job.rel), for a proven report
	r      wire.Report
	prev   *reportAt // the job's report it replaced, the latest again if this one was refused (skipRefused)
}

// replayReport judges a report read during replay as the live coordinator does (unproven), from
// what replay knows of the job's release when the report comes: the pool of its batch if that
// batch is still in WORK and not ended by a returned report since, and the returned report the
// attempt's current release follows. A proven report is recorded (replayState.report); one that
// is not is set aside for endReplay, so it can neither decide the job nor stand in for the
// job's latest release.
func (e *Engine) replayReport(pool, worker string, seq uint64, r wire.Report, now time.Time) {
	rs := e.replay
	var cur releaseSeen
	if prev, ok := rs.reports[r.ID]; ok && prev.r.Attempt == r.Attempt && prev.r.Status == wire.StatusReturned {
		cur.rel = prev.seq
	}
	if a, ok := rs.alive[r.ID]; ok && a.Attempt == r.Attempt && a.Rel >= cur.rel {
		cur = releaseSeen{pool: a.Pool, rel: a.Rel}
	}
	rel, reason := e.unproven(pool, worker, r, cur)
	if reason != "" {
		rs.unproven = append(rs.unproven, reportAt{pool: pool, worker: worker, seq: seq, r: r})
		return
	}
	rs.report(pool, worker, seq, rel, r, now)
}

// report records a proven report read during replay: decisions are replayed from the journal,
// and a report is applied after replay only if no decision followed it (see endReplay).
func (rp *replayState) report(pool, worker string, seq, rel uint64, r wire.Report, now time.Time) {
	// As live, the first report of an attempt decides it and later ones are stale, unless it
	// returned the job unrun (StatusReturned), which keeps the attempt number for the next
	// release: a stale report (a forged one, or a lapsed report of a redelivered batch whose
	// worker had reported it) must not decide the job at replay either.
	prev, ok := rp.reports[r.ID]
	if ok && r.Attempt <= prev.r.Attempt && !(r.Attempt == prev.r.Attempt && prev.r.Status == wire.StatusReturned) {
		return // stale, as it was live
	}
	ra := reportAt{pool: pool, worker: worker, seq: seq, rel: rel, r: r}
	if ok {
		ra.prev = &prev // kept until replay ends, in case this one was refused
	}
	rp.reports[r.ID] = ra
	if r.Status.Failed() {
		// The history of the attempts whose reports are still in EVENTS (older ones may have
		// been trimmed).
		j := &job{history: rp.history[r.ID]}
		j.addHistory(historyWorker(worker, r.Status), r.Data, now)
		rp.history[r.ID] = j.history
	}
}

// JournalRecord applies one journal record.
func (e *Engine) JournalRecord(r journal.Record) {
	if r.Epoch < e.maxEpoch {
		// Written by a coordinator that had lost its lease after a newer epoch began: fenced off.
		return
	}
	e.maxEpoch = r.Epoch
	if e.Replaying() && r.Kind == journal.KindRefused {
		e.skipRefused(r.Entries)
		return
	}
	if e.Replaying() && r.Kind == journal.KindRefusedOpen {
		if e.replay.refusedOpens == nil {
			e.replay.refusedOpens = map[uint64]bool{}
		}
		for _, en := range r.Entries {
			e.replay.refusedOpens[en.Seq] = true
		}
		return
	}
	if !e.Replaying() || r.Kind != journal.KindRetry {
		return // live: our own records, applied when decided
	}
	for _, en := range r.Entries {
		if prev, ok := e.replay.retries[en.ID]; !ok || en.Attempt >= prev.Attempt {
			e.replay.retries[en.ID] = en
		}
	}
}

// skipRefused undoes, during replay, the reports a journal record says were refused before the
// restart: the report before a refused one is the job's latest again, and a refused failed
// attempt leaves the history.
func (e *Engine) skipRefused(entries []journal.Entry) {
	for _, en := range entries {
		// Refused live, so recorded already: not again (see endReplay).
		if e.replay.refusedLive == nil {
			e.replay.refusedLive = map[refusedReport]bool{}
		}
		e.replay.refusedLive[refusedReport{en.Seq, en.ID, en.Attempt}] = true
		head, ok := e.replay.reports[en.ID]
		if !ok {
			continue
		}
		// Unlink the refused report from the job's chain of reports, latest first.
		var refused *reportAt
		if head.seq == en.Seq {
			refused = &head
			if head.prev != nil {
				e.replay.reports[en.ID] = *head.prev
			} else {
				delete(e.replay.reports, en.ID)
			}
		} else {
			for ra := &head; ra.prev != nil; ra = ra.prev {
				if ra.prev.seq == en.Seq {
					refused, ra.prev = ra.prev, ra.prev.prev
					break
				}
			}
			e.replay.reports[en.ID] = head
		}
		if refused == nil || !refused.r.Status.Failed() {
			continue
		}
		// Its failed attempt is in the history: take the latest entry it added out.
		h := e.replay.history[en.ID]
		for i := len(h) - 1; i >= 0; i-- {
			if h[i].Worker == historyWorker(refused.worker, refused.r.Status) && h[i].Error == string(refused.r.Data) {
				e.replay.history[en.ID] = append(h[:i], h[i+1:]...)
				break
			}
		}
	}
}

// OutcomeReplay applies one message from a group's outcome subject written before the restart:
// msgSeq and at are its sequence and time in RESULTS; lastSeq, for a summary, the JOBS sequence
// of the incarnation's last message when it completed (0 if the summary does not say).
func (e *Engine) OutcomeReplay(gtok string, openSeq uint64, outs []wire.Outcome, sum *wire.GroupSummary, lastSeq, msgSeq uint64, at time.Time, expires bool) {
	id, err := wire.ParseGroupToken(gtok)
	if err != nil {
		return
	}
	// The incarnation the outcomes belong to, if its messages are still in JOBS: several
	// incarnations of one group ID can be, when a later one opened after an earlier one ended.
	r := e.groups.table.get(openSeq)
	if r != nil && r.id != id {
		r = nil
	}
	if r != nil {
		e.replayOutcomes(r, outs)
	}
	if sum != nil {
		// A complete incarnation: its outcomes are retained until its retention expires, and its job
		// messages too while they are in JOBS (some failed, or it was not purged yet).
		var jobsSeq uint64
		keep := sum.Failed > 0
		if r != nil {
			if g := e.liveOf(r); g != nil {
				g.complete = true
			} else {
				r.flags |= recComplete
			}
			if lastSeq > 0 {
				if e.replay.summarized == nil {
					e.replay.summarized = map[uint64]uint64{}
				}
				e.replay.summarized[r.openSeq] = lastSeq
			}
			jobsSeq = e.lastSeqOf(r)
			keep = keep || e.retention.keeping[wire.GroupToken(r.id)] > 0 // kept for an earlier one (keepsJobs)
		}
		e.retain(id, openSeq, msgSeq, keep, jobsSeq, at, *sum, expires)
	}
}

// replayOutcomes applies outcomes written before the restart to their incarnation r, whose
// messages are still in JOBS (a purged incarnation is not replayed): a group kept as a record
// counts its jobs' states in the index alone.
func (e *Engine) replayOutcomes(r *groupRec, outs []wire.Outcome) {
	g := e.liveOf(r)
	for _, o := range outs {
		st, ok := e.idx.State(o.ID)
		if !ok || st.Terminal() {
			continue
		}
		to := map[wire.Final]jobindex.State{wire.FinalDone: jobindex.Done, wire.FinalFailed: jobindex.Failed, wire.FinalCanceled: jobindex.Canceled}[o.State]
		e.moveTerminal(o.ID, to)
		if g == nil {
			continue
		}
		switch to {
		case jobindex.Done:
			g.done++
		case jobindex.Failed:
			g.failed++
		case jobindex.Canceled:
			g.canceled++
		}
	}
}

// EndReplay ends replay and reconciles every job that was ever released: running if its
// latest attempt is still in WORK, waiting if a retry was decided for its latest report, and
// otherwise decided now from its latest report.
func (e *Engine) EndReplay(alive map[uint64]AliveJob, now time.Time) {
	rs := e.replay
	undecided := e.rebuildJobs(rs, alive)
	e.recountLimits()
	e.replay = nil // live from here on
	e.maxEpoch = max(e.maxEpoch, e.epoch)
	e.boundRetained()
	e.bindAfterReplay(rs.heldOpens)
	e.rebuildLine()
	// The incarnations whose summary is stored: purge them if not yet done. Taken before the
	// undecided reports are decided, since those can complete more groups (whose summary is
	// written first).
	var complete []*groupRec
	for r := range e.groups.table.all() {
		if e.complete(r) {
			complete = append(complete, r)
		}
	}
	for _, r := range complete {
		e.out.purges = append(e.out.purges, e.live(r))
	}
	// Decide the reports no decision followed, and judge those that proved no release, in their
	// EVENTS order, as if they arrived now: a forged report stored before its job's real one is
	// refused (recorded in NS_REJECTED, counted, journaled), as live, rather than found stale.
	reports := slices.Concat(undecided, slices.DeleteFunc(rs.unproven, func(ra reportAt) bool {
		return rs.refusedLive[refusedReport{ra.seq, ra.r.ID, ra.r.Attempt}]
	}))
	slices.SortStableFunc(reports, func(a, b reportAt) int { return cmp.Compare(a.seq, b.seq) })
	// Reports about never-released jobs of deferred incarnations wait for their decision: a
	// refused incarnation's jobs were never admitted, so reports about them are stale, as live.
	var unreleased []reportAt
	for _, ra := range reports {
		if r := e.jobRec(ra.r.ID); r != nil && rs.deferredOf[r.openSeq] != nil && e.jobs[ra.r.ID] == nil {
			unreleased = append(unreleased, ra)
			continue
		}
		e.Report(ra.pool, ra.worker, ra.seq, ra.r, now)
	}
	// Apply the cancels read, in order, as if they arrived now (a stored cancel that no
	// coordinator had applied yet, or one applied before a restart, which finds its jobs ended).
	// One of a deferred incarnation goes, if its open is refused, where it would have gone live.
	// One that came after its incarnation completed is refused, as live: after the last message
	// its stored summary names; else, without that, after the group was sealed with every job
	// ended by then (reports, outcomes and earlier cancels are applied before it). Live, it may
	// have come while a job still ran, been applied and changed nothing: nothing stored says
	// which, so it is refused, lest replay accept a cancel the live coordinator refused.
	for _, c := range rs.lateCancels { // refused as they were read
		e.answerNotOpen(c.seq, c.c)
	}
	for _, c := range rs.cancels {
		answer := func(a wire.ControlAnswer) {
			if c.answer {
				e.answer(c.seq, c.c, a)
			}
		}
		if h := rs.deferredOf[c.g.openSeq]; h != nil {
			e.decideDeferred(rs, h)
			if h.refused {
				r := e.groups.table.get(rs.effective(c.g.openSeq))
				if r == nil {
					e.refuse(c.subject, c.seq, CancelNotOpen(c.g.id)) // no incarnation before it
					answer(notOpen(c.g.id))
					continue
				}
				c.g, c.sealed = e.live(r), true // the incarnation before a deferred one was sealed
			}
		}
		switch last, summarized := rs.summarized[c.g.openSeq]; {
		case summarized && arrivedBefore(last, c.seq):
			e.refuse(c.subject, c.seq, CancelNotOpen(c.g.id))
			answer(notOpen(c.g.id))
		case summarized: // applied before it completed
			answer(wire.ControlAnswer{OK: true})
		case c.sealed && !e.jobsLeft(c.g.openSeq, c.g.alone):
			e.refuse(c.subject, c.seq, CancelComplete(c.g.id))
			answer(notOpen(c.g.id))
		case c.g.complete: // it sealed the group, which then completed
			answer(wire.ControlAnswer{OK: true})
		default:
			c.g.lastSeq = later(c.g.lastSeq, c.seq) // purged with it (a cancel moved from a refused open)
			answer(e.cancel(c.g, c.c.Jobs))
		}
	}
	for _, h := range rs.deferred {
		e.decideDeferred(rs, h)
	}
	for _, ra := range unreleased {
		e.Report(ra.pool, ra.worker, ra.seq, ra.r, now)
	}
	var open []uint64
	for r := range e.groups.table.all() {
		if !e.complete(r) && e.sealed(r) {
			open = append(open, r.openSeq)
		}
	}
	for _, seq := range open { // completing one makes its *group: not while walking the table
		if r := e.groups.table.get(seq); r != nil {
			e.completeIfDone(r)
		}
	}
	e.redriveAfterReplay()
}

// rebuildJobs makes a job in flight of every job ever released that has not ended: running in
// its batch's pool if its latest attempt is in WORK, waiting if a retry was decided for its
// latest report. It returns the latest reports no decision followed, in job order.
func (e *Engine) rebuildJobs(rs *replayState, alive map[uint64]AliveJob) (undecided []reportAt) {
	ids := map[uint64]bool{}
	for id := range alive {
		ids[id] = true
	}
	for id := range rs.reports {
		ids[id] = true
	}
	for id := range rs.retries {
		ids[id] = true
	}
	for _, id := range sortedIDs(ids) {
		r := e.jobRec(id)
		st, ok := e.idx.State(id)
		if r == nil || e.complete(r) || !ok || st.Terminal() {
			continue // ended, or its group was purged
		}
		g := e.live(r)
		a, isAlive := alive[id]
		rp, reported := rs.reports[id]
		rt, retried := rs.retries[id]
		j := &job{id: id, g: g, heapIdx: -1, attempt: max(a.Attempt, rp.r.Attempt, rt.Attempt), history: rs.history[id]}
		e.jobs[id] = j
		if st == jobindex.Delayed {
			// Released before the restart: by this coordinator's clock its time is still
			// ahead, but it was due by the clock of the one that released it.
			e.mustMove(id, jobindex.Pending)
		}
		e.mustMove(id, jobindex.Running)
		// What says the latest attempt ended wins over its batch in WORK: a worker acks a batch
		// only after the report covering it is stored, so for a moment both are there (and a
		// lagging replica, which may answer the scan, holds the batch longer). Taken as running,
		// such a job would stay in flight for good, holding a slot of the prefetch window: its
		// report was read, and its worker acked the batch and has nothing more to say.
		switch {
		case retried && rt.Attempt == j.attempt:
			e.mustMove(id, jobindex.RetryWait)
			j.retryAt, j.evSeq = rt.At, rp.seq
			e.retries.wait.Push(j)
		case reported && rp.r.Attempt == j.attempt:
			// Running, until it is decided, in the pool its report proved it was released to:
			// the live check that decides it knows that release as replay did.
			j.pool, j.rel = e.poolFor(rp.pool, nil), rp.rel
			j.pool.outstanding++
			undecided = append(undecided, rp)
			if h := j.history; len(h) > 0 && rp.r.Status.Failed() {
				j.history = h[:len(h)-1] // deciding the report adds it back
			}
		case isAlive && a.Attempt == j.attempt:
			j.pool = e.poolFor(a.Pool, nil)
			j.pool.outstanding++
			j.g.inFlight++
			j.rel = a.Rel
		case reported:
			undecided = append(undecided, rp)
			if h := j.history; len(h) > 0 && rp.r.Status.Failed() {
				j.history = h[:len(h)-1] // deciding the report adds it back
			}
		}
	}
	heap.Init(&e.retries.wait)
	return undecided
}

// rebuildLine puts in the line, in arrival order, the open groups with pending jobs (those never
// released, which a group takes into its queue when it gets a slot), but not those held by their
// edges: their ready record puts them there (applyReady).
func (e *Engine) rebuildLine() {
	for r := range e.groups.table.all() {
		if !e.complete(r) && !e.isWaiting(r.openSeq) && e.recCounts(r).Pending > 0 {
			e.enqueue(r)
		}
	}
}

func sortedIDs(m map[uint64]bool) []uint64 {
	ids := make([]uint64, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
