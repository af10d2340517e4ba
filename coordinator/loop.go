package coordinator

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

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
			r.e.retention.outcomeStored(f.evSeqs)
			if g := r.e.groups.live[f.openSeq]; g != nil {
				if f.summarySeq > 0 {
					r.e.retain(g.id, g.openSeq, f.summarySeq, g.keepJobs, g.lastSeq, f.at, g.summary())
				}
				r.e.forget(g)
			}
		case seqs := <-r.storedCh:
			r.e.retention.outcomeStored(seqs)
		case <-trim.C:
			r.e.expireRetained(r.cfg.now())
			r.trimEvents(ctx)
		case end := <-r.redriveEnds:
			r.e.redriveEnded(end)
		case rj := <-r.schedReject:
			r.e.reject(rj.subject, rj.seq, rj.reason)
		case low := <-r.trimmedCh:
			r.trimming = false
			if low > 0 {
				r.trimmedTo = low - 1
			}
		case reply := <-r.statusCh:
			reply <- r.e.status()
		case q := <-r.insp.ch:
			q.reply <- r.e.inspect(q.req)
		case <-retry.C:
			r.e.tick(r.cfg.now())
		case <-expiry.C:
			r.e.tick(r.cfg.now())
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
	if jobs, ahead := r.e.feed(m.Subject(), s, m.Headers(), m.Data(), at); len(jobs) > 0 {
		r.payloads.add(jobs, ahead)
	}
}

func (r *run) applyEvent(m streamMsg) {
	s := seq(m)
	if !r.events.fresh(m, s) {
		return
	}
	defer r.e.retention.noteEvent(s)
	subj := m.Subject()
	switch {
	case subj == r.names.JournalSubject():
		rec, err := journal.Decode(m.Data())
		if err != nil {
			r.log.Error().Err(err).Uint64("seq", s).Msg("bad journal record")
			return
		}
		r.e.journalRecord(rec)
	default:
		r.applyReports(subj, s, m.Headers(), m.Data()) // see reports.go
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
			r.e.releaseFailed(info.id)
		case info.err != nil:
			r.e.vanished(info.id, info.err.Error())
		default:
			r.e.learn(info.id, info.meta)
		}
	}
}

func (r *run) armRetry(t *time.Timer) {
	due := r.e.retries.nextDue()
	for _, d := range [...]time.Time{r.e.delays.nextDue(), r.e.limits.nextToken(r.cfg.now())} {
		if !d.IsZero() && (due.IsZero() || d.Before(due)) {
			due = d
		}
	}
	if len(r.lingering) > 0 && (due.IsZero() || r.lingerDue.Before(due)) {
		due = r.lingerDue
	}
	if due.IsZero() {
		t.Reset(time.Hour)
		return
	}
	t.Reset(max(due.Sub(r.cfg.now()), 0))
}

// step makes release decisions and carries out the engine's effects: records first, then the
// releases, the outcomes, the cancels and answers, and the seals of abandoned groups.
func (r *run) step(ctx context.Context) {
	r.e.releaseAll()
	out := r.e.out
	r.e.out = effects{}
	if out.empty() {
		r.writeLingering(ctx, r.cfg.now())
		return
	}
	r.writeRecords(ctx, &out)
	if !r.handOutReleases(ctx, out.releases) {
		return
	}
	r.writeOutcomes(ctx, &out)
	if len(out.cancels) > 0 {
		r.publishCancels(out.cancels)
	}
	r.publishAnswers(out.answers) // after the cancels they report
	r.startRedrives(ctx, out.redrives)
	r.sealAbandoned(ctx, out.abandons)
	r.storeDepControls(ctx, out.readies, out.depCancels)
}

// writeRecords hands the writer the rejections and the journal records (retry decisions, refused
// reports: replay skips those, see reports.go).
func (r *run) writeRecords(ctx context.Context, out *effects) {
	// Before the rejections: a refused open's message is deleted once they are stored.
	r.writeJournal(ctx, journal.KindRefusedOpen, out.refusedOpens)
	if len(out.rejections) > 0 {
		r.enqueueWrite(ctx, writeOp{rejections: out.rejections})
	}
	r.writeJournal(ctx, journal.KindRetry, out.retries)
	r.writeJournal(ctx, journal.KindRefused, out.refused)
}

// writeJournal hands the writer journal records of kind holding entries, as many records as
// the server's max payload needs: a burst of failures (1,024 report messages applied in one
// step) can decide over 100,000 retries at once, more than a megabyte.
func (r *run) writeJournal(ctx context.Context, kind journal.Kind, entries []journal.Entry) {
	per := max(1, (r.msgLimit()-journal.MaxOverhead)/journal.MaxEntrySize)
	for len(entries) > 0 {
		k := min(len(entries), per)
		rec := journal.Record{Kind: kind, Epoch: r.e.epoch, Entries: entries[:k]}
		r.enqueueWrite(ctx, writeOp{journal: &rec})
		entries = entries[k:]
	}
}

// handOutReleases hands each release batch to the release pipelines, with the next jobs of its
// groups to read along when a payload is not cached. It reports false if ctx ended.
func (r *run) handOutReleases(ctx context.Context, releases []release) bool {
	for _, rel := range releases {
		req := releaseReq{pool: rel.pool.key, jobs: make([]releaseJob, len(rel.jobs))}
		if len(rel.jobs) <= releaseAtOnceMax {
			req.sent = r.releaseAtOnce(rel)
		}
		var readAhead map[*group]bool // groups whose next jobs this batch reads ahead
		for i, j := range rel.jobs {
			req.jobs[i] = releaseJob{id: j.id, attempt: j.attempt, rel: j.rel, gtok: j.g.tok, after: r.e.afterResults(j.g)}
			if req.sent == nil && !readAhead[j.g] && !r.payloads.has(j.id) {
				if readAhead == nil {
					readAhead = map[*group]bool{}
				}
				readAhead[j.g] = true
				req.jobs[i].ahead = r.e.sched.Upcoming(nil, j.g, r.cfg.ReadAhead)
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
func (r *run) releaseAtOnce(rel release) *sentBatch {
	ids := make([]uint64, len(rel.jobs))
	for i, j := range rel.jobs {
		ids[i] = j.id
	}
	jobs := r.payloads.cached(ids)
	if jobs == nil {
		return nil
	}
	work := make([]wire.WorkJob, len(jobs))
	for i, j := range jobs {
		rj := rel.jobs[i]
		work[i] = r.workJob(rel.pool.key, releaseJob{id: rj.id, attempt: rj.attempt, rel: rj.rel, after: r.e.afterResults(rj.g)}, j)
	}
	if firstBatch(work, r.cfg.MaxBatchBytes) < len(work) {
		return nil // the pipeline splits what is too large for one batch
	}
	r.payloads.take(ids)
	for _, j := range jobs {
		r.e.learn(j.ID, &j.Meta) // before any worker can report on it
	}
	s := r.sendWork(rel.pool.key, work)
	return &s
}

// writeOutcomes hands the writer the outcomes, retention purges, summaries and purges.
//
// Under load (more than lingerAbove outcome writes per OutcomeLinger), a group's outcomes wait
// while its previous outcome message is less than OutcomeLinger old, unless the group is
// complete: groups interleave, so writing each step's outcomes at once stores about one message
// per job when many groups run (see Config.OutcomeLinger). Under a light load nothing waits.
func (r *run) writeOutcomes(ctx context.Context, out *effects) {
	now := r.cfg.now()
	busy := r.outcomeLoad(now) > lingerAbove
	linger := r.linger()
	for _, g := range out.outcomes {
		if len(g.outcomes) == 0 || g.lingering || g.complete {
			continue // a complete group's go with its summary, below
		}
		if due := g.outcomesAt.Add(linger); busy && !g.complete && now.Before(due) {
			g.lingering = true
			r.lingering = append(r.lingering, g)
			if r.lingerDue.IsZero() || due.Before(r.lingerDue) {
				r.lingerDue = due
			}
			continue
		}
		r.writeGroupOutcomes(ctx, g, now)
	}
	r.writeLingering(ctx, now)
	for _, p := range out.retentionPurges {
		r.enqueueWrite(ctx, writeOp{retention: &p})
	}
	for _, g := range out.summaries {
		// A complete group's last outcomes go in its summary's message (a single job's one
		// outcome, its summary: one message), or before it if they do not fit in one.
		g.keepJobs = r.e.keepsJobs(g)
		op := writeOp{group: g.id, gtok: g.tok, reply: g.reply, openSeq: g.openSeq, purge: !g.keepJobs, lastSeq: g.lastSeq, single: g.single()}
		if r.outcomesFitting(g.outcomes) < len(g.outcomes) {
			r.writeGroupOutcomes(ctx, g, now)
		} else if len(g.outcomes) > 0 {
			r.outcomeLoad(now)
			r.outThis++
			op.outcomes, op.evSeqs = g.outcomes, g.outcomeSeqs
			g.outcomes, g.outcomeSeqs, g.lingering = nil, nil, false // (writeLingering drops it)
		}
		sum := g.summary()
		op.summary = &sum
		r.enqueueWrite(ctx, op)
	}
	for _, g := range out.purges {
		g.keepJobs = r.e.keepsJobs(g)
		r.enqueueWrite(ctx, writeOp{group: g.id, complete: true, gtok: g.tok, openSeq: g.openSeq, purge: !g.keepJobs, lastSeq: g.lastSeq, single: g.single()})
	}
}

// writeGroupOutcomes hands the writer the group's outcomes not yet written, if any.
func (r *run) writeGroupOutcomes(ctx context.Context, g *group, now time.Time) {
	g.lingering = false // if it was, writeLingering drops it from the list
	if len(g.outcomes) == 0 {
		return
	}
	r.outcomeLoad(now)
	r.outThis++
	r.enqueueWrite(ctx, writeOp{group: g.id, gtok: g.tok, reply: g.reply, openSeq: g.openSeq, outcomes: g.outcomes, evSeqs: g.outcomeSeqs})
	g.outcomes, g.outcomeSeqs, g.outcomesAt = nil, nil, now
}

// lingerAbove is the outcome writes per OutcomeLinger above which outcomes linger: 16 per 10ms,
// 1,600 messages a second, a few percent of a core; below it, writing at once costs little.
const lingerAbove = 16

// maxLinger bounds how long a group's outcomes linger however many groups wait.
const maxLinger = time.Second

// linger is how long a group's outcomes wait after its previous outcome message under load:
// OutcomeLinger, stretched so the groups lingering share about lingerAbove messages per
// OutcomeLinger (with 1,000 groups running at once each group's outcomes go about every 0.6 s
// instead of every 10 ms, and a job costs a fraction of an outcome message instead of one),
// and at most maxLinger.
func (r *run) linger() time.Duration {
	shares := time.Duration(max(1, (len(r.lingering)+lingerAbove-1)/lingerAbove))
	return min(r.cfg.OutcomeLinger*shares, max(r.cfg.OutcomeLinger, maxLinger))
}

// outcomeLoad moves the load window on to now's OutcomeLinger period and returns the outcome
// writes of the busier of the current period and the one before.
func (r *run) outcomeLoad(now time.Time) int {
	if r.cfg.OutcomeLinger <= 0 {
		return 0
	}
	if since := now.Sub(r.outWindow); since >= r.cfg.OutcomeLinger {
		r.outPrev, r.outThis = r.outThis, 0
		if since >= 2*r.cfg.OutcomeLinger {
			r.outPrev = 0 // a whole period without a write
		}
		r.outWindow = now
	}
	return max(r.outThis, r.outPrev)
}

// writeLingering writes the lingering outcomes whose time has come, if any has.
func (r *run) writeLingering(ctx context.Context, now time.Time) {
	if len(r.lingering) == 0 || now.Before(r.lingerDue) {
		return
	}
	keep := r.lingering[:0]
	r.lingerDue = time.Time{}
	linger := r.linger()
	for _, g := range r.lingering {
		if !g.lingering {
			continue // written with its summary
		}
		if due := g.outcomesAt.Add(linger); now.Before(due) {
			keep = append(keep, g)
			if r.lingerDue.IsZero() || due.Before(r.lingerDue) {
				r.lingerDue = due
			}
			continue
		}
		r.writeGroupOutcomes(ctx, g, now)
	}
	clear(r.lingering[len(keep):])
	r.lingering = keep
}

// sealAbandoned stores a seal for each group whose producer went silent (see engine.abandon).
func (r *run) sealAbandoned(ctx context.Context, groups []*group) {
	for _, g := range groups {
		c := wire.GroupControl{Group: g.id, Op: wire.OpSeal, Count: g.admitted, Abandoned: true}
		m := nats.NewMsg(r.names.GroupSubject(g.tok))
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
	r.e.limits.applied = max(r.e.limits.applied, s)
	l, err := r.names.ParseLimit(m.Subject(), m.Data())
	if err != nil {
		r.e.reject(m.Subject(), s, err.Error())
		return
	}
	r.e.setLimit(l, r.cfg.now())
}

// applyReports applies a report message stored in EVENTS on subject NS.ev.report.<pool>.<worker>
// (see engine.report for what is checked). A message that is not a report batch of the worker its
// subject names is rejected whole.
func (r *run) applyReports(subject string, evSeq uint64, h nats.Header, data []byte) {
	pool, worker, ok := r.names.ParseReportSubject(subject)
	if !ok {
		r.e.rejectReports(subject, evSeq, "not a report subject: reports go on "+r.names.ReportSubject("<pool>", "<worker>"))
		return
	}
	from, reports, err := wire.DecodeReports(data)
	if err == nil && from != worker {
		err = fmt.Errorf("%w: report from %q on the subject of worker %q", wire.ErrMalformed, from, worker)
	}
	if err != nil {
		r.e.rejectReports(subject, evSeq, err.Error())
		return
	}
	wire.ReportProofs(h, reports)
	now := r.cfg.now()
	for _, rp := range reports {
		r.e.report(pool, worker, evSeq, rp, now)
	}
}

// storeDepControls stores the ready records of readies and a cancel of each group in cancels,
// trying again until they are stored or the term ends (the next term decides them again). The
// messages are built here, on the loop, which owns the engine.
func (r *run) storeDepControls(ctx context.Context, readies, cancels []depControl) {
	var msgs []*nats.Msg
	for _, d := range readies {
		c, body := r.e.readyRecord(d.id, d.openSeq)
		m := nats.NewMsg(r.names.GroupSubject(wire.GroupToken(d.id)))
		m.Header, m.Data = c.Header(), body
		msgs = append(msgs, m)
	}
	for _, d := range cancels {
		tok := wire.GroupToken(d.id)
		m := nats.NewMsg(r.names.GroupSubject(tok))
		m.Header = wire.GroupControl{Group: d.id, Op: wire.OpCancel, AfterFailed: r.e.deps.failedOn[d.openSeq]}.Header()
		m.Header.Set(wire.HdrMsgID, "dep-cancel/"+tok+"/"+strconv.FormatUint(d.openSeq, 10))
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
