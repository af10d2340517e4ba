package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/weavejobs/weave/internal/directget"
	"github.com/weavejobs/weave/internal/journal"
	"github.com/weavejobs/weave/internal/wire"
)

// run is one term of coordination under one lease epoch. The loop goroutine owns the engine;
// every other goroutine talks to it through the channels below.
type run struct {
	c        *Coordinator
	fail     context.CancelCauseFunc // ends the term with an error (see retry)
	epoch    uint64                  // this term's lease epoch (immutable; the writers' message IDs)
	cfg      Config
	names    wire.Names
	log      zerolog.Logger
	e        *engine
	payloads *payloads

	// Written by consumer callbacks and subscriptions, read by the loop.
	feedCh   chan jetstream.Msg // JOBS feed, headers only
	eventsCh chan jetstream.Msg // EVENTS: reports and journal
	hbCh     chan heartbeatIn   // heartbeats and joins (see pools.go)
	statusCh chan chan *Status

	// Written by release pipelines (never blocking them), read by the loop.
	relMu      sync.Mutex
	relPending []releasedInfo
	relNotify  chan struct{} // capacity 1: "relPending is not empty"

	// Written by finishers and the outcome acker, read by the loop.
	forgetCh  chan finishedGroup
	storedCh  chan []uint64 // EVENTS sequences of reports whose outcomes are now stored
	trimming  bool          // a trim of EVENTS is on its way (owned by the loop)
	trimmedTo uint64        // EVENTS is trimmed below this (owned by the loop)
	trimmedCh chan uint64   // written by the trim goroutine: how far it trimmed, 0 on failure

	// Written by the loop, read by the release pipelines and the writer.
	releaseQ chan releaseReq
	writeQ   chan writeOp
	// Written (and closed) by the writer, read by the acker.
	acks chan written
	// Written (and closed) by the acker, read by the summarizer.
	summaries chan storedSummary

	rescues map[string]context.CancelFunc // running rescues by pool (owned by the loop; see rescue.go)

	done chan struct{} // closed at shutdown: callbacks stop handing messages to the loop
	stop []func()      // consumers and subscriptions to stop, in order
	wg   sync.WaitGroup
}

// releasedInfo is what a release pipeline tells the loop about one job.
type releasedInfo struct {
	id          uint64
	key         string
	maxAttempts int
	err         error // the job's stored message is gone: the job fails
	requeue     bool  // the release did not happen: the job goes back to pending
}

const chanSize = 4096

func newRun(ctx context.Context, c *Coordinator, epoch uint64, fail context.CancelCauseFunc) (*run, error) {
	e, err := newEngine(c.cfg, c.names, epoch)
	if err != nil {
		return nil, err
	}
	r := &run{
		c: c, fail: fail, epoch: epoch, cfg: c.cfg, names: c.names, log: c.cfg.Logger, e: e,
		payloads:  newPayloads(c.directGet(c.names.JobsStream()), c.cfg.PayloadCacheBytes),
		feedCh:    make(chan jetstream.Msg, chanSize),
		eventsCh:  make(chan jetstream.Msg, chanSize),
		hbCh:      make(chan heartbeatIn, chanSize),
		statusCh:  make(chan chan *Status),
		relNotify: make(chan struct{}, 1),
		forgetCh:  make(chan finishedGroup, chanSize),
		storedCh:  make(chan []uint64, chanSize),
		trimmedCh: make(chan uint64, 1),
		acks:      make(chan written, chanSize),
		summaries: make(chan storedSummary, chanSize),
		releaseQ:  make(chan releaseReq, chanSize),
		done:      make(chan struct{}),
		writeQ:    make(chan writeOp, chanSize),
		rescues:   map[string]context.CancelFunc{},
	}
	if err := r.replay(ctx); err != nil {
		r.shutdown()
		return nil, err
	}
	return r, nil
}

// replay reads the streams up to where they were when it started, then ends the engine's replay.
func (r *run) replay(ctx context.Context) error {
	start := time.Now()
	// Heartbeats first, so workers are known when scheduling starts.
	if err := r.subscribeHeartbeats(); err != nil {
		return err
	}
	statusSub, err := r.c.nc.Subscribe(r.names.StatusSubject(), r.serveStatus)
	if err != nil {
		return err
	}
	r.stop = append(r.stop, func() { _ = statusSub.Unsubscribe() })

	r.log.Debug().Msg("replaying jobs")
	// The feed carries payloads: the jobs about to be released are usually recent, so their
	// payloads are kept in the bounded read-ahead cache and the release needs no round trip.
	// The pull buffer is bounded by bytes, so a backlog of large payloads cannot pile up here.
	jobsEnd, err := r.follow(ctx, r.names.JobsStream(), r.feedCh, jetstream.PullMaxBytes(feedBufferBytes))
	if err != nil {
		return err
	}
	if err := drainUntil(ctx, r.feedCh, jobsEnd, func(m jetstream.Msg) { r.applyFeed(m) }); err != nil {
		return err
	}
	r.log.Debug().Uint64("last", jobsEnd).Msg("replaying events")
	eventsEnd, err := r.follow(ctx, r.names.EventsStream(), r.eventsCh, jetstream.PullMaxMessages(1024))
	if err != nil {
		return err
	}
	if err := drainUntil(ctx, r.eventsCh, eventsEnd, func(m jetstream.Msg) { r.applyEvent(m) }); err != nil {
		return err
	}
	r.log.Debug().Uint64("last", eventsEnd).Msg("replaying outcomes")
	if err := r.replayOutcomes(ctx); err != nil {
		return err
	}
	r.log.Debug().Msg("scanning work")
	alive, err := r.aliveWork(ctx)
	if err != nil {
		return err
	}
	r.e.finishReplay(alive, r.cfg.now())
	r.learnKeys(ctx)
	r.log.Info().Stringer("took", time.Since(start)).Int("groups", len(r.e.groups)).Int("in_flight", len(r.e.jobs)).Msg("replay done")

	// Mark the new epoch in the journal: later records of older epochs are ignored.
	err = r.retry(ctx, "journal epoch", func(ctx context.Context) error {
		return r.appendJournal(ctx, journal.Record{Kind: journal.KindEpoch, Epoch: r.e.epoch})
	})
	if err != nil {
		return err
	}
	for range r.cfg.ReleaseParallelism {
		r.wg.Go(func() { r.releaser(ctx) })
	}
	r.wg.Go(func() { r.writer(ctx) })
	r.wg.Go(func() { r.acker(ctx) })
	r.wg.Go(func() { r.summarizer(ctx) })
	return nil
}

// learnKeys reads the key and attempt limit of every job replay rebuilt (released before the
// restart: running, waiting for a retry, or decided just now), as the release pipeline tells
// the loop for the jobs it releases: without it their outcomes would carry no key (WaitKey
// could not find them) and a job's own MaxAttempts would give way to the default.
func (r *run) learnKeys(ctx context.Context) {
	var ids []uint64
	for id, j := range r.e.jobs {
		if j.key == "" && j.maxAtt == 0 {
			ids = append(ids, id)
		}
	}
	for _, g := range r.e.out.outcomes {
		for _, o := range g.outcomes {
			if o.Key == "" {
				ids = append(ids, o.ID)
			}
		}
	}
	if len(ids) == 0 {
		return
	}
	msgs := r.readJobs(ctx, ids)
	keys := make(map[uint64]string, len(ids))
	for _, m := range msgs {
		if m == nil {
			continue // gone: the job fails when it is next released, as any other
		}
		meta, err := wire.ParseJobMeta(m.Header)
		if err != nil {
			continue
		}
		keys[m.Seq] = meta.Key
		r.e.released(m.Seq, meta.Key, meta.MaxAttempts)
	}
	for _, g := range r.e.out.outcomes {
		for i := range g.outcomes {
			if o := &g.outcomes[i]; o.Key == "" {
				o.Key = keys[o.ID]
			}
		}
	}
}

// follow starts an ordered consumer over a whole stream from its first message, delivering into
// ch, and returns the stream's last sequence at the start: replay reads up to it.
func (r *run) follow(ctx context.Context, stream string, ch chan<- jetstream.Msg, opts ...jetstream.PullConsumeOpt) (uint64, error) {
	var (
		info *jetstream.StreamInfo
		cons jetstream.Consumer
	)
	err := r.retry(ctx, "follow "+stream, func(ctx context.Context) error {
		s, err := r.c.js.Stream(ctx, stream)
		if err != nil {
			return err
		}
		if info, err = s.Info(ctx); err != nil {
			return err
		}
		cons, err = s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
		return err
	})
	if err != nil {
		return 0, err
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		select {
		case ch <- m:
		case <-r.done:
		}
	}, opts...)
	if err != nil {
		return 0, err
	}
	r.stop = append(r.stop, cc.Stop)
	return info.State.LastSeq, nil
}

// drainUntil applies messages from ch until one with stream sequence ≥ last has been applied.
func drainUntil(ctx context.Context, ch <-chan jetstream.Msg, last uint64, apply func(jetstream.Msg)) error {
	if last == 0 {
		return nil
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case m := <-ch:
			apply(m)
			if seq(m) >= last {
				return nil
			}
		}
	}
}

func seq(m jetstream.Msg) uint64 {
	md, err := m.Metadata()
	if err != nil {
		return 0
	}
	return md.Sequence.Stream
}

// storedAt returns a message's stream sequence and the time the server stored it.
func storedAt(m jetstream.Msg) (uint64, time.Time) {
	md, err := m.Metadata()
	if err != nil {
		return 0, time.Time{}
	}
	return md.Sequence.Stream, md.Timestamp
}

// feedBufferBytes bounds the payload bytes the JOBS feed's pull buffer holds.
const feedBufferBytes = 8 << 20

func (r *run) applyFeed(m jetstream.Msg) {
	s, at := storedAt(m)
	if r.e.feed(m.Subject(), s, m.Headers(), at) {
		r.payloads.add(&directget.Msg{Seq: s, Subject: m.Subject(), Header: m.Headers(), Data: m.Data()})
	}
}

func (r *run) applyEvent(m jetstream.Msg) {
	defer r.e.noteEvent(seq(m))
	subj := m.Subject()
	switch {
	case subj == r.names.JournalSubject():
		rec, err := journal.Decode(m.Data())
		if err != nil {
			r.log.Error().Err(err).Uint64("seq", seq(m)).Msg("bad journal record")
			return
		}
		r.e.journalRecord(rec)
	default:
		r.applyReports(subj, seq(m), m.Data()) // see reports.go
	}
}

// replayOutcomes reads the outcomes already written for the open groups, up to the RESULTS
// stream's last sequence when it starts. It reads with one ordered consumer's Consume, which
// pulls ahead and recreates the consumer itself after a failure; calling Next one message at a
// time recreates the consumer per call, and on a cluster that failed with "no responders"
// after a few messages.
func (r *run) replayOutcomes(ctx context.Context) error {
	prefix := r.names.OutcomeSubject("")
	err := r.readStream(ctx, r.names.ResultsStream(), func(m jetstream.Msg) {
		openSeq, _ := strconv.ParseUint(m.Headers().Get(wire.HdrGroupSeq), 10, 64)
		if outs, sum, err := wire.DecodeOutcomeMsg(m.Data()); err == nil {
			var at time.Time
			if md, err := m.Metadata(); err == nil {
				at = md.Timestamp
			}
			r.e.outcomeReplay(strings.TrimPrefix(m.Subject(), prefix), openSeq, outs, sum, seq(m), at)
		}
	})
	if err != nil {
		return fmt.Errorf("weave: replay outcomes: %w", err)
	}
	return nil
}

// readStream applies every message of a stream, up to its last sequence when the read starts,
// in order, then stops reading.
func (r *run) readStream(ctx context.Context, stream string, apply func(jetstream.Msg)) error {
	var (
		s    jetstream.Stream
		info *jetstream.StreamInfo
		cons jetstream.Consumer
	)
	err := r.retry(ctx, "read "+stream, func(ctx context.Context) error {
		var err error
		if s, err = r.c.js.Stream(ctx, stream); err != nil {
			return err
		}
		if info, err = s.Info(ctx); err != nil || info.State.Msgs == 0 {
			return err
		}
		cons, err = s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
		return err
	})
	if err != nil || info.State.Msgs == 0 {
		return err
	}
	ch := make(chan jetstream.Msg, 1024)
	done := make(chan struct{})
	defer close(done)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		select {
		case ch <- m:
		case <-done:
		}
	}, jetstream.PullMaxMessages(1024))
	if err != nil {
		return err
	}
	defer cc.Stop()
	return drainUntil(ctx, ch, info.State.LastSeq, apply)
}

// aliveWork lists the jobs present in the WORK stream: released and not yet acknowledged.
func (r *run) aliveWork(ctx context.Context) (map[uint64]aliveJob, error) {
	var alive map[uint64]aliveJob
	prefix := r.names.WorkSubject("")
	work := r.c.directGet(r.names.WorkStream())
	defer work.Close()
	err := r.retry(ctx, "scan work", func(ctx context.Context) error {
		alive = map[uint64]aliveJob{}
		return work.Scan(ctx, 1, 256, func(m *directget.Msg) error {
			jobs, err := wire.DecodeWork(m.Data)
			if err != nil {
				return nil // a malformed batch is the worker's to reject
			}
			for _, j := range jobs {
				if j.Attempt >= alive[j.ID].attempt {
					alive[j.ID] = aliveJob{attempt: j.Attempt, pool: strings.TrimPrefix(m.Subject, prefix)}
				}
			}
			return nil
		})
	})
	return alive, err
}

func (r *run) journalMsg(rec journal.Record) *nats.Msg {
	m := nats.NewMsg(r.names.JournalSubject())
	m.Header.Set(wire.HdrEpoch, strconv.FormatUint(rec.Epoch, 10))
	m.Data = journal.Append(nil, rec)
	return m
}

func (r *run) appendJournal(ctx context.Context, rec journal.Record) error {
	if _, err := r.c.js.PublishMsg(ctx, r.journalMsg(rec)); err != nil {
		return fmt.Errorf("weave: journal: %w", err)
	}
	return nil
}

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
			r.drainReleased()
			r.applyEvent(m)
		case hb := <-r.hbCh:
			r.heartbeat(hb)
		case <-r.relNotify:
			r.drainReleased()
		case f := <-r.forgetCh:
			if f.summarySeq > 0 {
				r.e.finished(f.g.id, f.g.openSeq, f.summarySeq, f.g.failed > 0, f.g.lastSeq, f.at)
			}
			r.e.forget(f.g)
		case seqs := <-r.storedCh:
			r.e.outcomeStored(seqs)
		case <-trim.C:
			r.e.expireRetained(r.cfg.now())
			r.trimEvents(ctx)
		case low := <-r.trimmedCh:
			r.trimming = false
			if low > 0 {
				r.trimmedTo = low - 1
			}
		case reply := <-r.statusCh:
			reply <- r.e.status()
		case <-retry.C:
			r.e.tick(r.cfg.now())
		case <-expiry.C:
			r.e.tick(r.cfg.now())
			r.reconcileRescues(ctx)
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
			r.drainReleased()
			r.applyEvent(m)
		case hb := <-r.hbCh:
			r.heartbeat(hb)
		case <-r.relNotify:
			r.drainReleased()
		default:
			return
		}
	}
}

// drainReleased applies every pending release notice. Called before applying events: a job's
// release notice is sent before its batch is published, so it is always applied before a report
// about the job.
func (r *run) drainReleased() {
	r.relMu.Lock()
	infos := r.relPending
	r.relPending = nil
	r.relMu.Unlock()
	for _, info := range infos {
		switch {
		case info.requeue:
			r.e.unreleased(info.id)
		case info.err != nil:
			r.e.lost(info.id, info.err.Error())
		default:
			r.e.released(info.id, info.key, info.maxAttempts)
		}
	}
}

func (r *run) armRetry(t *time.Timer) {
	due := r.e.nextDue()
	if due.IsZero() {
		t.Reset(time.Hour)
		return
	}
	t.Reset(max(due.Sub(r.cfg.now()), 0))
}

// step makes release decisions and carries out the engine's effects.
func (r *run) step(ctx context.Context) {
	r.e.releaseAll()
	out := r.e.out
	r.e.out = effects{}
	if out.empty() {
		return
	}
	if len(out.rejections) > 0 {
		r.enqueueWrite(ctx, writeOp{rejections: out.rejections})
	}
	if len(out.retries) > 0 {
		rec := journal.Record{Kind: journal.KindRetry, Epoch: r.e.epoch, Entries: out.retries}
		r.enqueueWrite(ctx, writeOp{journal: &rec})
	}
	if len(out.refused) > 0 { // refused reports: replay skips them (see reports.go)
		rec := journal.Record{Kind: journal.KindRefused, Epoch: r.e.epoch, Entries: out.refused}
		r.enqueueWrite(ctx, writeOp{journal: &rec})
	}
	for _, rel := range out.releases {
		req := releaseReq{pool: rel.pool.key, jobs: make([]releaseJob, len(rel.jobs))}
		var readAhead map[*group]bool // groups whose next jobs this batch reads ahead
		for i, j := range rel.jobs {
			req.jobs[i] = releaseJob{id: j.id, attempt: j.attempt, gtok: j.g.tok}
			if !readAhead[j.g] && !r.payloads.has(j.id) {
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
			return
		}
	}
	for _, g := range out.outcomes {
		if len(g.outcomes) > 0 {
			r.enqueueWrite(ctx, writeOp{g: g, gtok: g.tok, openSeq: g.openSeq, outcomes: g.outcomes, evSeqs: g.outcomeSeqs})
			g.outcomes, g.outcomeSeqs = nil, nil
		}
	}
	for _, p := range out.retentionPurges {
		r.enqueueWrite(ctx, writeOp{retention: &p})
	}
	for _, g := range out.summaries {
		sum := wire.GroupSummary{Jobs: g.admitted, Done: g.done, Failed: g.failed, Canceled: g.canceled, Abandoned: g.abandoned}
		r.enqueueWrite(ctx, writeOp{g: g, gtok: g.tok, openSeq: g.openSeq, summary: &sum, purge: g.failed == 0, lastSeq: g.lastSeq})
	}
	for _, g := range out.purges {
		r.enqueueWrite(ctx, writeOp{g: g, gtok: g.tok, purge: g.failed == 0, lastSeq: g.lastSeq})
	}
	if len(out.cancels) > 0 {
		r.publishCancels(out.cancels)
	}
	r.publishAnswers(out.answers) // after the cancels they report
	for _, g := range out.abandons {
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

// shutdown stops the inputs, then lets the pipelines finish what the loop handed them.
func (r *run) shutdown() {
	defer r.payloads.get.Close()
	close(r.done)
	for _, stop := range r.stop {
		stop()
	}
	r.stop = nil
	for _, cancel := range r.rescues {
		cancel()
	}
	close(r.releaseQ)
	close(r.writeQ)
	r.wg.Wait()
}

// serveStatus answers a status request from the loop's state (core NATS request/reply).
func (r *run) serveStatus(m *nats.Msg) {
	reply := make(chan *Status, 1)
	select {
	case r.statusCh <- reply:
	case <-time.After(2 * time.Second):
		return
	}
	if err := m.Respond((<-reply).Marshal()); err != nil && !errors.Is(err, nats.ErrMsgNoReply) {
		r.log.Warn().Err(err).Msg("status reply failed")
	}
}

// trimEvents deletes the EVENTS messages the state no longer depends on (see engine.lowWater).
// It first appends an epoch record, so the newest epoch mark always survives for fencing.
func (r *run) trimEvents(ctx context.Context) {
	low := r.e.lowWater()
	// Below trimmedTo+2 there is at most the epoch record the last trim appended: nothing to do.
	if r.trimming || low <= r.trimmedTo+2 {
		return
	}
	r.trimming = true
	epoch := r.e.epoch
	r.wg.Go(func() {
		defer func() {
			select {
			case r.trimmedCh <- low:
			case <-r.done:
			}
		}()
		if err := r.appendJournal(ctx, journal.Record{Kind: journal.KindEpoch, Epoch: epoch}); err != nil {
			r.log.Warn().Err(err).Msg("trim: epoch record")
			low = 0
			return
		}
		s, err := r.c.js.Stream(ctx, r.names.EventsStream())
		if err == nil {
			err = s.Purge(ctx, jetstream.WithPurgeSequence(low))
		}
		if err != nil {
			r.log.Warn().Err(err).Msg("trim: purge EVENTS")
			low = 0
		}
	})
}

// deleteRefused deletes messages refused from the JOBS stream once their rejection is recorded:
// they can never run, and would otherwise stay (and be refused again by every replay).
// Deleted in a later term if this one ends first: replay refuses them again.
func (r *run) deleteRefused(ctx context.Context, seqs []uint64) {
	for _, seq := range seqs {
		err := r.retry(ctx, "delete a refused message", func(ctx context.Context) error {
			s, err := r.c.js.Stream(ctx, r.names.JobsStream())
			if err == nil {
				err = s.DeleteMsg(ctx, seq)
			}
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				return nil
			}
			return err
		})
		if err != nil {
			return
		}
	}
}
