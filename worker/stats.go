package worker

import "sync/atomic"

// Stats is a snapshot of a worker's counters, from Worker.Stats. Counts are since New; gauges
// (Busy, Sleeping, Queued, Stuck, Draining, Held, Dormant) are the state at the time of the call.
type Stats struct {
	Busy     int  // slots assigned a job: running its handler or reporting it (Stuck included)
	Sleeping int  // slots waiting for work; Busy + Sleeping = Concurrency
	Queued   int  // jobs received and waiting for a slot
	Stuck    int  // handlers whose attempt was reported without them and that have not returned
	Draining bool // Run's context is done: no more pulls, running jobs finishing
	Held     int  // work batches received and not yet acknowledged (nor let go, their lease lapsed)
	Dormant  bool // idle for a pull's expiry: pulls wait longer at the server, without its heartbeats

	Batches          uint64 // work batches received
	MalformedBatches uint64 // work batches that could not be decoded, terminated
	Pulls            uint64 // pull requests sent to JetStream
	AcksWithPulls    uint64 // of them, sent as a work batch's acknowledgement (+NXT)
	Wakeups          uint64 // sleeping goroutines woken with a job (one per job, never more)
	SpuriousWakeups  uint64 // goroutines woken that found nothing to do: 0 by construction

	JobsRun    uint64 // handler calls started
	JobsOK     uint64 // attempts reported ok
	JobsFailed uint64 // attempts reported failed: error, permanent, panic, timeout, shutdown
	Panics     uint64 // handler panics (each also counts in JobsFailed once reported)
	Timeouts   uint64 // attempts failed because their deadline passed
	Abandoned  uint64 // attempts reported without waiting for their handler to return
	Returned   uint64 // jobs given back unrun at shutdown (not attempts)
	Lost       uint64 // attempts reported lost: found in a batch redelivered after its lease ran out
	Dropped    uint64 // jobs not started because their batch's lease lapsed here (the process was stopped)
	Canceled   uint64 // attempts ended because their job was canceled

	ReportBatches uint64 // report messages persisted by JetStream
	ReportRetries uint64 // report messages published again after a failure
}

// counters back Stats. Each field has one writer goroutine (named below) except where noted;
// atomics let Stats and heartbeats read them from anywhere.
type counters struct {
	// Written by the shepherd. Busy is Concurrency - sleeping, so the two always add up.
	sleeping, queued, stuck       atomic.Int64
	draining, dormant             atomic.Bool
	batches, malformed, pulls     atomic.Uint64
	acksWithPulls                 atomic.Uint64
	wakeups, jobsRun              atomic.Uint64
	jobsOK, jobsFailed            atomic.Uint64
	canceled                      atomic.Uint64
	timeouts, abandoned, returned atomic.Uint64
	lost, dropped                 atomic.Uint64

	// Written by slot goroutines (any of them).
	panics, spurious atomic.Uint64

	// Written by the completer.
	reportBatches, reportRetries atomic.Uint64
	held                         atomic.Int64 // its lease keeper's batches

	mx workerMetrics // written by the shepherd (metrics.go)
}

func (c *counters) snapshot(concurrency int) Stats {
	sleeping := int(c.sleeping.Load())
	return Stats{
		Busy:             concurrency - sleeping,
		Sleeping:         sleeping,
		Queued:           int(c.queued.Load()),
		Stuck:            int(c.stuck.Load()),
		Draining:         c.draining.Load(),
		Dormant:          c.dormant.Load(),
		Held:             int(c.held.Load()),
		Batches:          c.batches.Load(),
		MalformedBatches: c.malformed.Load(),
		Pulls:            c.pulls.Load(),
		AcksWithPulls:    c.acksWithPulls.Load(),
		Wakeups:          c.wakeups.Load(),
		SpuriousWakeups:  c.spurious.Load(),
		JobsRun:          c.jobsRun.Load(),
		JobsOK:           c.jobsOK.Load(),
		JobsFailed:       c.jobsFailed.Load(),
		Canceled:         c.canceled.Load(),
		Panics:           c.panics.Load(),
		Timeouts:         c.timeouts.Load(),
		Abandoned:        c.abandoned.Load(),
		Returned:         c.returned.Load(),
		Lost:             c.lost.Load(),
		Dropped:          c.dropped.Load(),
		ReportBatches:    c.reportBatches.Load(),
		ReportRetries:    c.reportRetries.Load(),
	}
}
