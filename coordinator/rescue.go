package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/internal/topology"
	"github.com/weavejobs/weave/internal/wire"
)

// Rescue takes back the jobs of a pool left without live workers (see fleet.orphans).
//
// A pool's jobs wait in WORK on the pool's subject, read by the pool's durable consumer; when
// the last worker of the pool is gone, nobody reads them. The coordinator then reads that
// consumer itself, as one more worker of the pool would, and returns every job with a
// returned report (wire.StatusReturned), the same report a draining worker sends for the jobs it did not run: the
// report is stored in EVENTS first and the batch acked after, so a crash in between leaves the
// batch in WORK (rescued again) and never loses a job. The loop applies the report like any
// other, and the job is released again, to a pool that can run it, keeping its attempt number.
//
// Batches not yet delivered come at once; a batch a dead worker had taken comes when its lease
// (the consumer's AckWait) runs out, and its jobs are reported lapsed instead (a failed attempt:
// the worker may have run them), as a worker of the pool would report them. A rescue stops as
// soon as the pool has a worker again or nothing released to it is left.

// rescueFetch is how long one pull request of a rescue waits at the server for a batch.
const rescueFetch = time.Second

// reconcileRescues starts a rescue for each pool fleet.orphans names and stops the others.
// Called by the loop.
func (r *run) reconcileRescues(ctx context.Context) {
	want := map[string]bool{}
	for _, key := range r.e.OrphanPools(r.cfg.now(), r.cfg.RescueAfter) {
		want[key] = true
		if _, ok := r.rescues[key]; ok {
			continue
		}
		rctx, cancel := context.WithCancel(ctx)
		r.rescues[key] = cancel
		r.log.Warn().Str("pool", key).Msg("pool has no live worker: rescuing its jobs")
		r.wg.Go(func() { r.rescue(rctx, key) })
	}
	for key, cancel := range r.rescues {
		if !want[key] {
			cancel()
			delete(r.rescues, key)
		}
	}
}

// rescue reads the pool's consumer until ctx is done, returning every job it finds.
func (r *run) rescue(ctx context.Context, pool string) {
	var cons jetstream.Consumer
	for ctx.Err() == nil {
		if cons == nil {
			var err error
			if cons, err = r.rescueConsumer(ctx, pool); err != nil {
				r.log.Warn().Err(err).Str("pool", pool).Msg("rescue: bind the pool's consumer")
				sleepCtx(ctx, rescueFetch)
				continue
			}
		}
		fctx, cancel := context.WithTimeout(ctx, rescueFetch)
		batch, err := cons.Fetch(r.cfg.MaxBatch, jetstream.FetchContext(fctx))
		if err == nil {
			for m := range batch.Messages() {
				if err := r.handBack(ctx, pool, m); err != nil && ctx.Err() == nil {
					r.log.Warn().Err(err).Str("pool", pool).Msg("rescue: hand back a batch")
				}
			}
			err = batch.Error()
		}
		cancel()
		// A fetch that failed (the consumer's leader gone during an election, say) is tried
		// again a moment later, binding the consumer afresh: the rescue goes on for as long
		// as the pool needs it.
		if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) && ctx.Err() == nil {
			r.log.Warn().Err(err).Str("pool", pool).Msg("rescue: fetch")
			cons = nil
			sleepCtx(ctx, rescueFetch)
		}
	}
}

// rescueConsumer binds to the pool's durable consumer, which the pool's workers created. If it
// is gone (deleted by hand), it is created again with the default lease.
func (r *run) rescueConsumer(ctx context.Context, pool string) (jetstream.Consumer, error) {
	stream := r.names.WorkStream()
	cons, err := r.c.js.Consumer(ctx, stream, r.names.WorkConsumer(pool))
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return r.c.js.CreateConsumer(ctx, stream, topology.WorkConsumer(r.names, pool, topology.DefaultLease))
	}
	return cons, err
}

// handBack stores a returned report for every job of the batch m of pool, on the pool's rescue
// report subject (NS.ev.report.<pool>.~coordinator), then acks m. A batch that
// does not decode can never run anywhere: it is terminated and recorded as rejected, as a worker
// would.
func (r *run) handBack(ctx context.Context, pool string, m jetstream.Msg) error {
	jobs, err := wire.DecodeWork(m.Data())
	wire.WorkProofs(m.Headers(), jobs)
	if err == nil && len(jobs) == 0 {
		err = fmt.Errorf("%w: work batch without jobs", wire.ErrMalformed)
	}
	if err != nil {
		var seq uint64
		if md, merr := m.Metadata(); merr == nil {
			seq = md.Sequence.Stream
		}
		rec := r.rejectionMsg(m.Subject(), seq, err.Error())
		if _, err := r.c.js.PublishMsg(ctx, rec); err != nil {
			// Not recorded: the batch comes back after its AckWait and is rejected then.
			return fmt.Errorf("record rejection: %w", err)
		}
		return m.TermWithReason("weave: " + err.Error())
	}
	var reports []wire.Report
	if md, err := m.Metadata(); err == nil && md.NumDelivered > 1 {
		// The dead worker had taken the batch (redelivered): its attempts lapsed, as a worker would report.
		reports = wire.LapsedReports(jobs, md.NumDelivered)
	} else {
		reports = returnedReports(jobs)
	}
	if err := r.storeRescueReports(ctx, pool, reports); err != nil {
		return err // not stored: the batch comes back after its AckWait and is rescued then
	}
	return m.DoubleAck(ctx)
}

// returnedReports give a batch's jobs back unrun, keeping their attempts (wire.StatusReturned)
// and echoing their release proofs, as a worker's would.
func returnedReports(jobs []wire.WorkJob) []wire.Report {
	reports := make([]wire.Report, len(jobs))
	for i, j := range jobs {
		reports[i] = wire.Report{ID: j.ID, Attempt: j.Attempt, Status: wire.StatusReturned, Proof: j.Proof}
	}
	return reports
}

// storeRescueReports stores reports the coordinator makes for jobs of pool it takes back (a
// rescue, a batch lost in delivery) on the pool's rescue report subject, and waits until they are
// stored.
func (r *run) storeRescueReports(ctx context.Context, pool string, reports []wire.Report) error {
	subject := r.names.ReportSubject(pool, wire.RescueWorker)
	m := nats.NewMsg(subject)
	m.Data = wire.AppendReports(nil, wire.RescueWorker, reports)
	m.Header = wire.SetReportProofs(m.Header, reports)
	if _, err := r.c.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("store returned report: %w", err)
	}
	return nil
}

// sleepCtx waits d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
