package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/internal/journal"
	"github.com/weavejobs/weave/internal/wire"
)

// releaseReq is a batch of jobs the loop released to a pool.
type releaseReq struct {
	pool string
	jobs []releaseJob
}

type releaseJob struct {
	id      uint64
	attempt uint32
	gtok    string
	ahead   []uint64 // the next jobs of its group, to read along if its payload is not cached
}

// releaser carries out releases: fetch the payloads (usually from the read-ahead cache), tell the
// loop what it learned, and publish the work batch. Several run at once. Nothing is journaled:
// a batch stays in WORK until the report covering it is stored, which is what replay relies on.
func (r *run) releaser(ctx context.Context) {
	for req := range r.releaseQ {
		r.release(ctx, req)
	}
}

func (r *run) release(ctx context.Context, req releaseReq) {
	reqs := make([]fetchReq, len(req.jobs))
	for i, j := range req.jobs {
		reqs[i] = fetchReq{id: j.id, ahead: j.ahead}
	}
	msgs := r.payloads.fetch(ctx, reqs)
	if ctx.Err() != nil {
		return // stopping: the jobs are not in WORK, so the next term releases them again
	}
	infos := make([]releasedInfo, 0, len(msgs))
	work := make([]wire.WorkJob, 0, len(msgs))
	for i, m := range msgs {
		j := req.jobs[i]
		if m == nil {
			infos = append(infos, releasedInfo{id: j.id, err: fmt.Errorf("job message %d is missing from the %s stream", j.id, r.names.JobsStream())})
			continue
		}
		meta, err := wire.ParseJobMeta(m.Header)
		if err != nil {
			infos = append(infos, releasedInfo{id: j.id, err: err})
			continue
		}
		infos = append(infos, releasedInfo{id: j.id, key: meta.Key, maxAttempts: meta.MaxAttempts})
		work = append(work, wire.WorkJob{ID: j.id, Attempt: j.attempt, Timeout: meta.Timeout, Group: meta.Group, Key: meta.Key, Payload: m.Data})
	}
	// The loop learns keys and limits before any worker can report on these jobs.
	r.notify(infos...)
	if err := r.publishWork(ctx, req.pool, work); err != nil && ctx.Err() == nil {
		r.log.Error().Err(err).Str("pool", req.pool).Msg("publishing work failed; jobs go back to pending")
		failed := make([]uint64, len(work))
		for i, w := range work {
			failed[i] = w.ID
		}
		r.notifyRequeue(failed)
	}
}

// publishWork publishes jobs as batches of at most MaxBatchBytes and waits for the acks.
func (r *run) publishWork(ctx context.Context, pool string, work []wire.WorkJob) error {
	var futures []jetstream.PubAckFuture
	for len(work) > 0 {
		n, size := 0, 0
		for n < len(work) && (n == 0 || size+len(work[n].Payload)+64 <= r.cfg.MaxBatchBytes) {
			size += len(work[n].Payload) + 64
			n++
		}
		m := nats.NewMsg(r.names.WorkSubject(pool))
		m.Data = wire.AppendWork(nil, work[:n])
		f, err := r.c.js.PublishMsgAsync(m)
		if err != nil {
			return err
		}
		futures = append(futures, f)
		work = work[n:]
	}
	return waitAcks(ctx, futures)
}

func waitAcks(ctx context.Context, futures []jetstream.PubAckFuture) error {
	var errs []error
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			errs = append(errs, err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return errors.Join(errs...)
}

// notify hands release notices to the loop without ever blocking the pipeline.
func (r *run) notify(infos ...releasedInfo) {
	r.relMu.Lock()
	r.relPending = append(r.relPending, infos...)
	r.relMu.Unlock()
	select {
	case r.relNotify <- struct{}{}:
	default:
	}
}

func (r *run) notifyRequeue(ids []uint64) {
	infos := make([]releasedInfo, len(ids))
	for i, id := range ids {
		infos[i] = releasedInfo{id: id, requeue: true}
	}
	r.notify(infos...)
}

// writeOp is one write to the RESULTS or EVENTS stream, done in order by the writer.
type writeOp struct {
	g        *group
	gtok     string
	openSeq  uint64
	outcomes []wire.Outcome
	summary  *wire.GroupSummary
	purge    bool
	lastSeq  uint64 // purge only up to here: a later incarnation of the group ID shares its subjects
	journal  *journal.Record

	evSeqs    []uint64 // with outcomes: the EVENTS sequence of the report behind each, or 0
	retention *purge   // a finished group past its retention
}

// finishedGroup tells the loop a group's summary is stored (summarySeq > 0 when written now) and
// its job messages purged if they were to be.
type finishedGroup struct {
	g          *group
	summarySeq uint64
	at         time.Time
}

// pendingAcks are outcome writes whose acknowledgement the acker waits for, to tell the loop
// which reports are no longer needed.
type pendingAcks struct {
	futures []jetstream.PubAckFuture
	evSeqs  []uint64 // the reports behind the outcomes written
	summary *writeOp // set for a group's summary (the only future)
}

// maxOutcomesPerMsg bounds one outcome message (results are size-limited by workers).
const maxOutcomesPerMsg = 256

// writer appends outcomes, summaries and retry records in the order the loop decided them, and
// hands every outcome and summary write to the acker, in the same order.
func (r *run) writer(ctx context.Context) {
	defer close(r.acks)
	for op := range r.writeQ {
		switch {
		case op.journal != nil:
			if _, err := r.c.js.PublishMsgAsync(r.journalMsg(*op.journal)); err != nil {
				r.log.Error().Err(err).Msg("journal write failed")
			}
		case op.outcomes != nil:
			r.fillKeys(ctx, op.outcomes)
			pa := pendingAcks{evSeqs: op.evSeqs}
			for outs := op.outcomes; len(outs) > 0; {
				n := min(len(outs), maxOutcomesPerMsg)
				f, err := r.c.js.PublishMsgAsync(r.outcomeMsg(op, wire.AppendOutcomes(nil, outs[:n])))
				if err != nil {
					// Their reports stay needed, so a restart writes them again.
					r.log.Error().Err(err).Str("group", op.g.id).Msg("writing outcomes failed")
					pa.evSeqs = nil
				} else {
					pa.futures = append(pa.futures, f)
				}
				outs = outs[n:]
			}
			r.acks <- pa
		case op.summary != nil:
			f, err := r.c.js.PublishMsgAsync(r.outcomeMsg(op, wire.AppendSummary(nil, *op.summary)))
			if err != nil {
				r.log.Error().Err(err).Str("group", op.g.id).Msg("writing summary failed; will retry after restart")
				continue
			}
			r.acks <- pendingAcks{futures: []jetstream.PubAckFuture{f}, summary: &op}
		case op.retention != nil:
			r.wg.Go(func() { r.expire(ctx, *op.retention) })
		case op.g != nil:
			r.wg.Go(func() { r.finish(ctx, op, 0) })
		}
	}
}

// fillKeys sets the keys of outcomes of jobs that never ran (canceled while pending): the
// coordinator keeps no key for pending jobs, so they are read from the jobs' stored headers.
func (r *run) fillKeys(ctx context.Context, outs []wire.Outcome) {
	var ids []uint64
	var at []int
	for i, o := range outs {
		if o.Key == "" && o.Attempts == 0 {
			ids, at = append(ids, o.ID), append(at, i)
		}
	}
	if len(ids) == 0 {
		return
	}
	msgs, _ := r.payloads.get.Get(ctx, ids)
	for k, m := range msgs {
		if m != nil {
			outs[at[k]].Key = m.Header.Get(wire.HdrKey)
		}
	}
}

// acker waits for the acknowledgements of outcome and summary writes, in the order they were
// written: once a summary is acknowledged, every outcome of its group written before it is too.
func (r *run) acker(ctx context.Context) {
	for pa := range r.acks {
		// At shutdown, give writes on their way a moment rather than abandoning them.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		acks, err := collectAcks(wctx, pa.futures)
		cancel()
		if err != nil {
			r.log.Error().Err(err).Msg("outcomes not stored; they are written again after a restart")
			continue
		}
		if len(pa.evSeqs) > 0 {
			select {
			case r.storedCh <- pa.evSeqs:
			case <-r.done:
			}
		}
		if pa.summary != nil {
			op, seq := *pa.summary, acks[len(acks)-1].Sequence
			r.wg.Go(func() { r.finish(ctx, op, seq) })
		}
	}
}

// collectAcks waits for every future and returns their acknowledgements.
func collectAcks(ctx context.Context, futures []jetstream.PubAckFuture) ([]*jetstream.PubAck, error) {
	acks := make([]*jetstream.PubAck, 0, len(futures))
	for _, f := range futures {
		select {
		case a := <-f.Ok():
			acks = append(acks, a)
		case err := <-f.Err():
			return nil, err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return acks, nil
}

func (r *run) outcomeMsg(op writeOp, data []byte) *nats.Msg {
	m := nats.NewMsg(r.names.OutcomeSubject(op.gtok))
	m.Header.Set(wire.HdrGroupSeq, strconv.FormatUint(op.openSeq, 10))
	m.Data = data
	return m
}

// finish purges a finished group's job messages (unless some failed: dead letters keep their
// payload until the retention passes) and tells the loop to forget the group. summarySeq is the
// summary's sequence in RESULTS when it was written now, 0 when it was written before a restart.
func (r *run) finish(ctx context.Context, op writeOp, summarySeq uint64) {
	if op.purge {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := purgeGroup(pctx, r.c.js, r.names, op.gtok, op.lastSeq); err != nil {
			r.log.Error().Err(err).Str("group", op.g.id).Msg("purging a finished group failed")
		}
	}
	select {
	case r.forgetCh <- finishedGroup{g: op.g, summarySeq: summarySeq, at: time.Now()}:
	case <-r.done:
	}
}

// expire deletes a finished group's outcomes, and its job messages if they were kept, once its
// retention has passed.
func (r *run) expire(ctx context.Context, p purge) {
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	res, err := r.c.js.Stream(pctx, r.names.ResultsStream())
	if err == nil {
		err = res.Purge(pctx, jetstream.WithPurgeSubject(r.names.OutcomeSubject(p.tok)), jetstream.WithPurgeSequence(p.summarySeq+1))
	}
	if err == nil && p.jobsSeq > 0 {
		err = purgeGroup(pctx, r.c.js, r.names, p.tok, p.jobsSeq)
	}
	if err != nil {
		r.log.Error().Err(err).Str("group_token", p.tok).Msg("deleting a group's outcomes after its retention failed")
	}
}

// purgeGroup deletes a finished group's messages from the JOBS stream, up to lastSeq: a later
// incarnation of the same group ID shares the subjects and must keep its messages.
func purgeGroup(ctx context.Context, js jetstream.JetStream, names wire.Names, gtok string, lastSeq uint64) error {
	s, err := js.Stream(ctx, names.JobsStream())
	if err != nil {
		return err
	}
	for _, subject := range []string{names.JobSubject(gtok), names.GroupSubject(gtok)} {
		if err := s.Purge(ctx, jetstream.WithPurgeSubject(subject), jetstream.WithPurgeSequence(lastSeq+1)); err != nil {
			return fmt.Errorf("weave: purge %s: %w", subject, err)
		}
	}
	return nil
}
