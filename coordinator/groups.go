package coordinator

import (
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/weavejobs/weave/internal/jobindex"
	"github.com/weavejobs/weave/internal/wire"
)

// groupSet is the engine's part that owns the groups: every incarnation still tracked, which are
// unsealed, and the busy share a new group starts from. Owned by the loop.
type groupSet struct {
	byID             map[string]*group // the latest incarnation of each group ID (complete ones are removed once forgotten)
	incarnations     map[uint64]*group // every tracked incarnation by its open's JOBS sequence
	arrival          []*group          // tracked incarnations in arrival order, for the scheduler rebuild after replay
	unsealed         map[*group]bool   // open incarnations not sealed yet: AbandonAfter watches them
	nextAbandonCheck time.Time         // abandon looks for silent producers no more often than this
	busy             float64           // the average of the groups' busy shares: a new group starts from it
	prioritized      int               // tracked incarnations with a priority: the release decision looks at every candidate
}

// group is one incarnation of a group, from its open until it is complete and forgotten.
// Owned by the loop, through groupSet; jobs, the scheduler and the effects point at it. The
// pipelines read only its fields that never change (id, tok, openSeq) and the outcomes the loop
// handed over (see run.writeOutcomes).
type group struct {
	id, tok   string
	reply     string // its producer's reply token: where its outcomes are published (wire.Names.OutcomeSubjectTo)
	openSeq   uint64 // the open message's sequence: the group's incarnation
	idxKey    string // the group's name in the job index: ID and incarnation
	lastSeq   uint64 // the sequence of its last message in JOBS: a purge stops there
	sealed    bool
	weight    float64 // its weight in the fair share (the open's; 1 by default): see load
	priority  int     // its priority (the open's): its jobs go before lower priorities' (release.go)
	abandoned bool    // sealed by the coordinator: the producer went silent (see abandon)
	// sealedByCancel: a cancel of the whole group sealed it before its producer did.
	sealedByCancel bool
	count          uint64    // jobs the producer says it published (seal); informational
	openedAt       time.Time // when its open was stored (the server's clock)
	// lastHeard is the coordinator's time of the group's latest job, open or keep-alive while
	// unsealed; abandonAt is when the coordinator last asked for its seal (zero if never).
	lastHeard, abandonAt time.Time
	cancelReq            bool // a cancel arrived: pending jobs end canceled, running ones are told to stop
	admitted             uint64
	done                 uint64
	failed               uint64
	canceled             uint64
	inSched              bool // added to the scheduler
	// redriven: a redrive opened it, so its jobs' Weave-Redrive-Of is the coordinator's own and
	// their outcomes carry it (see wire.Outcome.RedriveOf).
	redriven bool
	// inFlight counts its jobs released and not reported. The scheduler counts those it
	// released too, but not the jobs a limit's line offered after it had handed out the last.
	inFlight int
	// busy estimates the share of a released job's time that its handler runs (the rest is
	// queueing and round trips), from the group's reports: the exponentially weighted average of
	// handler durations ÷ that of (report time − release time), kept in ranAvg and cycleAvg
	// (seconds). By Little's law, released jobs × busy is the group's running jobs as the
	// handlers see them.
	busy             float64
	ranAvg, cycleAvg float64
	complete         bool // every job terminal and the summary is being written
	keepJobs         bool // complete: its job messages are kept until its retention passes (see keepsJobs)

	outcomes    []wire.Outcome // terminal outcomes not yet handed to the writer
	outcomeSeqs []uint64       // the EVENTS sequence of the report behind each, or 0
	// outcomesAt is when its outcomes were last handed to the writer; lingering is set while
	// outcomes wait for OutcomeLinger to pass since then (see run.writeOutcomes).
	outcomesAt time.Time
	lingering  bool
}

func (g *group) terminal() uint64 { return g.done + g.failed + g.canceled }

// canceledWhy is the outcome text of g's jobs ended by a cancel of the whole group.
func (e *engine) canceledWhy(g *group) string {
	if dep := e.canceledFor(g); dep != "" {
		return "group canceled: group " + dep + ", which it runs after, did not end as it asks"
	}
	return "group canceled"
}

// summary is the summary of g, complete.
func (g *group) summary() wire.GroupSummary {
	return wire.GroupSummary{Jobs: g.admitted, Done: g.done, Failed: g.failed, Canceled: g.canceled, Abandoned: g.abandoned}
}

// control applies a group's control message stored at seq in JOBS (at the server's time stored).
// One case per operation: a new operation on the control subject is one more case and method.
func (e *engine) control(subject string, seq uint64, c wire.GroupControl, data []byte, stored time.Time) {
	g := e.groups.byID[c.Group]
	switch c.Op {
	case wire.OpOpen:
		if e.redriveOpening(subject, seq, c) {
			return
		}
		e.applyOpen(subject, seq, c, g, stored)
	case wire.OpKeepAlive:
		e.applyKeepAlive(subject, seq, c, g)
	case wire.OpSeal:
		e.applySeal(subject, seq, c, g)
	case wire.OpCancel:
		e.applyCancel(subject, seq, c, g)
	case wire.OpRedrive:
		e.redriveAsked(subject, seq, c)
	case wire.OpReady:
		e.applyReady(subject, seq, c, g, data)
	}
}

// applyOpen opens a group, or a new incarnation of a complete group's ID; stored is when the
// open was stored (the server's clock).
func (e *engine) applyOpen(subject string, seq uint64, c wire.GroupControl, g *group, stored time.Time) {
	switch {
	case g != nil && !g.complete && !g.sealed:
		// A producer publishing the group again, e.g. after a crash: its jobs join the
		// open group (dedup by key drops those stored already).
		e.log.Info().Str("group", c.Group).Msg("group opened again while open: resuming")
		if c.Reply != "" {
			g.reply = c.Reply // the producer publishing it now is the one alive to hear of it
		}
		e.heard(g)
		e.noteDeferred(g, subject, seq, &c)
		return
	case g != nil && !g.complete && !e.replaying():
		e.reject(subject, seq, openRunning(c.Group))
		return
	}
	// New, or a new incarnation of a complete group's ID. During replay the feed is read
	// before the outcomes, so whether a sealed previous incarnation was complete is not known
	// yet: the decision on the new one is deferred to endReplay, which decides as the live
	// coordinator would have (see deferredOpen); meanwhile it is tracked like any other.
	prev := g
	g = &group{id: c.Group, tok: wire.GroupToken(c.Group), reply: c.Reply, openSeq: seq, lastSeq: seq, idxKey: c.Group + "\x00" + strconv.FormatUint(seq, 10), busy: e.groups.busy, openedAt: stored, weight: float64(max(c.Weight, 1)), redriven: c.Redrive != 0, priority: c.Priority}
	if ok, reason := e.holdOpen(g, c.After); !ok {
		e.refuse(subject, seq, reason)
		e.answer(seq, c, wire.ControlAnswer{Code: wire.AnswerCycle, Reason: reason})
		return
	}
	e.groups.byID[c.Group] = g
	e.groups.incarnations[seq] = g
	e.groups.arrival = append(e.groups.arrival, g)
	if g.priority > 0 {
		e.groups.prioritized++
	}
	e.groups.unsealed[g] = true
	e.heard(g)
	e.openedForDeps(g)
	if len(c.After) > 0 {
		if e.replaying() && e.cfg.now().Sub(stored) < answerLateFor {
			e.replay.heldOpens = append(e.replay.heldOpens, heldOpen{seq: seq, c: c})
		}
		e.answer(seq, c, wire.ControlAnswer{OK: true})
	}
	switch {
	case e.replaying():
		if prev != nil && !prev.complete {
			e.replay.deferOpen(g, prev, deferredMsg{subject: subject, seq: seq, c: &c})
		}
	case !e.isWaiting(g):
		e.schedule(g, nil)
	}
}

// openRunning is why an open (live) of a group whose sealed incarnation still runs is refused.
func openRunning(id string) string {
	return "group " + id + " is sealed and still running; publish it again once it has finished"
}

// single reports whether g is a single job (admitSingle): its one message in JOBS is its open,
// its job and its seal.
func (g *group) single() bool { return g.openSeq == g.lastSeq }

// applyKeepAlive records a sign of life from an unsealed group's producer.
func (e *engine) applyKeepAlive(subject string, seq uint64, c wire.GroupControl, g *group) {
	if g == nil || g.sealed {
		e.reject(subject, seq, "keep-alive of a group that is not open: "+c.Group)
		return
	}
	e.heard(g)
	e.noteDeferred(g, subject, seq, &c)
}

// applySeal seals a group: its producer's seal, or the coordinator's for an abandoned group.
func (e *engine) applySeal(subject string, seq uint64, c wire.GroupControl, g *group) {
	switch {
	case g != nil && g.sealedByCancel && !c.Abandoned:
		// Canceled while open, which sealed it: the producer's own seal comes after.
		g.lastSeq = seq
		e.noteDeferred(g, subject, seq, &c)
		return
	case g == nil || g.sealed:
		e.reject(subject, seq, "seal of a group that is not open: "+c.Group)
		return
	}
	e.noteDeferred(g, subject, seq, &c)
	e.seal(g, seq)
	g.count, g.abandoned = c.Count, c.Abandoned
	if g.abandoned {
		e.log.Warn().Str("group", g.id).Uint64("jobs", g.admitted).Msg("group abandoned by its producer: sealed with the jobs it has")
	}
	e.checkComplete(g)
}

// applyCancel cancels a whole group or some of its jobs, and answers if asked to.
func (e *engine) applyCancel(subject string, seq uint64, c wire.GroupControl, g *group) {
	if g == nil {
		e.refuse(subject, seq, cancelNotOpen(c.Group))
		e.answerNotOpen(seq, c)
		return
	}
	if g.complete {
		// Rejected like a cancel of a group gone already, so its message is deleted: the
		// group's purge has gone or is on its way, and would not cover it.
		e.refuse(subject, seq, cancelComplete(c.Group))
		e.answerNotOpen(seq, c)
		return
	}
	// The cancel is the group's message in JOBS, to be purged with it.
	g.lastSeq = max(g.lastSeq, seq)
	if c.AfterFailed != "" {
		e.depsCanceled(g, c.AfterFailed)
	}
	// A cancel for a dependency leaves the group open: the producer's jobs still join it (and
	// end canceled), so its summary counts every job it published.
	if len(c.Jobs) == 0 && !g.sealed && c.AfterFailed == "" {
		// No job may join a canceled group, so it can complete without its producer. Sealed at
		// the cancel's place in the stream, also while replaying, so a replay refuses the
		// same later jobs.
		e.seal(g, seq)
		g.sealedByCancel = true
	}
	if e.replaying() {
		// The group's pending jobs are not in the scheduler yet, nor its running ones known:
		// endReplay applies the cancel to the rebuilt state.
		e.replay.cancels = append(e.replay.cancels, replayCancel{g: g, subject: subject, seq: seq, jobs: c.Jobs})
		return
	}
	canceled, stopping := g.canceled, len(e.out.cancels)
	var final, unknown []uint64
	if len(c.Jobs) > 0 {
		final, unknown = e.cancelJobs(g, c.Jobs)
	} else {
		e.cancelGroup(g)
	}
	e.answer(seq, c, wire.ControlAnswer{OK: true, Canceled: int(g.canceled - canceled), Stopping: len(e.out.cancels) - stopping, Final: final, Unknown: unknown})
}

// cancelNotOpen and cancelComplete are why a cancel of a group not open, or complete, is refused.
func cancelNotOpen(id string) string  { return "cancel of a group that is not open: " + id }
func cancelComplete(id string) string { return "cancel of a group that is complete: " + id }

// seal marks g sealed by the message at seq: no more jobs join it.
func (e *engine) seal(g *group, seq uint64) {
	g.sealed, g.lastSeq = true, seq
	delete(e.groups.unsealed, g)
	e.sealIfDue(g)
}

// heard records a sign of life from g's producer.
func (e *engine) heard(g *group) { g.lastHeard = e.cfg.now() }

// abandon asks for a seal of every unsealed group whose producer has published nothing (no job,
// no keep-alive) for AbandonAfter: a producer that died after its open, or a client that never
// seals, would otherwise keep the group from ever completing. The seal is stored in JOBS like a
// producer's, marked abandoned, so a replay reaches the same decision; jobs stored after it are
// refused. A seal whose write failed is asked for again after another AbandonAfter.
func (e *engine) abandon(now time.Time) {
	if now.Before(e.groups.nextAbandonCheck) || e.replaying() {
		return
	}
	e.groups.nextAbandonCheck = now.Add(min(time.Second, e.cfg.AbandonAfter/4))
	for g := range e.groups.unsealed {
		if now.Sub(g.lastHeard) >= e.cfg.AbandonAfter && now.Sub(g.abandonAt) >= e.cfg.AbandonAfter {
			g.abandonAt = now
			e.out.abandons = append(e.out.abandons, g)
		}
	}
}

// mayJoin checks that the jobs of the message stored at seq may join group (a message, a pack
// too, holds jobs of one group); if not, it rejects the message and reports false.
func (e *engine) mayJoin(subject string, seq uint64, group string) bool {
	g := e.groups.byID[group]
	if reason := e.joinRefusal(subject, group, g); reason != "" {
		e.reject(subject, seq, reason)
		return false
	}
	e.noteDeferred(g, subject, seq, nil)
	return true
}

// joinRefusal returns why a job message on subject may not join g, its group ID's latest
// incarnation (nil if none is tracked), or "".
func (e *engine) joinRefusal(subject, group string, g *group) string {
	switch {
	case g == nil:
		return "job for a group that is not open: " + group
	case g.sealedByCancel:
		return "job for group " + group + ", which was canceled"
	case g.sealed:
		return "job after the seal of group " + group
	case subject != e.names.JobSubject(g.tok):
		return "job subject does not match its group " + group
	}
	return ""
}

// admit indexes job j of the message stored at seq in its group, which mayJoin checked, and
// reports whether it is to be released now (its payload worth keeping).
func (e *engine) admit(subject string, seq uint64, j *wire.StoredJob) bool {
	m, id := &j.Meta, j.ID
	g := e.groups.byID[m.Group]
	// A job whose time is still ahead waits in the delays, outside the scheduler (delays.go).
	delayed := !m.RunAt.IsZero() && m.RunAt.After(e.cfg.now())
	st := jobindex.Pending
	if delayed {
		st = jobindex.Delayed
	}
	if err := e.idx.AddState(id, g.idxKey, m.Require, m.Prefer, st); err != nil {
		e.reject(subject, seq, err.Error())
		return false
	}
	g.admitted++
	g.lastSeq = seq
	e.heard(g)
	e.stats.Admitted++
	switch {
	case g.cancelReq:
		e.moveTerminal(id, jobindex.Canceled)
		e.recordOutcome(g, wire.Outcome{ID: id, Key: m.Key, State: wire.FinalCanceled, Data: []byte(e.canceledWhy(g))}, 0)
		return false
	case delayed:
		e.delay(g, id, m.RunAt)
		if e.replaying() {
			e.replay.groupOf[id] = g
		}
		return false // its payload is read when it is released, not kept until then
	case e.replaying():
		e.replay.groupOf[id] = g
	case g.inSched:
		_ = e.sched.Push(g, id)
	}
	return true
}

// schedule hands a group to the scheduler with its pending jobs (in ID order).
func (e *engine) schedule(g *group, pending []uint64) {
	if err := e.sched.AddGroup(g); err != nil {
		e.log.Error().Err(err).Str("group", g.id).Msg("scheduler refused group")
		return
	}
	g.inSched = true
	if len(pending) > 0 {
		_ = e.sched.Push(g, pending...)
	}
	e.sealIfDue(g)
}

func (e *engine) cancelGroup(g *group) {
	if g.cancelReq {
		return
	}
	g.cancelReq = true
	reason := e.canceledWhy(g)
	if g.inSched {
		for _, id := range e.sched.Cancel(g) {
			e.moveTerminal(id, jobindex.Canceled)
			e.recordOutcome(g, wire.Outcome{ID: id, State: wire.FinalCanceled, Data: []byte(reason)}, 0)
		}
		g.inSched = false
	}
	held := jobindex.Delayed
	if e.isWaiting(g) {
		held = jobindex.Pending // a held group's jobs wait in the index alone
		e.stopWaiting(g)
	}
	for _, st := range []jobindex.State{jobindex.Delayed, held} {
		for _, id := range slices.Collect(e.idx.GroupJobs(g.idxKey, st)) {
			e.moveTerminal(id, jobindex.Canceled)
			e.recordOutcome(g, wire.Outcome{ID: id, State: wire.FinalCanceled, Data: []byte(reason)}, 0)
		}
	}
	for _, j := range e.jobs {
		if j.g != g {
			continue
		}
		st, _ := e.idx.State(j.id)
		switch st {
		case jobindex.Running:
			e.out.cancels = append(e.out.cancels, j.id)
		case jobindex.RetryWait, jobindex.Pending:
			e.retries.drop(j)
			e.end(j, jobindex.Canceled, []byte(reason), 0)
		}
	}
	e.checkComplete(g)
}

// cancelJobs cancels some jobs of a group: pending ones end canceled at once, running ones are
// told to stop (their attempt then ends canceled). It returns the IDs it left alone: jobs of
// the group that had ended already, and IDs that are not jobs of the group.
func (e *engine) cancelJobs(g *group, ids []uint64) (final, unknown []uint64) {
	const reason = "job canceled"
	var waiting map[uint64]bool
	for _, id := range ids {
		st, ok := e.idx.State(id)
		switch {
		case !ok:
			unknown = append(unknown, id)
			continue
		case st.Terminal():
			if e.incarnationOf(id, g.id) == g {
				final = append(final, id)
			} else {
				unknown = append(unknown, id)
			}
			continue
		}
		if j := e.jobs[id]; j != nil {
			if j.g != g {
				unknown = append(unknown, id)
				continue
			}
			if st == jobindex.Running {
				j.cancelReq = true
				e.out.cancels = append(e.out.cancels, id)
				continue
			}
			e.retries.drop(j)
			e.end(j, jobindex.Canceled, []byte(reason), 0)
			continue
		}
		cancel := st == jobindex.Pending && g.inSched && e.sched.Remove(g, id, func(a, b uint64) bool { return a == b })
		if st == jobindex.Delayed || st == jobindex.Pending && e.isWaiting(g) {
			if waiting == nil { // the group's jobs waiting outside the scheduler, read once: is id one of them?
				waiting = map[uint64]bool{}
				for _, s := range []jobindex.State{jobindex.Delayed, jobindex.Pending} {
					for d := range e.idx.GroupJobs(g.idxKey, s) {
						waiting[d] = true
					}
				}
			}
			cancel = waiting[id]
		}
		if !cancel {
			unknown = append(unknown, id) // another group's
			continue
		}
		e.moveTerminal(id, jobindex.Canceled)
		e.recordOutcome(g, wire.Outcome{ID: id, State: wire.FinalCanceled, Data: []byte(reason)}, 0)
		e.sealIfDue(g)
	}
	return final, unknown
}

// recordOutcome queues a terminal outcome for the group's outcome subject. evSeq is the EVENTS
// sequence of the report behind it (kept until the outcome is stored), or 0.
func (e *engine) recordOutcome(g *group, o wire.Outcome, evSeq uint64) {
	switch o.State {
	case wire.FinalDone:
		g.done++
		e.stats.Done++
	case wire.FinalFailed:
		g.failed++
		e.stats.Failed++
	case wire.FinalCanceled:
		g.canceled++
		e.stats.Canceled++
	}
	if len(g.outcomes) == 0 {
		e.out.outcomes = append(e.out.outcomes, g)
	}
	g.outcomes = append(g.outcomes, o)
	g.outcomeSeqs = append(g.outcomeSeqs, evSeq)
	if evSeq > 0 {
		e.retention.unstored[evSeq]++
	}
	e.checkComplete(g)
}

func (e *engine) checkComplete(g *group) {
	if g.complete || !g.sealed || g.terminal() != g.admitted || e.replaying() {
		return
	}
	g.complete = true
	if g.inSched {
		e.sched.Cancel(g) // frees its slot if it still holds one; its queue is empty
		g.inSched = false
	}
	e.stopWaiting(g)
	e.completedForDeps(g)
	e.out.summaries = append(e.out.summaries, g)
}

// forget drops a complete group whose summary is stored.
func (e *engine) forget(g *group) {
	e.untrack(g)
	e.redriveCompleted(g.id)
	e.forgetDeps(g)
}

// untrack drops g from the groups and its jobs, all ended, from the index.
func (e *engine) untrack(g *group) {
	if e.groups.byID[g.id] == g {
		delete(e.groups.byID, g.id)
	}
	if _, tracked := e.groups.incarnations[g.openSeq]; tracked && g.priority > 0 {
		e.groups.prioritized--
	}
	delete(e.groups.incarnations, g.openSeq)
	delete(e.groups.unsealed, g)
	// A group that admitted no job was never in the index: nothing to forget there.
	if _, err := e.idx.Forget(g.idxKey); err != nil && (g.admitted > 0 || !errors.Is(err, jobindex.ErrUnknownGroup)) {
		e.log.Error().Err(err).Str("group", g.id).Uint64("incarnation", g.openSeq).Msg("forgetting a complete group")
	}
	for i, a := range e.groups.arrival {
		if a == g {
			e.groups.arrival = append(e.groups.arrival[:i], e.groups.arrival[i+1:]...)
			break
		}
	}
}
