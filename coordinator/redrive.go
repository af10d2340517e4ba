package coordinator

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/internal/directget"
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
	completing map[string][]redriveAsk

	// Replay only, dropped when replay ends: the requests read (by sequence), the ones not yet
	// followed by their open (in stream order) and how many per group ID, and the redrive opens
	// read (open sequence → request sequence).
	replayAsks    map[uint64]redriveAsk
	replayOpen    []uint64
	replayPending map[string]int
	replayOpens   map[uint64]uint64
}

// redriveAsk is a redrive request read from JOBS.
type redriveAsk struct {
	subject string
	seq     uint64
	c       wire.GroupControl
}

// redriveOrder is an effect: carry out a redrive decision.
type redriveOrder struct {
	ask redriveAsk
	tok string
	// refuse, if set, is the refusal to record and answer: nothing is published.
	refuse *wire.ControlAnswer
	// The complete incarnations whose failed jobs run again (every one retained of the group
	// ID: a job stays failed, whichever incarnation it failed in, until a run of it succeeds):
	// their opens' JOBS sequences, the latest first, and the latest summary's RESULTS sequence.
	prevOpens   []uint64
	prevSummary uint64
	// openSeq is the new incarnation's open when it is stored already (a redrive resumed after a
	// restart: publish the jobs not stored yet, and the seal); 0 for a new decision.
	openSeq uint64
	// answer: the producer may still wait for the answer (not a resumed redrive).
	answer bool
}

// redriveEnd tells the loop that an accepted redrive was refused after all (see
// run.carryOutRedrive) before its open was published: the group is no longer starting.
type redriveEnd struct {
	group string
	req   uint64
}

// redriveAsked handles a redrive request read from JOBS at seq.
func (e *engine) redriveAsked(subject string, seq uint64, c wire.GroupControl) {
	ask := redriveAsk{subject: subject, seq: seq, c: c}
	if e.replaying() {
		// Decided at the end of replay, unless its open (the stored acceptance) follows.
		if e.rd.replayAsks == nil {
			e.rd.replayAsks, e.rd.replayOpens, e.rd.replayPending = map[uint64]redriveAsk{}, map[uint64]uint64{}, map[string]int{}
		}
		e.rd.replayAsks[seq] = ask
		e.rd.replayOpen = append(e.rd.replayOpen, seq)
		e.rd.replayPending[c.Group]++
		return
	}
	e.decideRedrive(ask)
}

// decideRedrive accepts or refuses a redrive request, from the state as it is now.
func (e *engine) decideRedrive(ask redriveAsk) {
	c := ask.c
	refuse := func(a wire.ControlAnswer) {
		e.stats.Refused++
		e.log.Info().Str("group", c.Group).Uint64("seq", ask.seq).Str("reason", a.Reason).Msg("redrive refused")
		e.out.redrives = append(e.out.redrives, redriveOrder{ask: ask, tok: wire.GroupToken(c.Group), refuse: &a, answer: true})
	}
	if req := e.rd.starting[c.Group]; req != 0 {
		refuse(wire.ControlAnswer{Code: wire.AnswerRunning, Reason: fmt.Sprintf("group %s: the redrive asked at JOBS sequence %d is starting a new incarnation", c.Group, req)})
		return
	}
	switch refusal, wait := e.judgeRedrive(c.Group, e.groups.table.latest(c.Group), math.MaxUint64); {
	case wait:
		if e.rd.completing == nil {
			e.rd.completing = map[string][]redriveAsk{}
		}
		e.rd.completing[c.Group] = append(e.rd.completing[c.Group], ask)
		return
	case refusal != nil:
		refuse(*refusal)
		return
	}
	prev := e.retention.retainedOf(c.Group, math.MaxUint64)
	opens, summary, _ := e.retention.incarnationsOf(c.Group, math.MaxUint64)
	if e.rd.starting == nil {
		e.rd.starting = map[string]uint64{}
	}
	e.rd.starting[c.Group] = ask.seq
	e.log.Info().Str("group", c.Group).Uint64("seq", ask.seq).Int("incarnations", len(opens)).Msg("redrive accepted")
	e.out.redrives = append(e.out.redrives, redriveOrder{ask: ask, tok: prev.tok, prevOpens: opens, prevSummary: summary, answer: true})
}

// judgeRedrive decides a redrive request of group ID id, no other redrive of it starting, when
// r is its latest incarnation (nil if none is tracked) and the retained incarnations opened
// before sequence before are those that count: accepted (nil, false), refused, or to wait (r is
// complete, its summary being stored: decided once it is, so that a producer whose Wait has just
// returned is not refused).
func (e *engine) judgeRedrive(id string, r *groupRec, before uint64) (refusal *wire.ControlAnswer, wait bool) {
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
	for i := len(rt.retained) - 1; i >= 0; i-- {
		if r := &rt.retained[i]; r.id == id && r.openSeq < before {
			opens = append(opens, r.openSeq)
			summary = max(summary, r.summarySeq)
			failed = failed || r.keepJobs
		}
	}
	slices.SortFunc(opens, func(a, b uint64) int { return cmp.Compare(b, a) })
	return opens, summary, failed
}

// retainedOf returns the latest retained (complete) incarnation of the group ID opened before
// sequence before, or nil.
func (rt *retention) retainedOf(id string, before uint64) *retained {
	var latest *retained
	for i := range rt.retained {
		if r := &rt.retained[i]; r.id == id && r.openSeq < before && (latest == nil || r.openSeq > latest.openSeq) {
			latest = r
		}
	}
	return latest
}

// redriveOpening is told of an open read from JOBS, before the engine applies it, and reports
// whether it must be refused: a producer's open of a group whose redrive is starting (as an open
// of a running group is), or one carrying Weave-Redrive without a coordinator's proof. An open
// carrying a proven Weave-Redrive is the acceptance of its request.
func (e *engine) redriveOpening(subject string, seq uint64, c wire.GroupControl) (refused bool) {
	if c.Redrive == 0 {
		return e.refusedWhileRedriven(subject, seq, c.Group)
	}
	if !e.key.VerifyRedrive(c.Proof, c.Group, c.Redrive) {
		e.reject(subject, seq, fmt.Sprintf("open of group %s with %s %d without a coordinator's proof", c.Group, wire.HdrRedrive, c.Redrive))
		return true
	}
	if e.rd.starting[c.Group] == c.Redrive {
		delete(e.rd.starting, c.Group)
	}
	if e.replaying() {
		if e.rd.replayOpens == nil {
			e.rd.replayAsks, e.rd.replayOpens, e.rd.replayPending = map[uint64]redriveAsk{}, map[uint64]uint64{}, map[string]int{}
		}
		e.rd.replayOpens[seq] = c.Redrive
		if i := slices.Index(e.rd.replayOpen, c.Redrive); i >= 0 {
			e.rd.replayOpen = slices.Delete(e.rd.replayOpen, i, i+1)
			e.rd.replayPending[e.rd.replayAsks[c.Redrive].c.Group]--
		}
		e.refuseRedriven(c.Group, c.Redrive) // replaystate.go
	}
	return false
}

// unprovenRedriven says why the jobs of a message for r, an incarnation a redrive opened, are not
// the coordinator's ("" if they are): only it publishes such jobs, each alone in its message with
// the proof of the failed job it runs again, so a producer cannot settle a failed job.
func (e *engine) unprovenRedriven(r *groupRec, h nats.Header, jobs []wire.StoredJob) string {
	if len(jobs) == 1 && jobs[0].Meta.RedriveOf != 0 && e.key.VerifyRedriveJob(h.Get(wire.HdrProof), r.id, r.openSeq, jobs[0].Meta.RedriveOf) {
		return ""
	}
	return "job for group " + r.id + " in an incarnation a redrive opened, without a coordinator's proof"
}

// refusedWhileRedriven rejects a producer's open or single job of group stored at seq while a
// redrive of the group is starting, and reports whether it did. Replay, which does not know
// what was starting, decides such an open at its end (see redrivenBefore).
func (e *engine) refusedWhileRedriven(subject string, seq uint64, group string) bool {
	if req := e.rd.starting[group]; req != 0 && !e.replaying() {
		e.refuseOpen(subject, seq, beingRedriven(group, req))
		return true
	}
	return false
}

// beingRedriven is why a producer's open (or single job) of a group whose redrive asked at JOBS
// sequence req is starting is refused.
func beingRedriven(group string, req uint64) string {
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
		if rd.replayAsks[seq].c.Group == group {
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
func (e *engine) redriveCompleted(id string) {
	asks := e.rd.completing[id]
	delete(e.rd.completing, id)
	for _, ask := range asks {
		e.decideRedrive(ask)
	}
}

// redriveEnded is told that an accepted request was refused before its open was published.
func (e *engine) redriveEnded(end redriveEnd) {
	e.stats.Refused++ // like a refusal decided on the loop
	if e.rd.starting[end.group] == end.req {
		delete(e.rd.starting, end.group)
	}
}

// redriveAfterReplay completes what replay read: an incarnation opened by a redrive and not
// sealed was being published when the last coordinator stopped, so its publication resumes; a
// request not followed by its open was never answered, and is decided now. Called once the
// state is rebuilt (retained incarnations included).
func (e *engine) redriveAfterReplay() {
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
			ask = redriveAsk{subject: e.names.GroupSubject(g.tok), seq: req, c: wire.GroupControl{Group: g.id, Op: wire.OpRedrive}}
		}
		o := redriveOrder{ask: ask, tok: g.tok, openSeq: openSeq}
		if ok {
			o.prevOpens, o.prevSummary, _ = e.retention.incarnationsOf(g.id, openSeq)
		}
		e.log.Info().Str("group", g.id).Uint64("incarnation", openSeq).Msg("resuming the publication of a redrive")
		e.out.redrives = append(e.out.redrives, o)
	}
	for _, seq := range open {
		e.decideRedrive(asks[seq])
	}
}

// redrivePage bounds the job messages one redrive holds at once.
const redrivePage = 256

// startRedrives carries out the engine's redrive decisions, each in its own goroutine.
func (r *run) startRedrives(ctx context.Context, orders []redriveOrder) {
	for _, o := range orders {
		r.wg.Go(func() { r.carryOutRedrive(ctx, o) })
	}
}

// optionsOf is the weight and priority of the incarnation opened at openSeq, read from its stored
// open (the messages of a group with failed jobs are kept), so a redrive keeps its group's share
// and place; 0 (the defaults) if the open cannot be read.
func (r *run) optionsOf(ctx context.Context, openSeq uint64) (weight, priority int) {
	if openSeq == 0 {
		return 0, 0
	}
	m := r.readMsgs(ctx, []uint64{openSeq})[0]
	if m == nil {
		return 0, 0
	}
	if c, err := wire.ParseGroupControl(m.Header); err == nil && c.Op == wire.OpOpen {
		return c.Weight, c.Priority
	}
	if jobs, err := wire.ParseStoredJobs(openSeq, m.Header, m.Data); err == nil && jobs[0].Meta.Single {
		return 0, jobs[0].Meta.Priority // a single job is its group's open
	}
	return 0, 0
}

// carryOutRedrive records and answers a refusal, or publishes the new incarnation. If the term
// ends first, the next coordinator finds the request undecided, or the incarnation unsealed,
// and carries it out (see redriveAfterReplay).
func (r *run) carryOutRedrive(ctx context.Context, o redriveOrder) {
	c := o.ask.c
	log := r.log.With().Str("group", c.Group).Uint64("request", o.ask.seq).Logger()
	if o.refuse != nil {
		r.refuseRedrive(ctx, o, *o.refuse, nil)
		return
	}
	refuseLate := func(code, reason string) {
		log.Warn().Str("reason", reason).Msg("redrive refused")
		// The loop learns that the request ended before its asker does: a redrive asked again
		// at once must not find this one still starting.
		r.refuseRedrive(ctx, o, wire.ControlAnswer{Code: code, Reason: reason}, func() {
			select {
			case r.redriveEnds <- redriveEnd{group: c.Group, req: o.ask.seq}:
			case <-r.done:
			}
		})
	}
	var ids []uint64
	if len(o.prevOpens) > 0 {
		var err error
		if ids, err = r.failedJobs(ctx, o.tok, o.prevOpens, o.prevSummary); err != nil {
			return // the term is ending
		}
	}
	if len(c.Jobs) > 0 {
		failed := make(map[uint64]bool, len(ids))
		for _, id := range ids {
			failed[id] = true
		}
		var missing []string
		for _, id := range c.Jobs {
			if !failed[id] {
				missing = append(missing, strconv.FormatUint(id, 10))
			}
		}
		if len(missing) > 0 && o.openSeq == 0 {
			if n := len(missing); n > 20 {
				missing = append(missing[:20], fmt.Sprintf("and %d more", n-20))
			}
			refuseLate(wire.AnswerNotFailed, fmt.Sprintf("group %s: not failed jobs of its retained incarnations (or run again since, and succeeded): %s",
				c.Group, strings.Join(missing, ", ")))
			return
		}
		ids = slices.DeleteFunc(slices.Clone(c.Jobs), func(id uint64) bool {
			keep := failed[id]
			failed[id] = false // an ID given twice runs once
			return !keep
		})
	}

	if len(ids) == 0 && o.openSeq == 0 {
		refuseLate(wire.AnswerNotFailed, fmt.Sprintf("group %s: no failed job is left to run again: each was run again and succeeded", c.Group))
		return
	}
	openSeq := o.openSeq
	if openSeq == 0 {
		present := 0
		for page := range slices.Chunk(ids, redrivePage) {
			for _, j := range r.readJobs(ctx, page) {
				if _, ok := r.redrivenJob(j, c.Group, o.tok); ok {
					present++
				}
			}
		}
		if ctx.Err() != nil {
			return
		}
		if present == 0 {
			refuseLate(wire.AnswerGone, fmt.Sprintf("group %s: the stored messages of its %d failed jobs are gone", c.Group, len(ids)))
			return
		}
		open := nats.NewMsg(r.names.GroupSubject(o.tok))
		weight, priority := r.optionsOf(ctx, o.prevOpens[0])
		open.Header = wire.GroupControl{Group: c.Group, Op: wire.OpOpen, Redrive: o.ask.seq, Weight: weight, Priority: priority,
			Proof: r.key.RedriveProof(c.Group, o.ask.seq)}.Header()
		open.Header.Set(wire.HdrMsgID, fmt.Sprintf("redrive:%d", o.ask.seq))
		ack, err := r.stored(ctx, open, nil)
		if err != nil {
			return
		}
		openSeq = ack.Sequence
		log.Info().Uint64("incarnation", openSeq).Int("jobs", present).Msg("redrive: new incarnation open")
		if o.answer {
			r.answerRedrive(c, o.ask.seq, wire.ControlAnswer{OK: true, Incarnation: openSeq, Jobs: present, Gone: len(ids) - present})
		}
	}

	stored, err := r.redrivenSince(ctx, o.tok, openSeq)
	if err != nil {
		return
	}
	count := uint64(0)
	for page := range slices.Chunk(ids, redrivePage) {
		var (
			msgs    []*nats.Msg
			futures []jetstream.PubAckFuture
		)
		for i, j := range r.readJobs(ctx, page) {
			job, ok := r.redrivenJob(j, c.Group, o.tok)
			if !ok {
				continue
			}
			count++
			if stored[page[i]] {
				continue
			}
			job.Header.Set(wire.HdrMsgID, fmt.Sprintf("redrive:%d/%d", o.ask.seq, page[i]))
			job.Header.Set(wire.HdrRedriveOf, strconv.FormatUint(page[i], 10))
			job.Header.Set(wire.HdrProof, r.key.RedriveJobProof(c.Group, openSeq, page[i]))
			f, err := r.c.js.PublishMsgAsync(job)
			if err != nil {
				f = nil // stored publishes it again
			}
			msgs, futures = append(msgs, job), append(futures, f)
		}
		for i, m := range msgs {
			if _, err := r.stored(ctx, m, futures[i]); err != nil {
				return
			}
		}
	}
	if ctx.Err() != nil {
		return
	}
	if len(o.prevOpens) == 0 {
		count = uint64(len(stored)) // the request is gone: the incarnation holds what is stored
	}
	seal := nats.NewMsg(r.names.GroupSubject(o.tok))
	seal.Header = wire.GroupControl{Group: c.Group, Op: wire.OpSeal, Count: count}.Header()
	seal.Header.Set(wire.HdrMsgID, fmt.Sprintf("redrive:%d/seal", o.ask.seq))
	if _, err := r.stored(ctx, seal, nil); err == nil {
		log.Info().Uint64("incarnation", openSeq).Uint64("jobs", count).Msg("redrive: new incarnation sealed")
	}
}

// refuseRedrive records the refusal in REJECTED, deletes the request from JOBS, calls ended (if
// not nil), and only then answers: a request still stored was accepted or never answered, so
// replay may decide it. If the term ends first, it stops there.
func (r *run) refuseRedrive(ctx context.Context, o redriveOrder, a wire.ControlAnswer, ended func()) {
	rec := r.names.RejectionMsg(o.ask.subject, o.ask.seq, a.Reason)
	rec.Header.Set(wire.HdrMsgID, fmt.Sprintf("redrive:%d/refused", o.ask.seq))
	if _, err := r.stored(ctx, rec, nil); err != nil {
		return
	}
	if err := r.deleteNow(ctx, o.ask.seq); err != nil {
		return
	}
	if ctx.Err() != nil {
		return
	}
	if ended != nil {
		ended()
	}
	if o.answer {
		r.answerRedrive(o.ask.c, o.ask.seq, a)
	}
}

func (r *run) answerRedrive(c wire.GroupControl, seq uint64, a wire.ControlAnswer) {
	if c.Reply == "" {
		return
	}
	a.Seq, a.Op, a.Group = seq, c.Op, c.Group
	r.publishAnswers([]answer{{subject: r.names.ReplySubject(c.Reply), a: a}})
}

// failedJobs reads the IDs of the jobs still failed in the incarnations opened at opens, from
// their outcomes in RESULTS (up to the latest summary, at summarySeq), in the order they were
// recorded, each once: the failed jobs that no later run (a redrive's job naming it in
// RedriveOf) made done or failed in its turn. A message that cannot be decoded is skipped
// (logged): its jobs cannot be known.
func (r *run) failedJobs(ctx context.Context, tok string, opens []uint64, summarySeq uint64) ([]uint64, error) {
	get := directget.New(r.c.nc, r.names.ResultsStream())
	defer get.Close()
	subject := r.names.OutcomeSubject(tok)
	incarnation := make(map[string]bool, len(opens))
	for _, o := range opens {
		incarnation[strconv.FormatUint(o, 10)] = true
	}
	var (
		ids     []uint64
		seen    = map[uint64]bool{}
		settled = map[uint64]bool{} // failed jobs run again since, done or failed anew
	)
	for from := uint64(1); from <= summarySeq; {
		var msgs []*directget.Msg
		err := r.retry(ctx, "read outcomes of "+tok, func(ctx context.Context) error {
			var err error
			msgs, err = get.Next(ctx, subject, from, redrivePage)
			return err
		})
		if err != nil {
			return nil, err
		}
		if len(msgs) == 0 {
			break
		}
		for _, m := range msgs {
			from = m.Seq + 1
			if m.Seq > summarySeq || !incarnation[m.Header.Get(wire.HdrGroupSeq)] {
				continue
			}
			outs, _, err := wire.DecodeOutcomeMsg(m.Data)
			if err != nil {
				r.log.Error().Err(err).Uint64("seq", m.Seq).Msg("redrive: an outcome message cannot be decoded; its failed jobs are not redriven")
				continue
			}
			for _, o := range outs {
				if o.RedriveOf != 0 && o.State != wire.FinalCanceled {
					settled[o.RedriveOf] = true
				}
				if o.State == wire.FinalFailed && !seen[o.ID] {
					seen[o.ID] = true
					ids = append(ids, o.ID)
				}
			}
		}
	}
	return slices.DeleteFunc(ids, func(id uint64) bool { return settled[id] }), nil
}

// redrivenSince returns the failed jobs' IDs (Weave-Redrive-Of) of the jobs stored in the
// incarnation opened at openSeq: those a resumed redrive does not publish again.
func (r *run) redrivenSince(ctx context.Context, tok string, openSeq uint64) (map[uint64]bool, error) {
	get := directget.New(r.c.nc, r.names.JobsStream())
	defer get.Close()
	stored := map[uint64]bool{}
	for from := openSeq + 1; ; {
		var msgs []*directget.Msg
		err := r.retry(ctx, "read redriven jobs of "+tok, func(ctx context.Context) error {
			var err error
			msgs, err = get.Next(ctx, r.names.JobSubject(tok), from, redrivePage)
			return err
		})
		if err != nil {
			return nil, err
		}
		if len(msgs) == 0 {
			return stored, nil
		}
		for _, m := range msgs {
			from = m.Seq + 1
			if id, err := strconv.ParseUint(m.Header.Get(wire.HdrRedriveOf), 10, 64); err == nil {
				stored[id] = true
			}
		}
	}
}

// redrivenJob rebuilds a failed job's message for its new incarnation: the same payload, key,
// resources, attempts and timeout, in a message of its own (a job from a pack too), whose
// Nats-Msg-Id the caller sets. It reports false when the job is not the group's (gone, or never
// admitted).
func (r *run) redrivenJob(j *wire.StoredJob, group, tok string) (*nats.Msg, bool) {
	if j == nil || j.Meta.Group != group {
		return nil, false
	}
	job := nats.NewMsg(r.names.JobSubject(tok))
	job.Header, job.Data = j.Meta.Header(), j.Payload
	return job, true
}
