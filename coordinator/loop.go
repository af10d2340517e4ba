package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weavejobs/weave/coordinator/internal/engine"
	"github.com/weavejobs/weave/internal/journal"
	"github.com/weavejobs/weave/internal/wire"
)

// loop is the coordinator's single owner of state.
func (r *run) loop(ctx context.Context) error {
	defer r.shutdown()
	expiry := time.NewTicker(250 * time.Millisecond)
	defer expiry.Stop()
	trim := time.NewTicker(r.cfg.TrimInterval)
	defer trim.Stop()
	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	r.observe() // the alarms' first sample: the counts at takeover
	r.step(ctx)
	for {
		r.armRetry(retry)
		select {
		case <-ctx.Done():
			return nil
		case m := <-r.feedCh:
			r.applyFeed(m)
		case m := <-r.eventsCh:
			r.drainLearned()
			r.applyEvent(m)
		case hb := <-r.hbCh:
			r.heartbeat(hb)
		case m := <-r.limitsCh:
			r.applyLimit(m)
		case <-r.learnNotify:
			r.drainLearned()
		case f := <-r.forgetCh:
			r.e.GroupStored(f.openSeq, f.summarySeq, f.evSeqs, f.at)
		case seqs := <-r.storedCh:
			r.e.OutcomesStored(seqs)
		case <-trim.C:
			r.e.ExpireRetained(r.cfg.now())
			r.trimEvents(ctx)
		case end := <-r.redriveEnds:
			r.e.RedriveEnded(end)
		case rj := <-r.schedReject:
			r.e.Reject(rj.Subject, rj.Seq, rj.Reason)
		case low := <-r.trimmedCh:
			r.trimming = false
			if low > 0 {
				r.trimmedTo = low - 1
			}
		case reply := <-r.statusCh:
			st := r.e.Status()
			st.Alarms = r.alarms.active()
			reply <- st
		case q := <-r.insp.ch:
			q.reply <- r.e.Inspect(q.req)
		case <-retry.C:
			r.e.Tick(r.cfg.now())
		case <-expiry.C:
			r.e.Tick(r.cfg.now())
			r.reconcileRescues(ctx)
			r.reconcileLost(ctx)
			r.observe()
		}
		r.drainInputs()
		r.step(ctx)
	}
}

// drainInputs applies whatever else is already waiting, so one release decision covers a burst.
func (r *run) drainInputs() {
	for range 1024 {
		select {
		case m := <-r.feedCh:
			r.applyFeed(m)
		case m := <-r.eventsCh:
			r.drainLearned()
			r.applyEvent(m)
		case hb := <-r.hbCh:
			r.heartbeat(hb)
		case <-r.learnNotify:
			r.drainLearned()
		default:
			return
		}
	}
}

func (r *run) applyFeed(m streamMsg) {
	s, at := storedAt(m)
	if !r.jobs.fresh(m, s) {
		return
	}
	r.jobsFed.Store(s)
	r.shared.hold(s, m.Headers())
	if jobs, ahead := r.e.Feed(m.Subject(), s, m.Headers(), m.Data(), at); len(jobs) > 0 {
		r.payloads.add(jobs, ahead)
	}
}

func (r *run) applyEvent(m streamMsg) {
	s := seq(m)
	if !r.events.fresh(m, s) {
		return
	}
	defer r.e.NoteEvent(s)
	subj := m.Subject()
	switch {
	case subj == r.names.JournalSubject():
		rec, err := journal.Decode(m.Data())
		if err != nil {
			r.log.Error().Err(err).Uint64("seq", s).Msg("bad journal record")
			return
		}
		r.e.JournalRecord(rec)
	default:
		r.applyReports(subj, s, m.Headers(), m.Data())
	}
}

// drainLearned applies every pending release notice. Called before applying events: a job's
// release notice is sent before its batch is published, so it is always applied before a report
// about the job.
func (r *run) drainLearned() {
	r.learnMu.Lock()
	infos := r.learnPending
	r.learnPending = nil
	r.learnMu.Unlock()
	for _, info := range infos {
		switch {
		case info.requeue:
			r.e.ReleaseFailed(info.id)
		case info.err != nil:
			r.e.Vanished(info.id, info.err.Error())
		default:
			r.e.Learn(info.id, info.meta)
		}
	}
}

func (r *run) armRetry(t *time.Timer) {
	due := r.e.NextDue(r.cfg.now())
	if due.IsZero() {
		t.Reset(time.Hour)
		return
	}
	t.Reset(max(due.Sub(r.cfg.now()), 0))
}

// step makes release decisions and carries out the engine's effects: records first, then the
// releases, the outcomes, the cancels and answers, and the seals of abandoned groups.
func (r *run) step(ctx context.Context) {
	r.e.ReleaseAll()
	out := r.e.TakeEffects(r.cfg.now())
	if out.Empty() {
		return
	}
	r.writeRecords(ctx, &out)
	if !r.handOutReleases(ctx, out.Releases) {
		return
	}
	r.writeOutcomes(ctx, out.Writes)
	if len(out.Cancels) > 0 {
		r.publishCancels(out.Cancels)
	}
	r.publishAnswers(out.Answers) // after the cancels they report
	r.startRedrives(ctx, out.Redrives)
	r.sealAbandoned(ctx, out.Abandons)
	r.storeDepControls(ctx, out.Readies, out.DepCancels)
}

// writeRecords hands the writer the rejections and the journal records (retry decisions, refused
// reports: replay skips those).
func (r *run) writeRecords(ctx context.Context, out *engine.Effects) {
	// Before the rejections: a refused open's message is deleted once they are stored.
	r.writeJournal(ctx, journal.KindRefusedOpen, out.RefusedOpens)
	if len(out.Rejections) > 0 {
		r.enqueueWrite(ctx, writeOp{rejections: out.Rejections})
	}
	r.writeJournal(ctx, journal.KindRetry, out.Retries)
	r.writeJournal(ctx, journal.KindRefused, out.Refused)
}

// writeJournal hands the writer journal records of kind holding entries, as many records as
// the server's max payload needs: a burst of failures (1,024 report messages applied in one
// step) can decide over 100,000 retries at once, more than a megabyte.
func (r *run) writeJournal(ctx context.Context, kind journal.Kind, entries []journal.Entry) {
	per := max(1, (r.msgLimit()-journal.MaxOverhead)/journal.MaxEntrySize)
	for len(entries) > 0 {
		k := min(len(entries), per)
		rec := journal.Record{Kind: kind, Epoch: r.e.Epoch(), Entries: entries[:k]}
		r.enqueueWrite(ctx, writeOp{journal: &rec})
		entries = entries[k:]
	}
}

// handOutReleases hands each release batch to the release pipelines, with the next jobs of its
// groups to read along when a payload is not cached. It reports false if ctx ended.
func (r *run) handOutReleases(ctx context.Context, releases []engine.Release) bool {
	for _, rel := range releases {
		req := releaseReq{pool: rel.Pool, jobs: make([]releaseJob, len(rel.Jobs))}
		if len(rel.Jobs) <= releaseAtOnceMax {
			req.sent = r.releaseAtOnce(rel)
		}
		var readAhead map[uint64]bool // groups whose next jobs this batch reads ahead, by incarnation
		for i, j := range rel.Jobs {
			req.jobs[i] = releaseJob{ReleaseJob: j}
			if req.sent == nil && !readAhead[j.OpenSeq] && !r.payloads.has(j.ID) {
				if readAhead == nil {
					readAhead = map[uint64]bool{}
				}
				readAhead[j.OpenSeq] = true
				req.jobs[i].ahead = r.e.Upcoming(nil, j.OpenSeq, r.cfg.ReadAhead)
			}
		}
		select {
		case r.releaseQ <- req:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// releaseAtOnceMax is the largest release the loop publishes itself when its payloads are cached.
const releaseAtOnceMax = 4

// releaseAtOnce publishes a small release whose jobs' messages are all cached from the loop,
// instead of handing it to a release pipeline, so a lone job starts one goroutine hand-off
// sooner; the pipeline then only waits for the batch to be stored (awaitWork). It returns nil,
// leaving the release to the pipeline, when a message is not cached or not valid: the pipeline
// reads it and handles what is wrong with it.
func (r *run) releaseAtOnce(rel engine.Release) *sentBatch {
	ids := make([]uint64, len(rel.Jobs))
	for i, j := range rel.Jobs {
		ids[i] = j.ID
	}
	jobs := r.payloads.cached(ids)
	if jobs == nil {
		return nil
	}
	work := make([]wire.WorkJob, len(jobs))
	for i, j := range jobs {
		rj := rel.Jobs[i]
		work[i] = r.workJob(rel.Pool, releaseJob{ReleaseJob: rj}, j)
	}
	if firstBatch(work, r.cfg.MaxBatchBytes) < len(work) {
		return nil // the pipeline splits what is too large for one batch
	}
	r.payloads.take(ids)
	for _, j := range jobs {
		r.e.Learn(j.ID, &j.Meta) // before any worker can report on it
	}
	s := r.sendWork(rel.Pool, work)
	return &s
}

// writeOutcomes hands the writer the engine's writes, in its order. A complete group's last
// outcomes travel in its summary's message, or before it when they do not fit in one.
func (r *run) writeOutcomes(ctx context.Context, writes []engine.Write) {
	for _, w := range writes {
		if w.Summary != nil && r.outcomesFitting(w.Outcomes) < len(w.Outcomes) {
			r.enqueueWrite(ctx, writeOp{Write: engine.Write{Group: w.Group, Tok: w.Tok, Reply: w.Reply, OpenSeq: w.OpenSeq, Outcomes: w.Outcomes, EvSeqs: w.EvSeqs, TTL: w.TTL}})
			w.Outcomes, w.EvSeqs = nil, nil
		}
		r.enqueueWrite(ctx, writeOp{Write: w})
	}
}

// sealAbandoned stores a seal for each group whose producer went silent (the engine's abandon).
func (r *run) sealAbandoned(ctx context.Context, groups []engine.Abandon) {
	for _, g := range groups {
		c := wire.GroupControl{Group: g.Group, Op: wire.OpSeal, Count: g.Count, Abandoned: true}
		m := nats.NewMsg(r.names.GroupSubject(g.Tok))
		m.Header = c.Header()
		r.wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if _, err := r.c.js.PublishMsg(pctx, m); err != nil && ctx.Err() == nil {
				r.log.Warn().Err(err).Str("group", c.Group).Msg("sealing an abandoned group failed; trying again after AbandonAfter")
			}
		})
	}
}

func (r *run) enqueueWrite(ctx context.Context, op writeOp) {
	select {
	case r.writeQ <- op:
	case <-ctx.Done():
	}
}

func (r *run) publishCancels(ids []uint64) {
	if err := r.c.nc.Publish(r.names.CancelSubject(), wire.AppendCancel(nil, ids)); err != nil {
		r.log.Error().Err(err).Msg("publishing cancellations failed")
	}
}

func (r *run) applyLimit(m streamMsg) {
	s := seq(m)
	if !r.limits.fresh(m, s) {
		return
	}
	r.e.LimitsApplied(s)
	l, err := r.names.ParseLimit(m.Subject(), m.Data())
	if err != nil {
		r.e.Reject(m.Subject(), s, err.Error())
		return
	}
	r.e.SetLimit(l, r.cfg.now())
}

// applyReports applies a report message stored in EVENTS on subject NS.ev.report.<pool>.<worker>
// (see Engine.Report for what is checked). A message that is not a report batch of the worker its
// subject names is rejected whole.
func (r *run) applyReports(subject string, evSeq uint64, h nats.Header, data []byte) {
	pool, worker, ok := r.names.ParseReportSubject(subject)
	if !ok {
		r.e.RejectReports(subject, evSeq, "not a report subject: reports go on "+r.names.ReportSubject("<pool>", "<worker>"))
		return
	}
	from, reports, err := wire.DecodeReports(data)
	if err == nil && from != worker {
		err = fmt.Errorf("%w: report from %q on the subject of worker %q", wire.ErrMalformed, from, worker)
	}
	if err != nil {
		r.e.RejectReports(subject, evSeq, err.Error())
		return
	}
	wire.ReportProofs(h, reports)
	now := r.cfg.now()
	for _, rp := range reports {
		r.e.Report(pool, worker, evSeq, rp, now)
	}
}

// storeDepControls stores the ready records of readies and a cancel of each group in cancels,
// trying again until they are stored or the term ends (the next term decides them again). The
// messages are built here, on the loop, which owns the engine.
func (r *run) storeDepControls(ctx context.Context, readies, cancels []engine.DepControl) {
	var msgs []*nats.Msg
	for _, d := range readies {
		c, body := r.e.ReadyRecord(d.Id, d.OpenSeq)
		m := nats.NewMsg(r.names.GroupSubject(wire.GroupToken(d.Id)))
		m.Header, m.Data = c.Header(), body
		msgs = append(msgs, m)
	}
	for _, d := range cancels {
		tok := wire.GroupToken(d.Id)
		m := nats.NewMsg(r.names.GroupSubject(tok))
		m.Header = wire.GroupControl{Group: d.Id, Op: wire.OpCancel, AfterFailed: r.e.CanceledFor(d.OpenSeq)}.Header()
		m.Header.Set(wire.HdrMsgID, "dep-cancel/"+tok+"/"+strconv.FormatUint(d.OpenSeq, 10))
		msgs = append(msgs, m)
	}
	for _, m := range msgs {
		r.wg.Go(func() {
			_ = r.retry(ctx, "store a dependency record", func(ctx context.Context) error {
				_, err := r.c.js.PublishMsg(ctx, m)
				return err
			})
		})
	}
}

// publishAnswers publishes answers on core NATS. An answer nobody receives is dropped: the producer
// stopped waiting, and its message was applied (or refused) all the same.
func (r *run) publishAnswers(answers []engine.Answer) {
	for _, a := range answers {
		data, err := json.Marshal(a.Reply)
		if err == nil {
			err = r.c.nc.Publish(a.Subject, data)
		}
		if err != nil {
			r.log.Warn().Err(err).Str("subject", a.Subject).Msg("answering a control message failed")
		}
	}
}
