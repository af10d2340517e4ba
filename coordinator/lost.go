package coordinator

import (
	"context"
	"fmt"
	"time"

	"github.com/weavejobs/weave/internal/wire"
)

// Batches lost in delivery (see fleet.lost).
//
// A work batch the server delivered to a worker's connection that was cut (a node lost with the
// connection, or a consumer leader lost while sending) never arrives. JetStream counts it
// delivered and sends it again only when its lease (the consumer's AckWait, the workers' Lease,
// 30 s by default) runs out; while such batches hold every job released to a pool, nothing more
// is released to it and its workers sit idle for the rest of the lease. When the pool's workers
// have all said, for lostAfter, that they run nothing and hold no batch, and nothing was released
// to the pool since, and the pool's consumer has nothing left to deliver but batches delivered and
// unacknowledged, the coordinator takes back what is left on the pool's work subject: as a
// rescue does, it stores a returned report for the batch's jobs on the pool's rescue
// report subject, then deletes the batch from WORK, and the jobs are released again keeping
// their attempt numbers. A crash in between leaves the batch, taken back again or, after its
// lease, reported lapsed by the worker that gets it.

// reconcileLost starts taking back the lost batches of each pool fleet.lost names, unless that
// is under way already. Called by the loop.
func (r *run) reconcileLost(ctx context.Context) {
	if r.e.Replaying() {
		return
	}
	for _, key := range r.e.LostPools(r.cfg.now()) {
		r.lostMu.Lock()
		busy := r.recovering[key]
		if !busy {
			r.recovering[key] = true
		}
		r.lostMu.Unlock()
		if busy {
			continue
		}
		r.wg.Go(func() {
			defer func() {
				r.lostMu.Lock()
				delete(r.recovering, key)
				r.lostMu.Unlock()
			}()
			if err := r.takeBackLost(ctx, key); err != nil && ctx.Err() == nil {
				// Tried again at the next check: part of an outage, not a warning each time.
				r.log.Debug().Err(err).Str("pool", key).Msg("take back work batches lost in delivery")
				r.outage.Once("take back lost work of pool "+key, err, time.Now())
			}
		})
	}
}

// takeBackLost returns the jobs of every batch left on pool's work subject and deletes the
// batches.
func (r *run) takeBackLost(ctx context.Context, pool string) error {
	stream, subject := r.names.WorkStream(), r.names.WorkSubject(pool)
	// Lost batches are delivered and unacknowledged. Batches still waiting to be delivered mean
	// the workers cannot pull (an election, a permission): those are not lost, and taking them
	// back would only put them back.
	cons, err := r.c.js.Consumer(ctx, stream, r.names.WorkConsumer(pool)) // its info, fetched now
	if err != nil {
		return fmt.Errorf("look up the pool's consumer: %w", err)
	}
	if info := cons.CachedInfo(); info.NumPending > 0 || info.NumAckPending == 0 {
		return nil
	}
	work := r.c.directGet(stream)
	defer work.Close()
	msgs, err := work.Next(ctx, subject, 1, r.cfg.MaxBatch)
	if err != nil {
		return fmt.Errorf("read the pool's work: %w", err)
	}
	if len(msgs) == 0 {
		return nil
	}
	ws, err := r.stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("look up %s: %w", stream, err)
	}
	batches, taken := 0, 0
	defer func() {
		if batches > 0 { // one line for them all: the system mends this by itself
			r.log.Info().Str("pool", pool).Int("batches", batches).Int("jobs", taken).
				Msg("work batches lost in delivery (the pool's workers hold nothing and run nothing): their jobs are released again")
		}
	}()
	for _, m := range msgs {
		jobs, err := wire.DecodeWork(m.Data)
		wire.WorkProofs(m.Header, jobs)
		if err != nil || len(jobs) == 0 {
			continue // a malformed batch is a worker's to reject
		}
		if err := r.storeRescueReports(ctx, pool, returnedReports(jobs)); err != nil {
			return err
		}
		if err := ws.DeleteMsg(ctx, m.Seq); err != nil {
			return fmt.Errorf("delete work batch %d: %w", m.Seq, err)
		}
		batches, taken = batches+1, taken+len(jobs)
		r.log.Debug().Str("pool", pool).Uint64("seq", m.Seq).Int("jobs", len(jobs)).Msg("work batch lost in delivery: its jobs are released again")
	}
	return nil
}
