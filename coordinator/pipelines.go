package coordinator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/coordinator/internal/engine"
	"github.com/weavejobs/weave/internal/directget"
	"github.com/weavejobs/weave/internal/journal"
	"github.com/weavejobs/weave/internal/wire"
)

// releaseReq is a batch of jobs the loop released to a pool. If sent is set, the loop published
// the batch itself (see run.releaseAtOnce) and the pipeline only sees it stored.
type releaseReq struct {
	pool string
	jobs []releaseJob
	sent *sentBatch
}

// sentBatch is a work batch on its way to WORK: its jobs, and its acknowledgement or the
// publish's error.
type sentBatch struct {
	ids []uint64
	f   jetstream.PubAckFuture
	err error
}

type releaseJob struct {
	engine.ReleaseJob
	ahead []uint64 // the next jobs of its group, to read along if its payload is not cached
}

// releaser carries out releases: fetch the payloads (usually from the read-ahead cache), tell the
// loop what it learned, and publish the work batch. Several run at once. Nothing is journaled:
// a batch stays in WORK until the report covering it is stored, which is what replay relies on.
//
// A release that cannot be carried out (its jobs cannot be read, or the batch is not stored, as
// while the cluster elects a stream leader) hands its jobs to the loop again, which releases them
// again: after a pause that doubles while releases keep failing, so a missing leader does not turn
// into a busy loop of failing requests.
func (r *run) releaser(ctx context.Context) {
	pause := retryFirst
	for req := range r.releaseQ {
		failed := r.release(ctx, req)
		if len(failed) == 0 {
			pause = retryFirst
			continue
		}
		sleepCtx(ctx, pause)
		pause = min(2*pause, retryMax)
		r.notifyRequeue(failed)
	}
}

// release carries out one release and returns the jobs that go back to pending.
func (r *run) release(ctx context.Context, req releaseReq) (failed []uint64) {
	var sent []sentBatch
	if req.sent != nil {
		sent = []sentBatch{*req.sent} // the loop published it (releaseAtOnce)
	} else {
		if failed, sent = r.readAndSend(ctx, req); ctx.Err() != nil {
			return nil // stopping: the jobs are not in WORK, so the next term releases them again
		}
	}
	unstored, err := r.awaitWork(ctx, sent)
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		// Mended here: the jobs go back to pending and are released again. A node's loss fails
		// many releases at once; the outage logs it once, not each of them at error.
		r.log.Debug().Err(err).Str("pool", req.pool).Int("jobs", len(unstored)).Msg("publishing work failed; jobs go back to pending")
		r.outage.Once("publish work to pool "+req.pool, err, time.Now())
	}
	return append(failed, unstored...)
}

// readAndSend reads the release's job messages (usually from the cache), tells the loop what it
// learned and publishes the work batches. It returns the jobs whose message could not be read
// (they go back to pending) and the batches sent.
func (r *run) readAndSend(ctx context.Context, req releaseReq) (failed []uint64, sent []sentBatch) {
	reqs := make([]fetchReq, len(req.jobs))
	for i, j := range req.jobs {
		reqs[i] = fetchReq{id: j.ID, ahead: j.ahead}
	}
	fctx, cancel := context.WithTimeout(ctx, requestTimeout) // a read that a lost node never answers must not hold the release
	jobs, errs := r.payloads.fetch(fctx, reqs)
	cancel()
	if ctx.Err() != nil {
		return nil, nil
	}
	infos := make([]learned, 0, len(jobs))
	work := make([]wire.WorkJob, 0, len(jobs))
	for i, sj := range jobs {
		j := req.jobs[i]
		switch {
		case sj == nil && errors.Is(errs[i], directget.ErrNotFound):
			infos = append(infos, learned{id: j.ID, err: fmt.Errorf("job %d is missing from the %s stream", j.ID, r.names.JobsStream())})
			continue
		case sj == nil && errors.Is(errs[i], errNotAJob):
			infos = append(infos, learned{id: j.ID, err: errs[i]})
			continue
		case sj == nil:
			// The read failed (no stream leader for a moment, say): the job is still stored,
			// so it goes back to pending and is released again.
			r.log.Debug().Err(errs[i]).Uint64("job", j.ID).Msg("reading a job to release failed; it goes back to pending")
			r.outage.Once("read job to release", errs[i], time.Now())
			failed = append(failed, j.ID)
			continue
		}
		infos = append(infos, learned{id: j.ID, meta: &sj.Meta})
		work = append(work, r.workJob(req.pool, j, sj))
	}
	// The loop learns keys and limits before any worker can report on these jobs.
	r.notify(infos...)
	for len(work) > 0 {
		n := firstBatch(work, r.cfg.MaxBatchBytes)
		sent = append(sent, r.sendWork(req.pool, work[:n]))
		work = work[n:]
	}
	return failed, sent
}

// workJob is the entry in a work batch to pool of the release rj of the stored job j. The
// producer's trace context and the release's proof travel in the batch's header.
func (r *run) workJob(pool string, rj releaseJob, j *wire.StoredJob) wire.WorkJob {
	return wire.WorkJob{
		ID: j.ID, Attempt: rj.Attempt, Timeout: j.Meta.Timeout, Group: j.Meta.Group, Key: j.Meta.Key, Payload: j.Payload, Trace: j.Trace,
		Proof: r.key.Proof(pool, j.ID, rj.Attempt, rj.Rel), After: rj.After,
	}
}

// firstBatch is how many of work's jobs the first work batch holds: at most MaxBatchBytes of
// payload (counting 64 bytes of encoding per job), and at least one job.
func firstBatch(work []wire.WorkJob, maxBytes int) int {
	n, size := 0, 0
	for n < len(work) && (n == 0 || size+len(work[n].Payload)+64 <= maxBytes) {
		size += len(work[n].Payload) + 64
		n++
	}
	return n
}

// sendWork publishes work as one batch to the pool's work subject, without waiting for its
// acknowledgement (see awaitWork).
func (r *run) sendWork(pool string, work []wire.WorkJob) sentBatch {
	m := nats.NewMsg(r.names.WorkSubject(pool))
	m.Data = wire.AppendWork(nil, work)
	m.Header = wire.SetWorkAfter(wire.SetWorkProofs(wire.SetWorkTraces(m.Header, work), work), work)
	s := sentBatch{ids: make([]uint64, len(work))}
	for i, j := range work {
		s.ids[i] = j.ID
	}
	s.f, s.err = r.publishAsync(m)
	return s
}

// awaitWork waits for the batches' acknowledgements and returns the IDs of the jobs whose batch
// was not stored (with the first error), or ctx's error. A batch whose ack was lost may still be
// stored: its jobs are released twice, and the second report of the same attempt is ignored.
func (r *run) awaitWork(ctx context.Context, sent []sentBatch) (failed []uint64, err error) {
	for _, s := range sent {
		perr := s.err
		if perr == nil {
			select {
			case <-s.f.Ok():
				continue
			case perr = <-s.f.Err():
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		err = cmp.Or(err, perr)
		failed = append(failed, s.ids...)
	}
	return failed, err
}

// learned is what a release pipeline tells the loop about one job.
type learned struct {
	id      uint64
	meta    *wire.JobMeta
	err     error // the job's stored message is gone: the job fails
	requeue bool  // the release did not happen: the job goes back to pending
}

// notify hands release notices to the loop without ever blocking the pipeline.
func (r *run) notify(infos ...learned) {
	r.learnMu.Lock()
	r.learnPending = append(r.learnPending, infos...)
	r.learnMu.Unlock()
	select {
	case r.learnNotify <- struct{}{}:
	default:
	}
}

func (r *run) notifyRequeue(ids []uint64) {
	infos := make([]learned, len(ids))
	for i, id := range ids {
		infos[i] = learned{id: id, requeue: true}
	}
	r.notify(infos...)
}

// writeOp is one write to the RESULTS, EVENTS or REJECTED stream, done in order by the writer.
// It holds values only: the loop owns every *group, and the pipelines name a group by its ID and
// incarnation.
type writeOp struct {
	engine.Write                    // a group's outcomes, summary or completion, or an expiry
	journal      *journal.Record    // or a journal record
	rejections   []engine.Rejection // or messages refused
}

// completedGroup tells the loop a group's summary is stored (summarySeq > 0 when written now) and
// its job messages purged if they were to be: the incarnation opened at openSeq.
type completedGroup struct {
	openSeq    uint64
	summarySeq uint64
	evSeqs     []uint64 // the reports behind the outcomes written with the summary (see storedCh)
	at         time.Time
}

// written is what the writer published for one writeOp, handed to the acker in order.
type written struct {
	msgs    []*nats.Msg
	futures []jetstream.PubAckFuture // futures[i] answers msgs[i]; nil if the publish failed at once
	evSeqs  []uint64                 // outcomes: the reports behind them
	refused []uint64                 // rejections: JOBS messages to delete once they are recorded
	summary *writeOp                 // a group's summary, published by the acker (see there)
}

// storedSummary is a summary the acker published, whose acknowledgement the summarizer waits for.
type storedSummary struct {
	op     writeOp
	msg    *nats.Msg
	future jetstream.PubAckFuture
}

// maxOutcomesPerMsg bounds the outcomes of one outcome message; run.msgBytes bounds its
// size.
const maxOutcomesPerMsg = 256

// defaultMsgBytes is run.msgBytes when the run was built without a connection (tests):
// the server's default max payload, 1 MiB, less room for headers.
const defaultMsgBytes = 1<<20 - 64<<10

// outcomeRoom is what an outcome message holds beside its one outcome when that outcome is as
// large as an outcome may be (Engine.SetMaxOutcome): the message's own fields and a summary, whose
// group ID is at most a few hundred bytes.
const outcomeRoom = 4 << 10

// msgLimit bounds the body of a message the writer publishes (see run.msgBytes).
func (r *run) msgLimit() int {
	if r.msgBytes > 0 {
		return r.msgBytes
	}
	return defaultMsgBytes
}

// outcomesFitting returns how many of outs, from the first, go in one outcome message: at most
// maxOutcomesPerMsg, within the server's max payload (run.msgBytes), and at least one.
// Results are up to 64 KiB each by default: with a count alone, a group whose jobs ended
// together wrote a message the server refused, again and again, and the coordinator stalled.
func (r *run) outcomesFitting(outs []wire.Outcome) int {
	limit := r.msgLimit()
	size := wire.OutcomeMsgOverhead
	for i := range outs {
		if size += wire.OutcomeSize(&outs[i]); i == maxOutcomesPerMsg || i > 0 && size > limit {
			return i
		}
	}
	return len(outs)
}

// The writes behind the state (outcomes, summaries, journal records, rejections) go through
// three stages, each one goroutine, so that none waits for a round trip per write yet every
// write is stored, in order:
//
//   - the writer publishes them asynchronously in the order the loop decided them, except
//     summaries, which it hands on unpublished;
//   - the acker waits for each acknowledgement in that order, publishes again (until it is
//     stored, or the term ends) what failed, tells the loop which reports are no longer needed,
//     and publishes a summary once everything before it is stored: so a group's outcomes are
//     always stored before its summary, which readers take for the end of the group. A
//     summary's message also carries the group's last outcomes (wire.AppendLast): a single
//     job's outcome and summary are one message;
//   - the summarizer waits for each summary's acknowledgement (publishing again what failed),
//     then completes the group: purges its messages (or hands its one message to the deleter)
//     and tells the loop, with the reports behind the outcomes the summary carried.
//
// Each message carries a Nats-Msg-Id unique to the term, so publishing again a message whose
// first acknowledgement was lost stores it once.

// writer publishes what the loop hands it, in order (see above).
func (r *run) writer(ctx context.Context) {
	defer close(r.acks)
	var n uint64 // messages published, for their IDs
	publish := func(w *written, m *nats.Msg) {
		n++
		m.Header.Set(wire.HdrMsgID, strconv.FormatUint(r.epoch, 10)+"."+strconv.FormatUint(n, 10))
		f, err := r.publishAsync(m)
		if err != nil {
			f = nil // the acker publishes it again
		}
		w.msgs, w.futures = append(w.msgs, m), append(w.futures, f)
	}
	for op := range r.writeQ {
		var w written
		switch {
		case op.journal != nil:
			publish(&w, r.journalMsg(*op.journal))
		case op.rejections != nil:
			for _, rj := range op.rejections {
				publish(&w, r.rejectionMsg(rj.Subject, rj.Seq, rj.Reason))
				if strings.HasPrefix(rj.Subject, r.names.GroupSubject("")) || strings.HasPrefix(rj.Subject, r.names.JobSubject("")) {
					w.refused = append(w.refused, rj.Seq)
				}
			}
		case op.Summary != nil:
			r.fillKeys(ctx, op.Outcomes) // its group's last outcomes, if any
			w.summary = &op
		case op.Outcomes != nil:
			r.fillKeys(ctx, op.Outcomes)
			w.evSeqs = op.EvSeqs
			for outs := op.Outcomes; len(outs) > 0; {
				k := r.outcomesFitting(outs)
				publish(&w, r.outcomeMsg(op, wire.AppendOutcomes(nil, outs[:k])))
				outs = outs[k:]
			}
		case op.Retention != nil:
			r.wg.Go(func() { r.expire(ctx, *op.Retention) })
			continue
		case op.Complete:
			r.complete(ctx, op, 0)
			continue
		default:
			continue
		}
		r.acks <- w
	}
}

// acker makes sure the writer's messages are stored, in order, and publishes summaries (see
// above).
func (r *run) acker(ctx context.Context) {
	defer close(r.summaries)
	// broken is set once a write could not be stored: the term is ending, and nothing written
	// after it may be published any more, since a group's summary must never be stored without
	// every outcome before it (a replay would take the group for complete and purge its jobs).
	broken := false
	for w := range r.acks {
		if broken {
			continue // drained: the next term writes all of it again
		}
		if op := w.summary; op != nil {
			// Everything written before it is stored: the group's outcomes are.
			m := r.outcomeMsg(*op, wire.AppendLast(nil, op.Outcomes, *op.Summary))
			m.Header[wire.HdrLastSeq] = []string{strconv.FormatUint(op.LastSeq, 10)} // later messages of its ID are not its (see endReplay)
			m.Header[wire.HdrMsgID] = []string{strconv.FormatUint(r.epoch, 10) + ".s." + op.Tok + "." + strconv.FormatUint(op.OpenSeq, 10)}
			f, err := r.publishAsync(m)
			if err != nil {
				f = nil
			}
			r.summaries <- storedSummary{op: *op, msg: m, future: f}
			continue
		}
		stored := true
		for i, m := range w.msgs {
			if _, err := r.stored(ctx, m, w.futures[i]); err != nil {
				stored = false // the term is ending: what is not stored is written again by the next
			}
		}
		if !stored {
			broken = true
			continue
		}
		if len(w.evSeqs) > 0 {
			select {
			case r.storedCh <- w.evSeqs:
			case <-r.done:
			}
		}
		// Messages refused are deleted once their rejection is recorded: they can never run,
		// and would otherwise stay (and be refused again by every replay). Deleted in a later
		// term if this one ends first: replay refuses them again.
		for _, seq := range w.refused {
			r.deletes <- jobDelete{seq: seq}
		}
	}
}

// summarizer waits until each summary is stored, then completes its group (see above).
func (r *run) summarizer(ctx context.Context) {
	defer close(r.deletes) // the writer and the acker, before it in the pipeline, are done too
	for s := range r.summaries {
		ack, err := r.stored(ctx, s.msg, s.future)
		if err != nil {
			continue // the term is ending; the next writes the summary again
		}
		r.complete(ctx, s.op, ack.Sequence)
	}
}

// complete purges a complete group's job messages, if they are to be, and then tells the loop to
// forget the group: a single job's one message goes to the deleter, a group's are purged by
// purgeComplete.
func (r *run) complete(ctx context.Context, op writeOp, summarySeq uint64) {
	if op.Purge && op.Single {
		r.deletes <- jobDelete{seq: op.LastSeq, done: &completedGroup{openSeq: op.OpenSeq, summarySeq: summarySeq, evSeqs: op.EvSeqs}}
		return
	}
	if op.Purge && wire.IsPacked(op.OpenSeq) {
		// A single pack's job with a cancel stored after it: its share of the pack goes here, the
		// cancel with its subjects' purge.
		r.deletes <- jobDelete{seq: op.OpenSeq}
	}
	r.wg.Go(func() { r.purgeComplete(ctx, op, summarySeq) })
}

// publishAsync publishes m without waiting for its acknowledgement, which the future gives (nil
// when the publish failed at once).
func (r *run) publishAsync(m *nats.Msg) (jetstream.PubAckFuture, error) {
	f, err := r.pub.Publish(m)
	if err != nil {
		return nil, err // not a nil *Future in the interface: callers test the future for nil
	}
	return f, nil
}

// stored waits for the acknowledgement of m's asynchronous publish (f, nil if that failed at
// once) and, if it did not come, publishes m again until it is stored or the term ends.
func (r *run) stored(ctx context.Context, m *nats.Msg, f jetstream.PubAckFuture) (*jetstream.PubAck, error) {
	if f != nil {
		select {
		case ack := <-f.Ok(): // usually there already: acknowledgements come back in order
			return ack, nil
		default:
		}
		// The publisher times out every async publish (requestTimeout); the timer only guards
		// against a future that never resolves.
		t := time.NewTimer(requestTimeout + time.Second)
		defer t.Stop()
		select {
		case ack := <-f.Ok():
			return ack, nil
		case err := <-f.Err():
			r.log.Debug().Err(err).Str("subject", m.Subject).Msg("write not acknowledged; publishing it again")
			r.outage.Begin("write to "+m.Subject, err, time.Now())
			defer func() { r.outage.End(time.Now()) }() // once it is published again, or given up
		case <-t.C:
		}
	}
	var ack *jetstream.PubAck
	err := r.retry(ctx, "write to "+m.Subject, func(ctx context.Context) error {
		var err error
		ack, err = r.c.js.PublishMsg(ctx, m)
		return err
	})
	return ack, err
}

// fillKeys sets the keys of outcomes of jobs that never ran (canceled while pending): the
// coordinator keeps no key for pending jobs, so they are read from the jobs' stored headers.
// (Jobs released before a restart learn theirs at replay: see learnKeys.)
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
	for k, j := range r.readJobs(ctx, ids) {
		if j != nil {
			outs[at[k]].Key = j.Meta.Key
		}
	}
}

// readJobs reads jobs from their stored messages (readMsgs). out[i] answers ids[i], nil if its
// message is not there, is not a valid job message, or does not hold that job.
func (r *run) readJobs(ctx context.Context, ids []uint64) []*wire.StoredJob {
	seqs := make([]uint64, 0, len(ids))
	at := make(map[uint64]int, len(ids)) // sequence → its index in seqs
	for _, id := range ids {
		if _, ok := at[wire.JobSeq(id)]; !ok {
			at[wire.JobSeq(id)] = len(seqs)
			seqs = append(seqs, wire.JobSeq(id))
		}
	}
	msgs := r.readMsgs(ctx, seqs)
	parsed := make([][]wire.StoredJob, len(msgs))
	out := make([]*wire.StoredJob, len(ids))
	for i, id := range ids {
		k := at[wire.JobSeq(id)]
		if m := msgs[k]; m != nil && parsed[k] == nil {
			parsed[k], _ = wire.ParseStoredJobs(m.Seq, m.Header, m.Data)
		}
		out[i] = wire.JobIn(parsed[k], id)
	}
	return out
}

// readMsgs reads stored messages by sequence, trying again the reads that failed (not the
// messages that are gone) until they succeed or the term ends. out[i] answers seqs[i], nil if
// the message is not there.
func (r *run) readMsgs(ctx context.Context, seqs []uint64) []*directget.Msg {
	out := make([]*directget.Msg, len(seqs))
	todo := slices.Clone(seqs)
	at := make([]int, len(seqs))
	for i := range at {
		at[i] = i
	}
	_ = r.retry(ctx, "read messages", func(ctx context.Context) error {
		msgs, errs := r.payloads.get.GetEach(ctx, todo)
		var failed error
		nextTodo, nextAt := todo[:0], at[:0]
		for k, m := range msgs {
			switch {
			case m != nil:
				out[at[k]] = m
			case !errors.Is(errs[k], directget.ErrNotFound):
				failed = errs[k]
				nextTodo, nextAt = append(nextTodo, todo[k]), append(nextAt, at[k])
			}
		}
		todo, at = nextTodo, nextAt
		return failed
	})
	return out
}

func (r *run) outcomeMsg(op writeOp, data []byte) *nats.Msg {
	// The header map made with room for what the writer or the acker adds (Nats-Msg-Id, a
	// summary's last sequence): each single job drained makes one such message.
	m := &nats.Msg{Subject: r.names.OutcomeSubjectTo(op.Tok, op.Reply), Header: make(nats.Header, 4), Data: data}
	m.Header[wire.HdrGroupSeq] = []string{strconv.FormatUint(op.OpenSeq, 10)}
	if op.TTL {
		m.Header[jetstream.MsgTTLHeader] = []string{outcomeTTL(r.cfg.Streams.ResultRetention)}
	}
	return m
}

// outcomeTTL is the TTL of outcome messages that expire by themselves (engine.Config.OutcomesExpire):
// the retention, in whole seconds (the server's unit), at least one.
func outcomeTTL(retention time.Duration) string {
	return strconv.FormatInt(max(1, int64((retention+time.Second-1)/time.Second)), 10)
}

// purgeComplete purges a complete group's job messages (unless some failed: dead letters keep their
// payload until the retention passes) and tells the loop to forget the group. summarySeq is the
// summary's sequence in RESULTS when it was written now, 0 when it was written before a restart.
func (r *run) purgeComplete(ctx context.Context, op writeOp, summarySeq uint64) {
	if op.Purge {
		err := r.retry(ctx, "purge group "+op.Group, func(ctx context.Context) error {
			jobs, err := r.stream(ctx, r.names.JobsStream())
			if err != nil {
				return err
			}
			return purgeGroup(ctx, jobs, r.names, op.Tok, op.LastSeq)
		})
		if err != nil {
			return // the term is ending: the next purges the group
		}
	}
	select {
	case r.forgetCh <- completedGroup{openSeq: op.OpenSeq, summarySeq: summarySeq, evSeqs: op.EvSeqs, at: time.Now()}:
	case <-r.done:
	}
}

// expire deletes a retained group's outcomes, and its job messages if they were kept, once its
// retention expires.
func (r *run) expire(ctx context.Context, p engine.Purge) {
	// Not deleted in this term, they are deleted in the next (replay finds them past retention).
	_ = r.retry(ctx, "delete outcomes of "+p.Tok, func(ctx context.Context) error {
		var err error
		if p.SummarySeq > 0 {
			var res jetstream.Stream
			if res, err = r.stream(ctx, r.names.ResultsStream()); err == nil {
				err = res.Purge(ctx, jetstream.WithPurgeSubject(r.names.OutcomeSubject(p.Tok)), jetstream.WithPurgeSequence(p.SummarySeq+1))
			}
		}
		if err == nil && p.JobsSeq > 0 {
			var jobs jetstream.Stream
			if jobs, err = r.stream(ctx, r.names.JobsStream()); err == nil {
				err = purgeGroup(ctx, jobs, r.names, p.Tok, p.JobsSeq)
			}
		}
		return err
	})
	if p.Packed != 0 {
		if seq, last := r.shared.release(p.Packed); last {
			_ = r.deleteNow(ctx, seq) // or replay finds it with every job in it complete
		}
	}
}

// purgeGroup deletes a complete group's messages from the JOBS stream (jobs), up to lastSeq: a
// later incarnation of the same group ID shares the subjects and must keep its messages. One
// request: NS.*.<gtok> matches, in JOBS, the group's control and job subjects and nothing else.
func purgeGroup(ctx context.Context, jobs jetstream.Stream, names wire.Names, gtok string, lastSeq uint64) error {
	subject := names.Namespace() + ".*." + gtok
	if err := jobs.Purge(ctx, jetstream.WithPurgeSubject(subject), jetstream.WithPurgeSequence(lastSeq+1)); err != nil {
		return fmt.Errorf("weave: purge %s: %w", subject, err)
	}
	return nil
}

// stream returns a handle on one of the namespace's streams, asking the server for it (a stream
// info request) only the first time in the term: purges come once per group, and takebacks of
// lost batches delete by sequence.
func (r *run) stream(ctx context.Context, name string) (jetstream.Stream, error) {
	r.streamsMu.Lock()
	defer r.streamsMu.Unlock()
	if s := r.streams[name]; s != nil {
		return s, nil
	}
	s, err := r.c.js.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	if r.streams == nil {
		r.streams = map[string]jetstream.Stream{}
	}
	r.streams[name] = s
	return s, nil
}

// rejectionMsg is the record of a refused message for the REJECTED stream (wire.RejectionHeader).
func (r *run) rejectionMsg(subject string, seq uint64, reason string) *nats.Msg {
	return &nats.Msg{Subject: r.names.RejectSubject(), Header: nats.Header(wire.RejectionHeader(subject, seq, reason))}
}
