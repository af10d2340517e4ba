package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/coordinator/internal/engine"
	"github.com/weavejobs/weave/internal/directget"
	"github.com/weavejobs/weave/internal/journal"
	"github.com/weavejobs/weave/internal/wire"
)

// replay reads the streams up to where they were when it started, then ends the engine's replay.
func (r *run) replay(ctx context.Context) error {
	start := time.Now()
	key, err := r.readReleaseKey(ctx)
	if err != nil {
		return err
	}
	r.key = key
	r.e.SetKey(key)
	// Heartbeats first, so workers are known when scheduling starts.
	if err := r.subscribeHeartbeats(); err != nil {
		return err
	}
	statusSub, err := r.c.nc.Subscribe(r.names.StatusSubject(), r.serveStatus)
	if err != nil {
		return err
	}
	r.stop = append(r.stop, func() { _ = statusSub.Unsubscribe() })
	if err := r.subscribeInspect(); err != nil {
		return err
	}

	if err := r.followLimits(ctx); err != nil {
		return err
	}
	alive, err := r.readStreams(ctx)
	if err != nil {
		return err
	}
	r.e.EndReplay(alive, r.cfg.now())
	r.learnKeys(ctx)
	groups, inFlight := r.e.Size()
	r.log.Info().Stringer("took", time.Since(start)).Int("groups", groups).Int("in_flight", inFlight).Msg("replay done")

	// Mark the new epoch in the journal: later records of older epochs are ignored.
	err = r.retry(ctx, "journal epoch", func(ctx context.Context) error {
		return r.appendJournal(ctx, journal.Record{Kind: journal.KindEpoch, Epoch: r.e.Epoch()})
	})
	if err != nil {
		return err
	}
	r.startPipelines(ctx)
	r.callRoll() // last: the loop runs next, and takes the answers as they come
	return nil
}

// readStreams lists the jobs whose batches are in WORK, then reads JOBS (the feed), EVENTS and
// RESULTS into the engine up to where they were when it started.
//
// WORK first: a worker stores a job's report before it acks the batch, so a batch gone from the
// scan has its report stored before the scan, hence before EVENTS' end, which replay reads. The
// other order left a window (EVENTS read, then a report stored and its batch acked, then WORK
// scanned) in which a job was neither reported nor in WORK: replay took it for never released
// and released it again, and its report, arriving live, was refused (the chaos test's short
// form, with a RESULTS read slowed by an election in between: 137 executions beyond one per
// job against a bound of 87).
func (r *run) readStreams(ctx context.Context) (map[uint64]engine.AliveJob, error) {
	r.log.Debug().Msg("scanning work")
	alive, err := r.aliveWork(ctx)
	if err != nil {
		return nil, err
	}
	r.e.SetAlive(alive)
	r.log.Debug().Msg("replaying jobs")
	// The feed carries payloads: the jobs about to be released are usually recent, so their
	// payloads are kept in the bounded read-ahead cache and the release needs no round trip.
	// The pull buffer is bounded by bytes, so a backlog of large payloads cannot pile up here.
	var jobsEnd, eventsEnd uint64
	r.jobs, jobsEnd, err = r.follow(ctx, r.names.JobsStream(), r.feedCh, jetstream.PullMaxBytes(feedBufferBytes))
	if err != nil {
		return nil, err
	}
	if err := drainUntil(ctx, r.feedCh, jobsEnd, r.applyFeed); err != nil {
		return nil, err
	}
	r.log.Debug().Uint64("last", jobsEnd).Msg("replaying events")
	r.events, eventsEnd, err = r.follow(ctx, r.names.EventsStream(), r.eventsCh, jetstream.PullMaxMessages(1024))
	if err != nil {
		return nil, err
	}
	if err := drainUntil(ctx, r.eventsCh, eventsEnd, r.applyEvent); err != nil {
		return nil, err
	}
	if afterEventsRead != nil {
		afterEventsRead()
	}
	r.log.Debug().Uint64("last", eventsEnd).Msg("replaying outcomes")
	if err := r.replayOutcomes(ctx); err != nil {
		return nil, err
	}
	return alive, nil
}

// afterEventsRead, when set (by a test, before the coordinator starts), runs in replay once
// EVENTS is read up to its end: what happens then is what a read of WORK after EVENTS would
// have missed.
var afterEventsRead func()

// startPipelines starts the release pipelines and the writer, acker, summarizer and deleter.
func (r *run) startPipelines(ctx context.Context) {
	for range r.cfg.ReleaseParallelism {
		r.wg.Go(func() { r.releaser(ctx) })
	}
	r.wg.Go(func() { r.writer(ctx) })
	r.wg.Go(func() { r.acker(ctx) })
	r.wg.Go(func() { r.summarizer(ctx) })
	r.wg.Go(func() { r.deleter(ctx) })
	r.wg.Go(func() { r.fireSchedules(ctx) })
}

// learnKeys reads the key and attempt limit of every job replay rebuilt (released before the
// restart: running, waiting for a retry, or decided just now), and in an incarnation a redrive
// opened the failed job it runs again, as the release pipeline tells the loop for the jobs it
// releases: without it their outcomes would carry no key (WaitKey could not find them) nor the
// job they ran again (which would stay failed), and a job's own MaxAttempts would give way to
// the default.
func (r *run) learnKeys(ctx context.Context) {
	ids := r.e.KeysToLearn()
	if len(ids) == 0 {
		return
	}
	metas := make(map[uint64]*wire.JobMeta, len(ids))
	for _, j := range r.readJobs(ctx, ids) {
		if j == nil {
			continue // gone: the job fails when it is next released, as any other
		}
		metas[j.ID] = &j.Meta
		r.e.Learn(j.ID, &j.Meta)
	}
	r.e.LearnOutcomes(metas)
}

// drainUntil applies messages from ch until one with stream sequence ≥ last has been applied.
// last must be a message the stream holds (see lastHeld), or 0 for none.
func drainUntil[M jetstream.Msg](ctx context.Context, ch <-chan M, last uint64, apply func(M)) error {
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

// lastHeld is the sequence of the last message s holds, 0 if it holds none. The state's LastSeq
// is not it when that message was deleted (JOBS once its latest groups are purged): replay waiting
// for it would wait for the next publish. It asks the stream's leader (the message get API, not a
// direct get, which any replica answers, a lagging one with an older last message: replay would
// then stop reading before the end).
func (r *run) lastHeld(ctx context.Context, info *jetstream.StreamInfo) (uint64, error) {
	if info.State.Msgs == 0 {
		return 0, nil
	}
	var last uint64
	for _, subject := range info.Config.Subjects {
		m, err := directget.LastBySubject(ctx, r.c.nc, info.Config.Name, subject)
		switch {
		case errors.Is(err, directget.ErrNotFound):
			continue // none on this subject
		case err != nil:
			return 0, err
		}
		last = max(last, m.Seq)
	}
	return last, nil
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

// replayOutcomes reads the outcomes already written for the open groups, up to the RESULTS
// stream's last sequence when it starts. It reads with one ordered consumer's Consume, which
// pulls ahead and recreates the consumer itself after a failure; calling Next one message at a
// time recreates the consumer per call, and on a cluster that failed with "no responders"
// after a few messages.
func (r *run) replayOutcomes(ctx context.Context) error {
	prefix := r.names.OutcomeSubject("")
	err := r.readStream(ctx, r.names.ResultsStream(), func(m jetstream.Msg) {
		openSeq, _ := strconv.ParseUint(m.Headers().Get(wire.HdrGroupSeq), 10, 64)
		lastSeq, _ := strconv.ParseUint(m.Headers().Get(wire.HdrLastSeq), 10, 64) // 0 from a release before it
		if outs, sum, err := wire.DecodeOutcomeMsg(m.Data()); err == nil {
			var at time.Time
			if md, err := m.Metadata(); err == nil {
				at = md.Timestamp
			}
			expires := m.Headers().Get(jetstream.MsgTTLHeader) != "" // written with a TTL: the server deletes it
			r.e.OutcomeReplay(strings.TrimPrefix(m.Subject(), prefix), openSeq, outs, sum, lastSeq, seq(m), at, expires)
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
		last uint64
		cons jetstream.Consumer
	)
	err := r.retry(ctx, "read "+stream, func(ctx context.Context) error {
		s, err := r.c.js.Stream(ctx, stream)
		if err != nil {
			return err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return err
		}
		if last, err = r.lastHeld(ctx, info); err != nil || last == 0 {
			return err
		}
		cons, err = s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
		return err
	})
	if err != nil || last == 0 {
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
	return drainUntil(ctx, ch, last, apply)
}

// newerRelease reports whether j, in a batch of pool, is a later release of its attempt than the
// one already found: of two batches of one attempt (one returned, then released again before
// the first was acknowledged), the later one is the attempt's current release.
func (r *run) newerRelease(pool string, j wire.WorkJob, found engine.AliveJob) bool {
	rel, _ := r.key.Verify(j.Proof, pool, j.ID, j.Attempt)
	return rel >= found.Rel
}

// aliveWork lists the jobs present in the WORK stream: released and not yet acknowledged.
func (r *run) aliveWork(ctx context.Context) (map[uint64]engine.AliveJob, error) {
	var alive map[uint64]engine.AliveJob
	prefix := r.names.WorkSubject("")
	work := r.c.directGet(r.names.WorkStream())
	defer work.Close()
	err := r.retry(ctx, "scan work", func(ctx context.Context) error {
		alive = map[uint64]engine.AliveJob{}
		return work.Scan(ctx, 1, 256, func(m *directget.Msg) error {
			jobs, err := wire.DecodeWork(m.Data)
			if err != nil {
				return nil // a malformed batch is the worker's to reject
			}
			pool := strings.TrimPrefix(m.Subject, prefix)
			wire.WorkProofs(m.Header, jobs)
			for _, j := range jobs {
				if a, seen := alive[j.ID]; seen && (j.Attempt < a.Attempt || j.Attempt == a.Attempt && !r.newerRelease(pool, j, a)) {
					continue
				}
				rel, _ := r.key.Verify(j.Proof, pool, j.ID, j.Attempt)
				alive[j.ID] = engine.AliveJob{Attempt: j.Attempt, Pool: pool, Rel: rel}
			}
			return nil
		})
	})
	return alive, err
}
