package worker

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/weavejobs/weave/internal/tracing"
	"github.com/weavejobs/weave/internal/wire"
)

// task is one job of a work batch on its way through the worker.
type task struct {
	job     Job
	timeout time.Duration // deadline in force: the job's timeout, else DefaultTimeout; 0 = none
	batch   *batch
	trace   string // the job's trace context (wire.JobTrace), or ""
	proof   string // the release's proof (wire.WorkJob.Proof), echoed in the report

	// Owned by the shepherd. started is when the task was handed to a slot; reported is set
	// once the attempt's outcome went to the completer, so that an outcome arriving later
	// (from a handler that overran its deadline) is discarded.
	started  time.Time
	reported bool
}

// kind classifies an outcome for the counters.
type kind uint8

const (
	kindOK kind = iota
	kindError
	kindPermanent
	kindPanic
	kindTimeout
	kindShutdown
	kindCanceled
	kindReturned // given back unrun at a drain (wire.StatusReturned)
	kindLost
)

type outcome struct {
	report wire.Report
	kind   kind
	span   trace.Span // weave.outcome, ended once the report is stored (trace.go); nil if untraced
}

// completion is what a slot goroutine sends the shepherd after a handler returns.
type completion struct {
	task    *task
	out     outcome
	dropped bool         // not run: its batch's lease had lapsed when the slot got to it (see slot)
	slot    chan<- *task // the slot's own channel: its next task goes there, now or when it comes
}

// slots runs handlers on exactly Concurrency goroutines, the slots. Each slot has a channel of
// its own (capacity one) and waits on it for a task from the shepherd; after running it, it
// sends the outcome to the shepherd and waits again. The shepherd answers with the next queued
// task at once if there is one (the slot takes queued work without sleeping), or keeps the
// slot's channel among its sleepers until a job comes: it never sends a slot anything but a
// task, so no goroutine is woken for nothing. (The worker's pool is something else: the workers
// holding the same resources, cfg.pool.)
type slots struct {
	handler   Handler
	base      context.Context // parent of every handler's context: ctx's values, never canceled (cancels cancels them)
	forced    context.Context // canceled when the drain ran out of time and forced the handlers' contexts
	cancels   *cancelRegistry // running jobs' contexts, for cancellation requests
	grace     time.Duration   // TimeoutGrace
	maxResult int
	log       zerolog.Logger
	stats     *counters
	lapsed    func(*task) bool // whether the task's batch's lease has lapsed (batch.lapsed)
	tracer    *tracing.Tracer  // see trace.go
	workerID  string

	done    chan<- completion // read by the shepherd
	expired chan<- *task      // written by watchdog timers; read by the shepherd
	quit    <-chan struct{}   // closed by the shepherd when it returns: slots not in a handler return
	exited  chan<- struct{}   // one signal per slot goroutine that returns; Run counts them
}

// start launches a slot goroutine on each of the channels, which it waits on for tasks.
func (sl *slots) start(channels []chan *task) {
	for _, own := range channels {
		go sl.slot(own, nil)
	}
}

// slot is one slot's goroutine, waiting for tasks on own. If carry is set, the goroutine starts
// by reporting it: it replaces a goroutine that a handler ended with runtime.Goexit.
func (sl *slots) slot(own chan *task, carry *completion) {
	var (
		cur   *task // the task whose handler is running, for the Goexit case
		start time.Time
		clean bool
	)
	defer func() {
		if clean {
			sl.exited <- struct{}{}
			return
		}
		// Panics are recovered in call, so only runtime.Goexit (t.FailNow in a handler, for
		// example) ends the goroutine here. Fail the attempt and put a new goroutine in the slot.
		sl.log.Error().Uint64("job", cur.job.ID).Msg("worker: handler called runtime.Goexit")
		c := completion{task: cur, out: sl.failure(cur, time.Since(start), kindError, wire.StatusError,
			"handler called runtime.Goexit")}
		go sl.slot(own, &c)
	}()

	var out completion
	pending := carry != nil
	if pending {
		out = *carry
	}
	for {
		if pending {
			out.slot = own
			select {
			case sl.done <- out:
			case <-sl.quit:
				clean = true
				return
			}
			pending = false
		}
		var t *task
		select {
		case t = <-own:
		case <-sl.quit:
			clean = true
			return
		}
		if t == nil {
			sl.stats.spurious.Add(1) // never sent: see slots
			continue
		}
		// The shepherd checked the lease when it handed the task over; check again right before
		// the handler runs: a process stopped in between (SIGSTOP, a VM pause) must not start a
		// job its lease no longer covers, which the server has redelivered.
		if sl.lapsed(t) {
			out, pending = completion{task: t, dropped: true}, true
			continue
		}
		cur, start = t, time.Now()
		out = completion{task: t, out: sl.execute(t, start)}
		pending = true
	}
}

// execute runs one attempt and maps its result to an outcome.
func (sl *slots) execute(t *task, start time.Time) outcome {
	ctx, cancel, canceled := sl.cancels.start(sl.base, t.job.ID)
	defer sl.cancels.end(t.job.ID)
	defer cancel(nil)
	if canceled {
		return sl.failure(t, 0, kindCanceled, wire.StatusCanceled, canceledQueued)
	}
	if t.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t.timeout)
		defer cancel()
		// The watchdog reports the attempt if the handler ignores its deadline.
		watchdog := time.AfterFunc(t.timeout+sl.grace, func() {
			select {
			case sl.expired <- t:
			case <-sl.quit:
			}
		})
		defer watchdog.Stop()
	}
	ctx, traced := sl.traceRun(ctx, t, start)
	result, err, panicked := sl.call(ctx, t)
	out := sl.outcome(ctx, t, time.Since(start), result, err, panicked)
	if traced != nil {
		out = traced(out) // by value: a pointer to out would move it to the heap for every job
	}
	return out
}

// call runs the handler, turning a panic into an error.
func (sl *slots) call(ctx context.Context, t *task) (result []byte, err error, panicked bool) {
	defer func() {
		if v := recover(); v != nil {
			panicked = true
			err = fmt.Errorf("panic: %v", v)
			sl.stats.panics.Add(1)
			sl.log.Error().Uint64("job", t.job.ID).Str("group", t.job.Group).Int("attempt", t.job.Attempt).
				Str("panic", fmt.Sprint(v)).Str("stack", string(debug.Stack())).Msg("worker: handler panicked")
		}
	}()
	j := t.job // a copy: the handler cannot change what is reported
	result, err = sl.handler.Handle(ctx, &j)
	return result, err, false
}

// outcome maps what a handler returned to the attempt's report.
func (sl *slots) outcome(ctx context.Context, t *task, took time.Duration, result []byte, err error, panicked bool) outcome {
	switch {
	case panicked:
		return sl.failure(t, took, kindPanic, wire.StatusError, err.Error())
	case errors.Is(context.Cause(ctx), ErrJobCanceled):
		// The job was canceled while it ran: whatever the handler returned, the job ends canceled.
		text := "job canceled while running"
		if err != nil {
			text += ": " + err.Error()
		}
		return sl.failure(t, took, kindCanceled, wire.StatusCanceled, text)
	case t.timeout > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded):
		// A result that comes after the deadline is discarded: the deadline is a contract the
		// coordinator also relies on.
		text := fmt.Sprintf("timeout after %v", t.timeout)
		if err != nil {
			text += ": " + err.Error()
		}
		return sl.failure(t, took, kindTimeout, wire.StatusError, text)
	case err == nil && len(result) > sl.maxResult:
		return sl.failure(t, took, kindPermanent, wire.StatusPermanent,
			fmt.Sprintf("result of %d bytes exceeds MaxResultSize (%d bytes)", len(result), sl.maxResult))
	case err == nil:
		return outcome{kind: kindOK, report: wire.Report{
			ID: t.job.ID, Attempt: uint32(t.job.Attempt), Status: wire.StatusOK, Duration: clampDuration(took), Data: result,
		}}
	}
	var perm *permanentError
	if errors.As(err, &perm) {
		return sl.failure(t, took, kindPermanent, wire.StatusPermanent, err.Error())
	}
	k, text := kindError, err.Error()
	if sl.forced.Err() != nil {
		k, text = kindShutdown, "canceled at worker shutdown: "+text
	}
	out := sl.failure(t, took, k, wire.StatusError, text)
	var retry *retryAfterError
	if errors.As(err, &retry) {
		out.report.RetryAfter = retryDelay(retry.after)
	}
	return out
}

// failure builds a failed attempt's outcome.
func (sl *slots) failure(t *task, took time.Duration, k kind, st wire.Status, text string) outcome {
	return outcome{kind: k, report: wire.Report{
		ID: t.job.ID, Attempt: uint32(t.job.Attempt), Status: st, Duration: clampDuration(took),
		Data: []byte(wire.Truncate(text, sl.maxResult)),
	}}
}

// clampDuration keeps a duration within what a report can carry.
func clampDuration(d time.Duration) time.Duration {
	return max(0, min(d, wire.MaxTimeout))
}

// retryDelay maps a requested delay to the report's millisecond field: rounded up, at most
// wire.MaxTimeout; 0 (the coordinator's policy) for d <= 0.
func retryDelay(d time.Duration) time.Duration {
	switch {
	case d <= 0:
		return 0
	case d >= wire.MaxTimeout:
		return wire.MaxTimeout
	}
	return (d + time.Millisecond - 1).Truncate(time.Millisecond)
}
