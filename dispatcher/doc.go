// Package dispatcher is Weave's producer library: it publishes groups of jobs into NATS JetStream
// and waits for their outcomes.
//
// # Publishing
//
// A group is a set of jobs that contend for one shared thing (a database shard, a remote host, a
// tenant's quota); Weave spreads the jobs of a group apart so they rarely run at the same time.
// Publish announces the group, streams its jobs and seals it:
//
//	d, err := dispatcher.New(nc, dispatcher.Config{})
//	h, err := d.Publish(ctx, "group-42", slices.Values(jobs))
//
// Jobs come from an iter.Seq[Job] and are pulled one at a time, as fast as the server acknowledges
// them, with at most Config.MaxPending publishes in flight. Workers can start on the first jobs
// while the producer is still generating the rest, and memory does not depend on the group's size;
// the iterator may even be endless, with ctx ending the group.
//
// On the wire (see ARCHITECTURE.md, "Publishing a group") a group is an open message, one message
// per job, and a seal message carrying the number of jobs accepted. Publish always seals a group
// it opened: after an invalid job, a failed publish, a canceled ctx or a panicking iterator it
// seals with the jobs accepted so far and returns the Handle together with the error.
//
// # Deduplication
//
// A job with a Key is stored at most once per group within the namespace's dedup window (set
// when its streams are created, default 2 minutes): a repeat is dropped by JetStream and counted in
// Handle.Duplicates. Publishing the same group again with the same keys (for example after the
// producer crashed before sealing) therefore adds only the jobs that are missing, then seals.
//
// # Waiting for the outcome
//
// The coordinator records each job's final state on the group's outcome subject in the RESULTS
// stream, and a summary once every job of the sealed group is final. Handle.Wait collects them;
// Handle.Outcomes streams them for groups too large to hold in memory; Handle.WaitSummary returns
// only the counts. Handle.WaitJob and Handle.WaitKey wait for one job, by its ID (see
// Handle.FirstID) or its Job.Key, and return as soon as that job is final, without waiting for the
// rest of its group; if the group finishes without the job, their error wraps ErrJobNotFound. All
// of them read from the stream, so a process that restarted can call Dispatcher.Attach with the
// group ID and wait again.
//
// # Failed jobs
//
// A job that failed (permanently, or out of attempts) stays inspectable for the coordinator's
// result retention (default 24 hours) after its group finished: the coordinator keeps its outcome, with
// the history of its attempts, and its message with the payload. Dispatcher.Failed lists the
// failed jobs still stored, of one group or of all. Dispatcher.Redrive asks the coordinator to
// run the failed jobs of a group's latest complete incarnation again (all of them, or the IDs
// given), as a new incarnation of the group ID, and returns its Handle. The coordinator decides,
// publishes the jobs (rebuilt from their stored messages) and answers, as it does for a cancel.
// It refuses with ErrGroupRunning while an incarnation of the group is not complete, with
// ErrNotFailed when there is nothing to redrive, and with ErrJobGone when the failed jobs'
// messages are no longer stored; in each case nothing runs again. With no coordinator answering,
// Redrive returns ErrNoAnswer: the request is stored and carried out when one reads it.
//
// # Inspection
//
// Dispatcher.Job and Dispatcher.JobByKey describe one job (its state, attempts with their errors,
// result or error, the pool and worker running it, when it was published, released and ended);
// Dispatcher.Group a group (its progress while it runs, its summary after); Dispatcher.Groups the
// active groups and those complete within the result retention. What has not ended comes from the
// running coordinator (ErrNoCoordinator without one), what ended from the streams.
//
// # Traces
//
// Each job carries the W3C trace context of the ctx given to Publish, so a worker's handler
// continues the producer's trace. With a tracer provider (Config.TracerProvider, or
// OpenTelemetry's global one) Publish records a weave.publish span; with none nothing is
// recorded.
//
// # Errors
//
// Errors wrap one of the package's sentinels (ErrInvalidConfig, ErrInvalidGroup, ErrInvalidJob,
// ErrNotOpened, ErrNotSealed, ErrMalformedOutcome, ErrJobNotFound, ErrGroupRunning, ErrNotFailed,
// ErrJobGone, ErrGroupNotOpen, ErrNoAnswer, ErrNoCoordinator, ErrGroupNotFound), a context error
// or a NATS client error, and can be examined with errors.Is.
package dispatcher
