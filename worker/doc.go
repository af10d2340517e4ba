// Package worker runs Weave jobs: it pulls work batches released by the coordinator from
// NATS JetStream, runs them on a fixed number of goroutines (its slots, Config.Concurrency), and
// reports every attempt's outcome.
//
// # Usage
//
//	w, err := worker.New(nc, worker.Config{Resources: []string{"shard-7"}, Concurrency: 6},
//		worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
//			return process(ctx, j.Payload)
//		}))
//	if err != nil { ... }
//	err = w.Run(ctx) // blocks; drains when ctx is done
//
// Workers that hold the same Resources form a pool and share one durable JetStream consumer;
// the coordinator routes each job to a pool that holds what it requires or prefers. Workers find
// the coordinator through the Namespace only: start them in any order.
//
// # Handlers and outcomes
//
// A Handler returns a result or an error. An error fails the attempt and the coordinator retries
// the job with back-off until its attempts run out; wrap the error with Permanent to fail the
// job at once, or with RetryAfter to ask for a delay. A panic fails the attempt like an error (its
// stack is logged). A result larger than Config.MaxResultSize fails the job permanently.
//
// Delivery is at least once: a job may run again after a crash, a lost acknowledgement or a
// lease that ran out, so handlers must be idempotent.
//
// # Deadlines
//
// The handler's context has the job's timeout as its deadline, else Config.DefaultTimeout, else
// none. An attempt still running at its deadline has failed ("timeout after 30s"), even if the
// handler later returns a result. If the handler ignores its context, the worker reports the
// attempt Config.TimeoutGrace after the deadline without waiting any longer; the goroutine stays
// busy (its slot is lost) until the handler returns. Stats.Stuck counts such handlers.
//
// # Concurrency and wakeups
//
// Exactly Config.Concurrency goroutines run handlers. One goroutine, the shepherd, owns the
// worker's state: it pulls from JetStream only for slots that are free, asking for at most as
// many messages as there are free slots (long-poll requests: an idle worker sends one per 10
// seconds, and once dormant, after one has expired without work, one a minute without the
// server's heartbeats, so that a fleet of idle workers costs the server little; see
// Stats.Dormant), and queues the jobs of each message it receives. A
// slot that finishes a job is handed the next queued job directly, without waking anyone; only
// jobs that no awake slot takes wake a sleeping slot, exactly one per job, so no goroutine is
// woken for nothing (Stats.SpuriousWakeups stays 0).
//
// # Reports and acknowledgements
//
// Outcomes are sent in batches, up to Config.MaxReportBatch reports or after
// Config.ReportLinger, to the worker's report subject in the EVENTS stream, with asynchronous
// publishes. A work batch is acked only once JetStream has persisted the reports of all its
// jobs, so a crash can repeat an attempt but never lose an outcome. Each report echoes its job's
// release proof from the batch (the Weave-Proof header), by which a coordinator that restarted
// after the batch was acked knows the report is about a job released to this pool, and accepts
// it. While a batch is not acked the worker extends its lease every Config.Lease/3. An
// extension counts once the server confirms it; a worker that has had no confirmation for a
// whole lease (stopped, or cut off from the server) starts none of the batch's queued jobs,
// since the server may have given the batch to another worker.
//
// # Shutdown
//
// When Run's context is done the worker drains: it stops pulling, returns the jobs it holds but
// has not started (reported with the wire status "released"; no attempt is counted, and the
// coordinator releases them again), and lets running jobs finish for up to
// Config.DrainTimeout. Then it cancels their contexts, waits Config.TimeoutGrace more, reports
// what is still running as failed, flushes its reports, acks its batches and sends a last
// heartbeat saying it has stopped. Run returns nil after such a drain.
//
// # Observability
//
// Every Config.HeartbeatInterval the worker publishes a heartbeat (core NATS, JSON, see
// wire.Heartbeat) on NS.hb.<pool>.<worker> with its pool, resources and how many slots are busy
// and sleeping; the coordinator uses it to route work and `weave status` shows it. Worker.Stats
// returns counters for metrics and benchmarks.
//
// A job published with a trace context (OpenTelemetry, W3C traceparent) gives its handler a ctx
// that continues the producer's trace. With a tracer provider (Config.TracerProvider, or the
// global one) each attempt records the spans weave.queue, weave.run and weave.outcome; with none,
// tracing costs an untraced job nothing.
//
// # Identity and permissions
//
// A worker publishes only on subjects naming its pool and ID (heartbeats, its join request
// NS.api.join.<pool>.<worker>, reports NS.ev.report.<pool>.<worker>) and uses only its pool's
// consumer, so a NATS user can be limited to exactly one worker (see `weave auth`). Before it
// pulls any work, Run asks the running coordinator whether its ID is free; if another process
// runs with the ID, Run returns an error wrapping ErrDuplicateID (a worker restarted after a
// crash first waits for the coordinator to forget its dead run). With no coordinator running it
// starts, and stops with ErrDuplicateID if a coordinator that starts later finds it a duplicate.
package worker
