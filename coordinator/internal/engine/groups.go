package engine

import (
	"cmp"
	"errors"
	"iter"
	"slices"
	"strings"
	"time"

	"github.com/weavejobs/weave/internal/jobindex"
	"github.com/weavejobs/weave/internal/wire"
	"github.com/weavejobs/weave/spreader"
)

// groupSet is the engine's part that owns the groups: every incarnation still tracked, as a
// record (table); the *group of each that has had work released or ready in a slot (live); the
// line of groups waiting for a feeder slot; which are unsealed; and the busy share a group
// starts from. Owned by the loop.
//
// A group costs a record until it takes a feeder slot: its pending jobs wait in the job index
// alone, and its place in the line is its open sequence. The number of *group values is bounded
// by the slots and the work in flight (and the groups that ended jobs and wait for more), not by
// the backlog.
type groupSet struct {
	table groupTable
	live  map[uint64]*group // by open sequence: the incarnations given a *group (see engine.live)
	// lines hold the open sequences of the groups waiting for a feeder slot (recInLine), one
	// line per priority, each in the order its groups got work ready: a vacant slot goes to the
	// first group of the highest priority waiting. The scheduler keeps no line of its own: a group
	// is handed to it only once a slot is vacant, or opened for it (fillSlots).
	lines            [wire.MaxPriority + 1]waitLine
	unsealed         map[uint64]*unsealedGroup // open incarnations not sealed yet, by open sequence: AbandonAfter watches them
	replies          tokenTable                // the records' reply tokens
	nextAbandonCheck time.Time                 // abandon looks for silent producers no more often than this
	busy             float64                   // the average of the groups' busy shares: a new group starts from it
	prioritized      int                       // tracked incarnations with a priority: the release decision looks at every candidate
}

// waitLine is one priority's line: open sequences, first come first served, from head on.
type waitLine struct {
	seqs []uint64
	head int
}

// lineLen is how many entries the lines hold (those of groups forgotten meanwhile included).
func (gs *groupSet) lineLen() int {
	n := 0
	for i := range gs.lines {
		n += len(gs.lines[i].seqs) - gs.lines[i].head
	}
	return n
}

// topPriority is the priority of the highest line that holds an entry, -1 if none does.
func (gs *groupSet) topPriority() int {
	for p := len(gs.lines) - 1; p >= 0; p-- {
		if gs.lines[p].head < len(gs.lines[p].seqs) {
			return p
		}
	}
	return -1
}

// popLine takes the first entry of the highest priority's line that has one (lineLen > 0). A
// line's space is given back once the entries taken fill half of it.
func (gs *groupSet) popLine() uint64 {
	for p := len(gs.lines) - 1; ; p-- {
		l := &gs.lines[p]
		if l.head == len(l.seqs) {
			continue
		}
		seq := l.seqs[l.head]
		l.head++
		switch {
		case l.head == len(l.seqs):
			l.seqs, l.head = l.seqs[:0], 0
		case l.head >= 64 && 2*l.head >= len(l.seqs):
			l.seqs, l.head = append(l.seqs[:0:0], l.seqs[l.head:]...), 0
		}
		return seq
	}
}

// unsealedGroup is what abandon needs of an unsealed group.
type unsealedGroup struct {
	// lastHeard is the coordinator's time of the group's latest job, open or keep-alive;
	// abandonAt is when the coordinator last asked for its seal (zero if never).
	lastHeard, abandonAt time.Time
}

// group is one incarnation of a group with work in a slot or in flight, from then until it is
// complete and forgotten (before, a groupRec is all of it). Owned by the loop, through
// groupSet; jobs, the scheduler and the effects point at it. It never leaves the loop: the
// pipelines get its ID, token, incarnation and the outcomes the loop handed over, as values
// (writeOp), and name it back by its incarnation (completedGroup).
type group struct {
	id, tok   string
	reply     string // its producer's reply token: where its outcomes are published (wire.Names.OutcomeSubjectTo)
	openSeq   uint64 // the open message's sequence: the group's incarnation
	lastSeq   uint64 // the sequence of its last message in JOBS: a purge stops there
	sealed    bool
	weight    float64 // its weight in the fair share (the open's; 1 by default): see load
	priority  int     // its priority (the open's): its jobs go before lower priorities'
	abandoned bool    // sealed by the coordinator: the producer went silent (see abandon)
	// sealedByCancel: a cancel of the whole group sealed it before its producer did.
	sealedByCancel bool
	// alone: a single job (admitSingle), whose one message in JOBS is its open, its job and its
	// seal, and whose job is alone in the index (jobindex.Index.AddAlone).
	alone     bool
	openedAt  time.Time // when its open was stored (the server's clock)
	cancelReq bool      // a cancel arrived: pending jobs end canceled, running ones are told to stop
	admitted  uint64
	done      uint64
	failed    uint64
	canceled  uint64
	inSched   bool // added to the scheduler
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
	// outcomes wait for OutcomeLinger to pass since then (see TakeEffects).
	outcomesAt time.Time
	lingering  bool
}

// live returns r's *group, making it from the record the first time: called when the group
// takes a slot, ends a job, is canceled or completes. Making it changes no decision (a group
// waiting for a slot behaves the same either way); it costs memory until the group is forgotten.
func (e *Engine) live(r *groupRec) *group {
	if r.flags&recLive != 0 {
		return e.groups.live[r.openSeq]
	}
	c := e.recCounts(r)
	g := &group{
		id: r.id, tok: wire.GroupToken(r.id), reply: e.groups.replies.get(r.reply), openSeq: r.openSeq, lastSeq: r.lastSeq,
		sealed: r.flags&recSealed != 0, weight: float64(max(r.weight, 1)), abandoned: r.flags&recAbandoned != 0,
		sealedByCancel: r.flags&recSealedByCancel != 0, alone: r.flags&recSingle != 0, openedAt: fromUnixNano(r.openedAt),
		admitted: c.Total(), done: c.Done, failed: c.Failed, canceled: c.Canceled, redriven: r.flags&recRedriven != 0,
		busy: e.groups.busy, complete: r.flags&recComplete != 0, priority: r.priority(),
	}
	e.groups.replies.release(r.reply)
	r.reply = 0
	r.flags |= recLive
	if e.groups.live == nil {
		e.groups.live = map[uint64]*group{}
	}
	e.groups.live[r.openSeq] = g
	return g
}

// liveOf returns r's *group, or nil while it has none.
func (e *Engine) liveOf(r *groupRec) *group {
	if r.flags&recLive == 0 {
		return nil
	}
	return e.groups.live[r.openSeq]
}

// group returns the *group of the latest incarnation of group ID id, making it if needed, or nil
// if none is tracked.
func (e *Engine) group(id string) *group {
	if r := e.groups.table.latest(id); r != nil {
		return e.live(r)
	}
	return nil
}

// recCounts are the counts of r's jobs per state, from the index.
func (e *Engine) recCounts(r *groupRec) jobindex.Counts {
	return e.jobCounts(r.openSeq, r.flags&recSingle != 0)
}

// jobCounts are the counts per state of the jobs of the incarnation opened at seq (a single
// job's alone).
func (e *Engine) jobCounts(seq uint64, alone bool) jobindex.Counts {
	if alone {
		var c jobindex.Counts
		if st, ok := e.idx.State(seq); ok {
			c = stateCount(st)
		}
		return c
	}
	c, _ := e.idx.GroupCounts(e.idxName(seq))
	return c
}

// jobsLeft reports whether a job of the incarnation opened at seq (a single job's if alone) has
// not ended.
func (e *Engine) jobsLeft(seq uint64, alone bool) bool {
	c := e.jobCounts(seq, alone)
	return c.Pending+c.Running+c.RetryWait+c.Delayed > 0
}

// stateCount is the counts of one job in state st.
func stateCount(st jobindex.State) jobindex.Counts {
	var c jobindex.Counts
	switch st {
	case jobindex.Pending:
		c.Pending = 1
	case jobindex.Running:
		c.Running = 1
	case jobindex.RetryWait:
		c.RetryWait = 1
	case jobindex.Done:
		c.Done = 1
	case jobindex.Failed:
		c.Failed = 1
	case jobindex.Canceled:
		c.Canceled = 1
	case jobindex.Delayed:
		c.Delayed = 1
	}
	return c
}

// groupJobs yields the IDs of g's jobs in state st, in ID order; the body must not change the
// index.
func (e *Engine) groupJobs(seq uint64, alone bool, st jobindex.State) iter.Seq[uint64] {
	if alone {
		return func(yield func(uint64) bool) {
			if s, ok := e.idx.State(seq); ok && s == st {
				yield(seq)
			}
		}
	}
	return e.idx.GroupJobs(e.idxName(seq), st)
}

// idxName is idxName(seq), the last one kept: the jobs of a group come one after another.
func (e *Engine) idxName(seq uint64) string {
	if e.lastIdx.seq != seq || e.lastIdx.name == "" {
		e.lastIdx.seq, e.lastIdx.name = seq, idxName(seq)
	}
	return e.lastIdx.name
}

// incarnationOf returns the record of the tracked incarnation job id belongs to, from the index,
// or nil.
func (e *Engine) jobRec(id uint64) *groupRec {
	name, ok := e.idx.GroupOf(id)
	if !ok {
		return nil
	}
	if name == "" {
		return e.groups.table.get(id) // a single job: its incarnation is its own sequence
	}
	seq, _ := idxSeq(name)
	return e.groups.table.get(seq)
}

// waiting returns the pending jobs of r that wait in the index for its group to take a slot: never released (a job released before has a *job, and waits among
// the retries, the parked jobs or a limit's line). They come in the order they became pending,
// as a queue fed while the group held its slot would hold them: by message (a pack's jobs
// together, where they came among the jobs stored alone), then the delayed jobs that came due, in
// time order.
func (e *Engine) waiting(r *groupRec) []uint64 {
	var ids, woke []uint64
	released := r.flags&recLive != 0 // a group with no *group has released nothing yet
	split := -1                      // where the packed IDs start
	for id := range e.groupJobs(r.openSeq, r.flags&recSingle != 0, jobindex.Pending) {
		switch _, ok := e.delays.woke[id]; {
		case released && e.jobs[id] != nil:
		case ok:
			woke = append(woke, id)
		default:
			if split < 0 && id >= jobindex.PackedIDs {
				split = len(ids)
			}
			ids = append(ids, id)
		}
	}
	if split > 0 {
		// Each run of IDs is in message order; merge the two by message.
		merged := make([]uint64, 0, len(ids))
		a, b := ids[:split], ids[split:]
		for len(a) > 0 && len(b) > 0 {
			if wire.JobSeq(a[0]) < wire.JobSeq(b[0]) {
				merged, a = append(merged, a[0]), a[1:]
			} else {
				merged, b = append(merged, b[0]), b[1:]
			}
		}
		ids = append(append(merged, a...), b...)
	}
	slices.SortFunc(woke, func(a, b uint64) int { return cmp.Compare(e.delays.woke[a].n, e.delays.woke[b].n) })
	return append(ids, woke...)
}

// ready records that r, whose group has a job ready that its queue does not hold (g is its
// *group, nil if none), waits for a feeder slot: a group holding one takes the job at the end of
// its queue; another joins the line, if not in it already.
func (e *Engine) ready(r *groupRec, g *group, id uint64) {
	if e.isWaiting(r.openSeq) {
		return // held by its edges: its jobs wait in the index until its ready record (applyReady)
	}
	if g != nil && g.inSched && e.sched.Entered(g) {
		_ = e.sched.PushAt(g, e.prio.of(id), id)
		return
	}
	e.enqueue(r)
}

// enqueue puts r in its priority's line for a feeder slot, if it is not in a line already.
func (e *Engine) enqueue(r *groupRec) {
	if r.flags&recInLine == 0 {
		r.flags |= recInLine
		l := &e.groups.lines[r.priority()]
		l.seqs = append(l.seqs, r.openSeq)
	}
}

// fillSlots gives the vacant feeder slots to the groups waiting in the lines, in turn, the highest
// priority first: each gets a *group, a scheduler entry and its waiting jobs as its queue. A group
// of a higher priority than a group holding a slot does not wait for one to free: it takes a
// slot beyond the feeders (see urgentWaits).
func (e *Engine) fillSlots() {
	for e.groups.lineLen() > 0 {
		urgent := false
		if !e.sched.HasVacant() {
			if urgent = e.urgentWaits(); !urgent {
				return
			}
		}
		seq := e.groups.popLine()
		r := e.groups.table.get(seq)
		if r == nil {
			continue // forgotten
		}
		r.flags &^= recInLine
		ids := e.waiting(r)
		if len(ids) == 0 {
			continue // canceled, or released meanwhile
		}
		g := e.live(r)
		if err := e.sched.AddGroup(g); err != nil && !errors.Is(err, spreader.ErrDuplicateGroup) {
			e.log.Error().Err(err).Str("group", g.id).Msg("scheduler refused group")
			continue
		}
		g.inSched = true
		if err := e.push(g, ids); err != nil {
			e.log.Error().Err(err).Str("group", g.id).Msg("scheduler refused a group's jobs")
		}
		if urgent {
			_ = e.sched.OpenSlot(g) // it waits in the scheduler's line: no slot was vacant
		}
		e.sealIfDue(g)
	}
}

// urgentWaits reports whether the first group in the lines has a higher priority than a group
// holding a slot, while fewer groups than the feeders hold slots beyond them: urgent work then
// takes a slot of its own at once rather than wait for a large group of a lower priority to
// hand out its last job. The extra slots close as their groups leave them.
func (e *Engine) urgentWaits() bool {
	top := e.groups.topPriority()
	if top <= 0 || e.sched.Extra() >= e.sched.Feeders() {
		return false
	}
	for g := range e.sched.Holders() {
		if g.priority < top {
			return true
		}
	}
	return false
}

// push gives g's scheduler entry the jobs ids, each at its priority within g.
func (e *Engine) push(g *group, ids []uint64) error {
	if e.prio.n == 0 {
		return e.sched.Push(g, ids...)
	}
	for _, id := range ids {
		if err := e.sched.PushAt(g, e.prio.of(id), id); err != nil {
			return err
		}
	}
	return nil
}

func (g *group) terminal() uint64 { return g.done + g.failed + g.canceled }

// canceledWhy is the outcome text of g's jobs ended by a cancel of the whole group.
func (e *Engine) canceledWhy(g *group) string {
	if dep := e.CanceledFor(g.openSeq); dep != "" {
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
func (e *Engine) control(subject string, seq uint64, c wire.GroupControl, data []byte, stored time.Time) {
	r := e.groups.table.latest(c.Group)
	switch c.Op {
	case wire.OpOpen:
		if e.redriveOpening(subject, seq, c) {
			return
		}
		e.applyOpen(subject, seq, c, e.groups.table.latest(c.Group), stored) // replay may have refused r (refuseRedriven)
	case wire.OpKeepAlive:
		e.applyKeepAlive(subject, seq, c, r)
	case wire.OpSeal:
		e.applySeal(subject, seq, c, r)
	case wire.OpCancel:
		e.applyCancel(subject, seq, c, r, stored)
	case wire.OpRedrive:
		e.redriveAsked(subject, seq, c)
	case wire.OpReady:
		e.applyReady(subject, seq, c, r, data)
	}
}

// sealed, complete and sealedByCancel read r's state, from its *group once it has one.
func (e *Engine) sealed(r *groupRec) bool {
	if g := e.liveOf(r); g != nil {
		return g.sealed
	}
	return r.flags&recSealed != 0
}

func (e *Engine) complete(r *groupRec) bool {
	if g := e.liveOf(r); g != nil {
		return g.complete
	}
	return r.flags&recComplete != 0
}

func (e *Engine) sealedByCancel(r *groupRec) bool {
	if g := e.liveOf(r); g != nil {
		return g.sealedByCancel
	}
	return r.flags&recSealedByCancel != 0
}

// lastSeqOf is r's last sequence in JOBS.
func (e *Engine) lastSeqOf(r *groupRec) uint64 {
	if g := e.liveOf(r); g != nil {
		return g.lastSeq
	}
	return r.lastSeq
}

// applyOpen opens a group, or a new incarnation of a complete group's ID; stored is when the
// open was stored (the server's clock).
func (e *Engine) applyOpen(subject string, seq uint64, c wire.GroupControl, r *groupRec, stored time.Time) {
	switch {
	case r != nil && !e.complete(r) && !e.sealed(r):
		// A producer publishing the group again, e.g. after a crash: its jobs join the
		// open group (dedup by key drops those stored already).
		e.log.Info().Str("group", c.Group).Msg("group opened again while open: resuming")
		if c.Reply != "" {
			// The producer publishing it now is the one alive to hear of it.
			e.live(r).reply = strings.Clone(c.Reply)
		}
		e.heard(r.openSeq)
		e.noteDeferred(r.openSeq, subject, seq, &c)
		return
	case r != nil && !e.complete(r) && !e.Replaying():
		e.refuseOpen(subject, seq, OpenRunning(c.Group))
		return
	}
	// New, or a new incarnation of a complete group's ID. During replay the feed is read
	// before the outcomes, so whether a sealed previous incarnation was complete is not known
	// yet: the decision on the new one is deferred to endReplay, which decides as the live
	// coordinator would have (see deferredOpen); meanwhile it is tracked like any other.
	var prev uint64 // the incarnation before, not known to be complete (replay)
	if r != nil && !e.complete(r) {
		prev = r.openSeq
	}
	rec := groupRec{id: strings.Clone(c.Group), openSeq: seq, lastSeq: seq, openedAt: unixNano(stored), weight: uint16(max(c.Weight, 1))}
	rec.setPriority(c.Priority)
	if c.Redrive != 0 {
		rec.flags |= recRedriven
	}
	if ok, reason := e.holdOpen(&rec, c.After); !ok {
		e.refuse(subject, seq, reason)
		e.answer(seq, c, wire.ControlAnswer{Code: wire.AnswerCycle, Reason: reason})
		return
	}
	rec.reply = e.groups.replies.intern(c.Reply)
	e.groups.table.add(rec)
	if rec.priority() > 0 {
		e.groups.prioritized++
	}
	if e.groups.unsealed == nil {
		e.groups.unsealed = map[uint64]*unsealedGroup{}
	}
	e.groups.unsealed[seq] = &unsealedGroup{}
	e.heard(seq)
	e.openedForDeps(&rec)
	if len(c.After) > 0 {
		if e.Replaying() && e.cfg.now().Sub(stored) < answerLateFor {
			e.replay.heldOpens = append(e.replay.heldOpens, heldOpen{seq: seq, c: c})
		}
		e.answer(seq, c, wire.ControlAnswer{OK: true})
	}
	if e.Replaying() {
		e.deferOpen(seq, prev, subject, c)
	}
}

// OpenRunning is why an open (live) of a group whose sealed incarnation still runs is refused.
func OpenRunning(id string) string {
	return "group " + id + " is sealed and still running; publish it again once it has finished"
}

// single reports whether g's one message in JOBS is its open: a single job (admitSingle) whose
// message is its open, its job and its seal, with no cancel stored after it.
func (g *group) single() bool { return g.openSeq == g.lastSeq }

// applyKeepAlive records a sign of life from an unsealed group's producer.
func (e *Engine) applyKeepAlive(subject string, seq uint64, c wire.GroupControl, r *groupRec) {
	if r == nil || e.sealed(r) {
		e.Reject(subject, seq, "keep-alive of a group that is not open: "+c.Group)
		return
	}
	e.heard(r.openSeq)
	e.noteDeferred(r.openSeq, subject, seq, &c)
}

// applySeal seals a group: its producer's seal, or the coordinator's for an abandoned group.
func (e *Engine) applySeal(subject string, seq uint64, c wire.GroupControl, r *groupRec) {
	switch {
	case r != nil && e.sealedByCancel(r) && !c.Abandoned:
		// Canceled while open, which sealed it: the producer's own seal comes after.
		if g := e.liveOf(r); g != nil {
			g.lastSeq = seq
		} else {
			r.lastSeq = seq
		}
		e.noteDeferred(r.openSeq, subject, seq, &c)
		return
	case r == nil || e.sealed(r):
		e.Reject(subject, seq, "seal of a group that is not open: "+c.Group)
		return
	}
	e.noteDeferred(r.openSeq, subject, seq, &c)
	if c.Abandoned {
		e.log.Warn().Str("group", c.Group).Uint64("jobs", e.recCounts(r).Total()).Msg("group abandoned by its producer: sealed with the jobs it has")
	}
	if g := e.liveOf(r); g != nil {
		g.abandoned = c.Abandoned
		e.seal(g, seq)
		e.checkComplete(g)
		return
	}
	r.flags |= recSealed
	if c.Abandoned {
		r.flags |= recAbandoned
	}
	r.lastSeq = seq
	delete(e.groups.unsealed, r.openSeq)
	e.completeIfDone(r)
}

// completeIfDone completes r if it is sealed and has no job left to end (a group with no job, or
// one whose jobs ended before a restart).
func (e *Engine) completeIfDone(r *groupRec) {
	if g := e.liveOf(r); g != nil {
		e.checkComplete(g)
		return
	}
	if r.flags&(recSealed|recComplete) != recSealed || e.Replaying() {
		return
	}
	if !e.jobsLeft(r.openSeq, r.flags&recSingle != 0) {
		e.checkComplete(e.live(r))
	}
}

// applyCancel cancels a whole group or some of its jobs, and answers if asked to. During replay
// it answers only a cancel stored lately (answerLateFor), when replay ends: its producer may
// still wait for the answer (Handle.Cancel waits RequestTimeout), and a coordinator restart or
// takeover takes a second or two.
func (e *Engine) applyCancel(subject string, seq uint64, c wire.GroupControl, r *groupRec, stored time.Time) {
	late := e.Replaying() && c.Reply != "" && e.cfg.now().Sub(stored) < answerLateFor
	if r == nil || e.complete(r) {
		reason := CancelNotOpen(c.Group)
		if r != nil {
			// Rejected like a cancel of a group gone already, so its message is deleted: the
			// group's purge has gone or is on its way, and would not cover it.
			reason = CancelComplete(c.Group)
		}
		e.refuse(subject, seq, reason)
		if late {
			e.replay.lateCancels = append(e.replay.lateCancels, replayCancel{subject: subject, seq: seq, c: c, answer: true})
			return
		}
		e.answerNotOpen(seq, c)
		return
	}
	g := e.live(r)
	sealed := g.sealed // before this cancel: at replay, it may then have come after the group completed
	// The cancel is the group's message in JOBS, to be purged with it.
	g.lastSeq = later(g.lastSeq, seq)
	if c.AfterFailed != "" {
		e.depsCanceled(g.openSeq, c.AfterFailed)
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
	if e.Replaying() {
		// The group's pending jobs are not in the scheduler yet, nor its running ones known:
		// endReplay applies the cancel to the rebuilt state.
		e.replay.cancels = append(e.replay.cancels, replayCancel{g: g, subject: subject, seq: seq, c: c, sealed: sealed, answer: late})
		return
	}
	e.answer(seq, c, e.cancel(g, c.Jobs))
}

// cancel cancels g, or the jobs of g named in ids, and returns the answer to the cancel: how
// many jobs it canceled and told to stop, and which IDs it left alone.
func (e *Engine) cancel(g *group, ids []uint64) wire.ControlAnswer {
	canceled, stopping := g.canceled, len(e.out.Cancels)
	var final, unknown []uint64
	if len(ids) > 0 {
		final, unknown = e.cancelJobs(g, ids)
	} else {
		e.cancelGroup(g)
	}
	return wire.ControlAnswer{OK: true, Canceled: int(g.canceled - canceled), Stopping: len(e.out.Cancels) - stopping, Final: final, Unknown: unknown}
}

// CancelNotOpen and cancelComplete are why a cancel of a group not open, or complete, is refused.
func CancelNotOpen(id string) string  { return "cancel of a group that is not open: " + id }
func CancelComplete(id string) string { return "cancel of a group that is complete: " + id }

// seal marks g sealed by the message at seq: no more jobs join it.
func (e *Engine) seal(g *group, seq uint64) {
	g.sealed, g.lastSeq = true, seq
	delete(e.groups.unsealed, g.openSeq)
	e.sealIfDue(g)
}

// heard records a sign of life from the producer of the unsealed incarnation opened at seq.
func (e *Engine) heard(seq uint64) {
	if u := e.groups.unsealed[seq]; u != nil {
		u.lastHeard = e.cfg.now()
	}
}

// abandon asks for a seal of every unsealed group whose producer has published nothing (no job,
// no keep-alive) for AbandonAfter: a producer that died after its open, or a client that never
// seals, would otherwise keep the group from ever completing. The seal is stored in JOBS like a
// producer's, marked abandoned, so a replay reaches the same decision; jobs stored after it are
// refused. A seal whose write failed is asked for again after another AbandonAfter.
func (e *Engine) abandon(now time.Time) {
	if now.Before(e.groups.nextAbandonCheck) || e.Replaying() {
		return
	}
	e.groups.nextAbandonCheck = now.Add(min(time.Second, e.cfg.AbandonAfter/4))
	for seq, u := range e.groups.unsealed {
		if now.Sub(u.lastHeard) >= e.cfg.AbandonAfter && now.Sub(u.abandonAt) >= e.cfg.AbandonAfter {
			if r := e.groups.table.get(seq); r != nil {
				u.abandonAt = now
				e.out.abandons = append(e.out.abandons, e.live(r))
			}
		}
	}
}

// mayJoin checks that the jobs of the message stored at seq may join group, whose latest
// incarnation is r (a message, a pack too, holds jobs of one group); if not, it rejects the
// message and reports false.
func (e *Engine) mayJoin(subject string, seq uint64, group string, r *groupRec) bool {
	if reason := e.joinRefusal(subject, group, r); reason != "" {
		e.Reject(subject, seq, reason)
		return false
	}
	e.noteDeferred(r.openSeq, subject, seq, nil)
	return true
}

// joinRefusal returns why a job message on subject may not join r, its group ID's latest
// incarnation (nil if none is tracked), or "".
func (e *Engine) joinRefusal(subject, group string, r *groupRec) string {
	switch {
	case r == nil:
		return "job for a group that is not open: " + group
	case e.sealedByCancel(r):
		return "job for group " + group + ", which was canceled"
	case e.sealed(r):
		return "job after the seal of group " + group
	case subject != e.jobSubject(r):
		return "job subject does not match its group " + group
	}
	return ""
}

// jobSubject is the subject the job messages of r travel on: the singles subject for a single
// pack's job, its group's job subject for any other.
func (e *Engine) jobSubject(r *groupRec) string {
	if wire.IsPacked(r.openSeq) {
		return e.names.SinglesSubject()
	}
	return e.names.JobSubject(wire.GroupToken(r.id))
}

// admit indexes job j of the message stored at seq in the incarnation r, which mayJoin checked,
// and reports whether it is to be released now (its payload worth keeping).
func (e *Engine) admit(subject string, seq uint64, r *groupRec, j *wire.StoredJob) bool {
	m, id := &j.Meta, j.ID
	// A job whose time is still ahead waits in the delays, outside the scheduler.
	delayed := !m.RunAt.IsZero() && m.RunAt.After(e.cfg.now())
	st := jobindex.Pending
	if delayed {
		st = jobindex.Delayed
	}
	var err error
	if r.flags&recSingle != 0 {
		err = e.idx.AddAlone(id, m.Require, m.Prefer, st)
	} else {
		err = e.idx.AddState(id, e.idxName(r.openSeq), m.Require, m.Prefer, st)
	}
	if err != nil {
		e.Reject(subject, seq, err.Error())
		return false
	}
	if r.flags&recSingle == 0 {
		e.prio.set(id, m.Priority) // a single job's is its group's
	}
	g := e.liveOf(r)
	if g != nil {
		g.admitted++
		g.lastSeq = seq
	} else {
		r.lastSeq = seq
	}
	e.heard(r.openSeq)
	e.stats.Admitted++
	switch {
	case g != nil && g.cancelReq:
		e.moveTerminal(id, jobindex.Canceled)
		e.recordOutcome(g, wire.Outcome{ID: id, Key: m.Key, State: wire.FinalCanceled, Data: []byte(e.canceledWhy(g))}, 0)
		return false
	case delayed:
		e.delay(id, m.RunAt)
		return false // its payload is read when it is released, not kept until then
	case !e.Replaying(): // replay's end puts the groups with jobs waiting in the line
		e.ready(r, g, id)
	}
	return true
}

func (e *Engine) cancelGroup(g *group) {
	if g.cancelReq {
		return
	}
	g.cancelReq = true
	reason := e.canceledWhy(g)
	e.stopWaiting(g.openSeq) // a held group's jobs wait in the index alone: canceled below
	if g.inSched {
		for _, id := range e.sched.Cancel(g) {
			e.moveTerminal(id, jobindex.Canceled)
			e.recordOutcome(g, wire.Outcome{ID: id, State: wire.FinalCanceled, Data: []byte(reason)}, 0)
		}
		g.inSched = false
	}
	// Its jobs waiting for a slot, then its delayed ones.
	for _, st := range [...]jobindex.State{jobindex.Pending, jobindex.Delayed} {
		for _, id := range slices.Collect(e.groupJobs(g.openSeq, g.alone, st)) {
			if e.jobs[id] == nil {
				e.moveTerminal(id, jobindex.Canceled)
				e.recordOutcome(g, wire.Outcome{ID: id, State: wire.FinalCanceled, Data: []byte(reason)}, 0)
			}
		}
	}
	for _, j := range e.jobs {
		if j.g != g {
			continue
		}
		st, _ := e.idx.State(j.id)
		switch st {
		case jobindex.Running:
			e.out.Cancels = append(e.out.Cancels, j.id)
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
func (e *Engine) cancelJobs(g *group, ids []uint64) (final, unknown []uint64) {
	const reason = "job canceled"
	for _, id := range ids {
		st, ok := e.idx.State(id)
		if !ok {
			unknown = append(unknown, id)
			continue
		}
		if r := e.jobRec(id); r == nil || r.openSeq != g.openSeq {
			unknown = append(unknown, id) // another incarnation's
			continue
		}
		if st.Terminal() || st == jobindex.Failed {
			final = append(final, id) // ended (a failed job may be redriven: as a new job)
			continue
		}
		if j := e.jobs[id]; j != nil {
			if st == jobindex.Running {
				j.cancelReq = true
				e.out.Cancels = append(e.out.Cancels, id)
				continue
			}
			e.retries.drop(j)
			e.end(j, jobindex.Canceled, []byte(reason), 0)
			continue
		}
		if st == jobindex.Pending && g.inSched && e.sched.Entered(g) {
			e.sched.Remove(g, id, func(a, b uint64) bool { return a == b }) // its queue holds it
		}
		e.moveTerminal(id, jobindex.Canceled)
		e.recordOutcome(g, wire.Outcome{ID: id, State: wire.FinalCanceled, Data: []byte(reason)}, 0)
		e.sealIfDue(g)
	}
	return final, unknown
}

// recordOutcome queues a terminal outcome for the group's outcome subject. evSeq is the EVENTS
// sequence of the report behind it (kept until the outcome is stored), or 0.
func (e *Engine) recordOutcome(g *group, o wire.Outcome, evSeq uint64) {
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

func (e *Engine) checkComplete(g *group) {
	if g.complete || !g.sealed || g.terminal() != g.admitted || e.Replaying() {
		return
	}
	g.complete = true
	if g.inSched {
		e.sched.Cancel(g) // frees its slot if it still holds one; its queue is empty
		g.inSched = false
	}
	e.stopWaiting(g.openSeq)
	e.completedForDeps(g)
	e.out.summaries = append(e.out.summaries, g)
}

// forget drops a complete group whose summary is stored.
func (e *Engine) forget(g *group) {
	e.untrack(g.openSeq)
	e.redriveCompleted(g.id)
	e.forgetDeps(g.openSeq)
}

// untrack drops the incarnation opened at seq from the groups (its record and its *group), and
// its jobs, all ended, from the index.
func (e *Engine) untrack(seq uint64) {
	r, g := e.groups.table.get(seq), e.groups.live[seq]
	var id string
	var alone bool
	var admitted uint64
	switch {
	case g != nil:
		id, alone, admitted = g.id, g.alone, g.admitted
	case r != nil:
		id, alone, admitted = r.id, r.flags&recSingle != 0, e.recCounts(r).Total()
		e.groups.replies.release(r.reply) // a *group took it over otherwise
	default:
		return
	}
	if r != nil && r.priority() > 0 {
		e.groups.prioritized--
	}
	delete(e.groups.unsealed, seq)
	// A group that admitted no job was never in the index: nothing to forget there.
	var err error
	if alone {
		if admitted > 0 {
			err = e.idx.ForgetJob(seq)
		}
	} else if _, err = e.idx.Forget(e.idxName(seq)); err != nil && admitted == 0 && errors.Is(err, jobindex.ErrUnknownGroup) {
		err = nil
	}
	if err != nil {
		e.log.Error().Err(err).Str("group", id).Uint64("incarnation", seq).Msg("forgetting a complete group")
	}
	e.groups.table.remove(seq)
	delete(e.groups.live, seq)
}
