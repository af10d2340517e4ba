package engine

import (
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/weavejobs/weave/internal/wire"
)

// Redrive: a producer asks (Weave-Op: redrive on the group's control subject, stored in JOBS at
// sequence R), the engine decides on the loop from its own state, and the run carries the
// decision out off the loop: it records and answers a refusal, or publishes the new incarnation
// (an open carrying Weave-Redrive: R, the failed jobs rebuilt from their stored messages, a seal)
// and answers once the open is stored. The open is the stored record of the acceptance, so replay
// rebuilds the decision from JOBS (see ARCHITECTURE.md, "Dead letters and redrive").

// redriveState is the engine's part for redrive requests. The loop owns it, like the engine.
type redriveState struct {
	// starting holds, by group ID, the JOBS sequence of the accepted request whose open has not
	// been read from the feed yet: meanwhile the group counts as running.
	starting map[string]uint64
	// completing holds, by group ID, the requests that found the latest incarnation complete but
	// its summary not yet stored: decided once it is (redriveCompleted), so a producer whose Wait
	// has just returned is not refused.
	completing map[string][]RedriveAsk

	// Replay only, dropped when replay ends: the requests read (by sequence), the ones not yet
	// followed by their open (in stream order) and how many per group ID, and the redrive opens
	// read (open sequence → request sequence).
	replayAsks    map[uint64]RedriveAsk
	replayOpen    []uint64
	replayPending map[string]int
	replayOpens   map[uint64]uint64
}

// RedriveAsk is a redrive request read from JOBS.
type RedriveAsk struct {
	Subject string
	Seq     uint64
	Control wire.GroupControl
}

// RedriveOrder is an effect: carry out a redrive decision.
type RedriveOrder struct {
	Ask RedriveAsk
	Tok string
	// Refuse, if set, is the refusal to record and answer: nothing is published.
	Refuse *wire.ControlAnswer
	// The complete incarnations whose failed jobs run again (every one retained of the group
	// ID: a job stays failed, whichever incarnation it failed in, until a run of it succeeds):
	// their opens' JOBS sequences, the latest first, and the latest summary's RESULTS sequence.
	PrevOpens   []uint64
	PrevSummary uint64
	// OpenSeq is the new incarnation's open when it is stored already (a redrive resumed after a
	// restart: publish the jobs not stored yet, and the seal); 0 for a new decision.
	OpenSeq uint64
	// Answer: the producer may still wait for the answer (not a resumed redrive).
	Answer bool
}

// RedriveEnd tells the loop that an accepted redrive was refused after all (see
// run.carryOutRedrive) before its open was published: the group is no longer starting.
type RedriveEnd struct {
	Group string
	Req   uint64
}

// redriveAsked handles a redrive request read from JOBS at seq.
func (e *Engine) redriveAsked(subject string, seq uint64, c wire.GroupControl) {
	ask := RedriveAsk{Subject: subject, Seq: seq, Control: c}
	if e.Replaying() {
		// Decided at the end of replay, unless its open (the stored acceptance) follows.
		if e.rd.replayAsks == nil {
			e.rd.replayAsks, e.rd.replayOpens, e.rd.replayPending = map[uint64]RedriveAsk{}, map[uint64]uint64{}, map[string]int{}
		}
		e.rd.replayAsks[seq] = ask
		e.rd.replayOpen = append(e.rd.replayOpen, seq)
		e.rd.replayPending[c.Group]++
		return
	}
	e.decideRedrive(ask)
}

// decideRedrive accepts or refuses a redrive request, from the state as it is now.
func (e *Engine) decideRedrive(ask RedriveAsk) {
	c := ask.Control
	refuse := func(a wire.ControlAnswer) {
		e.stats.Refused++
		e.log.Info().Str("group", c.Group).Uint64("seq", ask.Seq).Str("reason", a.Reason).Msg("redrive refused")
		e.out.Redrives = append(e.out.Redrives, RedriveOrder{Ask: ask, Tok: wire.GroupToken(c.Group), Refuse: &a, Answer: true})
	}
	if req := e.rd.starting[c.Group]; req != 0 {
		refuse(wire.ControlAnswer{Code: wire.AnswerRunning, Reason: fmt.Sprintf("group %s: the redrive asked at JOBS sequence %d is starting a new incarnation", c.Group, req)})
		return
	}
	switch refusal, wait := e.judgeRedrive(c.Group, e.groups.table.latest(c.Group), math.MaxUint64); {
	case wait:
		if e.rd.completing == nil {
			e.rd.completing = map[string][]RedriveAsk{}
		}
		e.rd.completing[c.Group] = append(e.rd.completing[c.Group], ask)
		return
	case refusal != nil:
		refuse(*refusal)
		return
	}
	opens, summary, _ := e.retention.incarnationsOf(c.Group, math.MaxUint64)
	if e.rd.starting == nil {
		e.rd.starting = map[string]uint64{}
	}
	e.rd.starting[c.Group] = ask.Seq
	e.log.Info().Str("group", c.Group).Uint64("seq", ask.Seq).Int("incarnations", len(opens)).Msg("redrive accepted")
	e.out.Redrives = append(e.out.Redrives, RedriveOrder{Ask: ask, Tok: wire.GroupToken(c.Group), PrevOpens: opens, PrevSummary: summary, Answer: true})
}

// judgeRedrive decides a redrive request of group ID id, no other redrive of it starting, when
// r is its latest incarnation (nil if none is tracked) and the retained incarnations opened
// before sequence before are those that count: accepted (nil, false), refused, or to wait (r is
// complete, its summary being stored: decided once it is, so that a producer whose Wait has just
// returned is not refused).
func (e *Engine) judgeRedrive(id string, r *groupRec, before uint64) (refusal *wire.ControlAnswer, wait bool) {
	prev := e.retention.retainedOf(id, before)
	switch {
	case r != nil && e.complete(r) && (prev == nil || prev.openSeq != r.openSeq):
		return nil, true
	case r != nil && !e.complete(r):
		// Open, or sealed and running.
		return &wire.ControlAnswer{Code: wire.AnswerRunning, Reason: fmt.Sprintf("group %s: its incarnation opened at JOBS sequence %d is not complete", id, r.openSeq), Incarnation: r.openSeq}, false
	case prev == nil:
		return &wire.ControlAnswer{Code: wire.AnswerNotFailed, Reason: "group " + id + ": no complete incarnation is retained (an unknown group, or one whose retention has passed)"}, false
	}
	if opens, _, failed := e.retention.incarnationsOf(id, before); !failed {
		return &wire.ControlAnswer{Code: wire.AnswerNotFailed, Reason: fmt.Sprintf("group %s: none of its %d retained incarnations has a failed job", id, len(opens))}, false
	}
	return nil, false
}

// incarnationsOf lists the retained (complete) incarnations of the group ID opened before
// sequence before, the latest first, with the latest summary's RESULTS sequence, and reports
// whether some of them had failed jobs.
func (rt *retention) incarnationsOf(id string, before uint64) (opens []uint64, summary uint64, failed bool) {
	for r := range rt.ofID(id) {
		if arrivedBefore(r.openSeq, before) {
			opens = append(opens, r.openSeq)
			summary = max(summary, r.summarySeq)
			failed = failed || r.keepJobs
		}
	}
	slices.SortFunc(opens, func(a, b uint64) int { return cmpSeq(b, a) })
	return opens, summary, failed
}

// retainedOf returns the latest retained (complete) incarnation of the group ID opened before
// sequence before, or nil.
func (rt *retention) retainedOf(id string, before uint64) *retained {
	var latest *retained
	for r := range rt.ofID(id) {
		if arrivedBefore(r.openSeq, before) && (latest == nil || arrivedBefore(latest.openSeq, r.openSeq)) {
			latest = r
		}
	}
	return latest
}

// redriveOpening is told of an open read from JOBS, before the engine applies it, and reports
// whether it must be refused: a producer's open of a group whose redrive is starting (as an open
// of a running group is), or one carrying Weave-Redrive without a coordinator's proof. An open
// carrying a proven Weave-Redrive is the acceptance of its request.
func (e *Engine) redriveOpening(subject string, seq uint64, c wire.GroupControl) (refused bool) {
	if c.Redrive == 0 {
		return e.refusedWhileRedriven(subject, seq, c.Group)
	}
	if !e.key.VerifyRedrive(c.Proof, c.Group, c.Redrive) {
		e.Reject(subject, seq, fmt.Sprintf("open of group %s with %s %d without a coordinator's proof", c.Group, wire.HdrRedrive, c.Redrive))
		return true
	}
	if e.rd.starting[c.Group] == c.Redrive {
		delete(e.rd.starting, c.Group)
	}
	if e.Replaying() {
		if e.rd.replayOpens == nil {
			e.rd.replayAsks, e.rd.replayOpens, e.rd.replayPending = map[uint64]RedriveAsk{}, map[uint64]uint64{}, map[string]int{}
		}
		e.rd.replayOpens[seq] = c.Redrive
		if i := slices.Index(e.rd.replayOpen, c.Redrive); i >= 0 {
			e.rd.replayOpen = slices.Delete(e.rd.replayOpen, i, i+1)
			e.rd.replayPending[e.rd.replayAsks[c.Redrive].Control.Group]--
		}
		e.refuseRedriven(c.Group, c.Redrive)
	}
	return false
}

// unprovenRedriven says why the jobs of a message for r, an incarnation a redrive opened, are not
// the coordinator's ("" if they are): only it publishes such jobs, each alone in its message with
// the proof of the failed job it runs again, so a producer cannot settle a failed job.
func (e *Engine) unprovenRedriven(r *groupRec, h map[string][]string, jobs []wire.StoredJob) string {
	if len(jobs) == 1 && jobs[0].Meta.RedriveOf != 0 && e.key.VerifyRedriveJob(wire.Header(h).Get(wire.HdrProof), r.id, r.openSeq, jobs[0].Meta.RedriveOf) {
		return ""
	}
	return "job for group " + r.id + " in an incarnation a redrive opened, without a coordinator's proof"
}

// refusedWhileRedriven rejects a producer's open or single job of group stored at seq while a
// redrive of the group is starting, and reports whether it did. Replay, which does not know
// what was starting, decides such an open at its end (see redrivenBefore).
func (e *Engine) refusedWhileRedriven(subject string, seq uint64, group string) bool {
	if req := e.rd.starting[group]; req != 0 && !e.Replaying() {
		e.refuseOpen(subject, seq, BeingRedriven(group, req))
		return true
	}
	return false
}

// BeingRedriven is why a producer's open (or single job) of a group whose redrive asked at JOBS
// sequence req is starting is refused.
func BeingRedriven(group string, req uint64) string {
	return fmt.Sprintf("group %s is being redriven (request at JOBS sequence %d); publish it again once that incarnation is complete", group, req)
}

// pendingRedrives returns, during replay, the redrive requests of group read and not followed
// by their open yet, in stream order: one of them may have been starting when an open read now
// came live.
func (rd *redriveState) pendingRedrives(group string) []uint64 {
	if rd.replayPending[group] == 0 {
		return nil // checked for every open replay reads: most have none
	}
	var reqs []uint64
	for _, seq := range rd.replayOpen {
		if rd.replayAsks[seq].Control.Group == group {
			reqs = append(reqs, seq)
		}
	}
	return reqs
}

// redriveOpened reports, during replay, whether the open of the redrive asked at req was read:
// the request was accepted.
func (rd *redriveState) redriveOpened(req uint64) bool {
	for _, r := range rd.replayOpens {
		if r == req {
			return true
		}
	}
	return false
}

// redriveCompleted is told that a complete incarnation of the group ID is forgotten: its
// summary is stored and it is retained. The requests that waited for it are decided.
func (e *Engine) redriveCompleted(id string) {
	asks := e.rd.completing[id]
	delete(e.rd.completing, id)
	for _, ask := range asks {
		e.decideRedrive(ask)
	}
}

// RedriveEnded is told that an accepted request was refused before its open was published.
func (e *Engine) RedriveEnded(end RedriveEnd) {
	e.stats.Refused++ // like a refusal decided on the loop
	if e.rd.starting[end.Group] == end.Req {
		delete(e.rd.starting, end.Group)
	}
}

// redriveAfterReplay completes what replay read: an incarnation opened by a redrive and not
// sealed was being published when the last coordinator stopped, so its publication resumes; a
// request not followed by its open was never answered, and is decided now. Called once the
// state is rebuilt (retained incarnations included).
func (e *Engine) redriveAfterReplay() {
	asks, opens, open := e.rd.replayAsks, e.rd.replayOpens, e.rd.replayOpen
	e.rd.replayAsks, e.rd.replayOpens, e.rd.replayOpen, e.rd.replayPending = nil, nil, nil, nil
	for _, openSeq := range slices.Sorted(maps.Keys(opens)) {
		r := e.groups.table.get(openSeq)
		if r == nil || e.sealed(r) {
			continue
		}
		g := e.live(r)
		req := opens[openSeq]
		ask, ok := asks[req]
		if !ok {
			// The request is no longer stored: only what is stored can be sealed.
			ask = RedriveAsk{Subject: e.names.GroupSubject(g.tok), Seq: req, Control: wire.GroupControl{Group: g.id, Op: wire.OpRedrive}}
		}
		o := RedriveOrder{Ask: ask, Tok: g.tok, OpenSeq: openSeq}
		if ok {
			o.PrevOpens, o.PrevSummary, _ = e.retention.incarnationsOf(g.id, openSeq)
		}
		e.log.Info().Str("group", g.id).Uint64("incarnation", openSeq).Msg("resuming the publication of a redrive")
		e.out.Redrives = append(e.out.Redrives, o)
	}
	for _, seq := range open {
		e.decideRedrive(asks[seq])
	}
}
