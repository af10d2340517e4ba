package coordinator

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/coordinator/internal/engine"
	"github.com/weavejobs/weave/internal/directget"
	"github.com/weavejobs/weave/internal/wire"
)

// The run's side of a redrive, whose decisions the engine makes: reading the failed
// jobs of the retained incarnations and publishing the new incarnation, or recording and
// answering a refusal.

// redrivePage bounds the job messages one redrive holds at once.
const redrivePage = 256

// startRedrives carries out the engine's redrive decisions, each in its own goroutine.
func (r *run) startRedrives(ctx context.Context, orders []engine.RedriveOrder) {
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
	if wire.IsPacked(openSeq) {
		if j := r.readJobs(ctx, []uint64{openSeq})[0]; j != nil && j.Meta.Single {
			return 0, j.Meta.Priority // a single pack's job is its group's open
		}
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
func (r *run) carryOutRedrive(ctx context.Context, o engine.RedriveOrder) {
	c := o.Ask.Control
	log := r.log.With().Str("group", c.Group).Uint64("request", o.Ask.Seq).Logger()
	if o.Refuse != nil {
		r.refuseRedrive(ctx, o, *o.Refuse, nil)
		return
	}
	refuseLate := func(code, reason string) {
		log.Warn().Str("reason", reason).Msg("redrive refused")
		// The loop learns that the request ended before its asker does: a redrive asked again
		// at once must not find this one still starting.
		r.refuseRedrive(ctx, o, wire.ControlAnswer{Code: code, Reason: reason}, func() {
			select {
			case r.redriveEnds <- engine.RedriveEnd{Group: c.Group, Req: o.Ask.Seq}:
			case <-r.done:
			}
		})
	}
	var ids []uint64
	if len(o.PrevOpens) > 0 {
		var err error
		if ids, err = r.failedJobs(ctx, o.Tok, o.PrevOpens, o.PrevSummary); err != nil {
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
		if len(missing) > 0 && o.OpenSeq == 0 {
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

	if len(ids) == 0 && o.OpenSeq == 0 {
		refuseLate(wire.AnswerNotFailed, fmt.Sprintf("group %s: no failed job is left to run again: each was run again and succeeded", c.Group))
		return
	}
	openSeq := o.OpenSeq
	if openSeq == 0 {
		present := 0
		for page := range slices.Chunk(ids, redrivePage) {
			for _, j := range r.readJobs(ctx, page) {
				if _, ok := r.redrivenJob(j, c.Group, o.Tok); ok {
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
		open := nats.NewMsg(r.names.GroupSubject(o.Tok))
		weight, priority := r.optionsOf(ctx, o.PrevOpens[0])
		open.Header = wire.GroupControl{Group: c.Group, Op: wire.OpOpen, Redrive: o.Ask.Seq, Weight: weight, Priority: priority,
			Proof: r.key.RedriveProof(c.Group, o.Ask.Seq)}.Header()
		open.Header.Set(wire.HdrMsgID, fmt.Sprintf("redrive:%d", o.Ask.Seq))
		ack, err := r.stored(ctx, open, nil)
		if err != nil {
			return
		}
		openSeq = ack.Sequence
		log.Info().Uint64("incarnation", openSeq).Int("jobs", present).Msg("redrive: new incarnation open")
		if o.Answer {
			r.answerRedrive(c, o.Ask.Seq, wire.ControlAnswer{OK: true, Incarnation: openSeq, Jobs: present, Gone: len(ids) - present})
		}
	}

	stored, err := r.redrivenSince(ctx, o.Tok, openSeq)
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
			job, ok := r.redrivenJob(j, c.Group, o.Tok)
			if !ok {
				continue
			}
			count++
			if stored[page[i]] {
				continue
			}
			job.Header.Set(wire.HdrMsgID, fmt.Sprintf("redrive:%d/%d", o.Ask.Seq, page[i]))
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
	if len(o.PrevOpens) == 0 {
		count = uint64(len(stored)) // the request is gone: the incarnation holds what is stored
	}
	seal := nats.NewMsg(r.names.GroupSubject(o.Tok))
	seal.Header = wire.GroupControl{Group: c.Group, Op: wire.OpSeal, Count: count}.Header()
	seal.Header.Set(wire.HdrMsgID, fmt.Sprintf("redrive:%d/seal", o.Ask.Seq))
	if _, err := r.stored(ctx, seal, nil); err == nil {
		log.Info().Uint64("incarnation", openSeq).Uint64("jobs", count).Msg("redrive: new incarnation sealed")
	}
}

// refuseRedrive records the refusal in REJECTED, deletes the request from JOBS, calls ended (if
// not nil), and only then answers: a request still stored was accepted or never answered, so
// replay may decide it. If the term ends first, it stops there.
func (r *run) refuseRedrive(ctx context.Context, o engine.RedriveOrder, a wire.ControlAnswer, ended func()) {
	rec := r.rejectionMsg(o.Ask.Subject, o.Ask.Seq, a.Reason)
	rec.Header.Set(wire.HdrMsgID, fmt.Sprintf("redrive:%d/refused", o.Ask.Seq))
	if _, err := r.stored(ctx, rec, nil); err != nil {
		return
	}
	if err := r.deleteNow(ctx, o.Ask.Seq); err != nil {
		return
	}
	if ctx.Err() != nil {
		return
	}
	if ended != nil {
		ended()
	}
	if o.Answer {
		r.answerRedrive(o.Ask.Control, o.Ask.Seq, a)
	}
}

func (r *run) answerRedrive(c wire.GroupControl, seq uint64, a wire.ControlAnswer) {
	if c.Reply == "" {
		return
	}
	a.Seq, a.Op, a.Group = seq, c.Op, c.Group
	r.publishAnswers([]engine.Answer{{Subject: r.names.ReplySubject(c.Reply), Reply: a}})
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
	meta := j.Meta
	if meta.Single {
		// A single job runs again as a job of its group's new incarnation: the redrive's open
		// is its group's open now (with its priority), its outcomes go to the group's subject.
		meta.Single, meta.Reply, meta.After, meta.Priority = false, "", nil, 0
	}
	job := nats.NewMsg(r.names.JobSubject(tok))
	job.Header, job.Data = meta.Header(), j.Payload
	return job, true
}
