package worker

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrJobCanceled is the cause of a handler's context when its job was canceled (its group was
// canceled while it ran). The attempt is then reported canceled, and the job ends canceled.
var ErrJobCanceled = errors.New("weave: job canceled")

// canceledMemory is how long a cancellation is remembered for a job that has not started here,
// so a job canceled while queued on this worker never starts.
const canceledMemory = 10 * time.Minute

// cancelRegistry maps the jobs running on this worker to their context's cancel function.
// Written by slot goroutines (start, end), by the cancel subscription (cancel) and by the
// drain's deadline (forceAll).
//
// A handler's context is not a child of a cancelable context: the worker cancels it through
// here, for a cancellation request or at the drain's deadline. A child of a cancelable parent
// registers with it on creation and unregisters on cancel, under the parent's lock, which took
// an eighth of the worker's CPU draining a backlog on 64 slots (0.11 s of 0.85 s).
type cancelRegistry struct {
	mu      sync.Mutex
	running map[uint64]runningJob
	early   map[uint64]time.Time // canceled before starting here, by when it was canceled
	forced  bool                 // forceAll was called: every handler's context is canceled
	// queued is signaled (never blocking) when a cancellation names a job not running here: the
	// shepherd then reports at once those of them waiting in its queue.
	queued chan struct{}
}

// runningJob is a job whose handler runs here.
type runningJob struct {
	cancel  context.CancelCauseFunc
	started time.Time // when its handler started (held.go)
}

func newCancelRegistry() *cancelRegistry {
	return &cancelRegistry{running: map[uint64]runningJob{}, early: map[uint64]time.Time{}, queued: make(chan struct{}, 1)}
}

// start registers a job about to run and returns its context, derived from parent, which must
// not be cancelable (context.WithoutCancel): cancel and forceAll cancel it. canceled reports a
// job canceled before it started, which must not run.
func (r *cancelRegistry) start(parent context.Context, id uint64) (ctx context.Context, cancel context.CancelCauseFunc, canceled bool) {
	ctx, cancel = context.WithCancelCause(parent)
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.early[id]; ok {
		delete(r.early, id)
		cancel(ErrJobCanceled)
		return ctx, cancel, true
	}
	if r.forced {
		cancel(nil) // as its handler's context would have been with the others
	}
	r.running[id] = runningJob{cancel: cancel, started: time.Now()}
	return ctx, cancel, false
}

// end forgets a job whose handler returned.
func (r *cancelRegistry) end(id uint64) {
	r.mu.Lock()
	delete(r.running, id)
	r.mu.Unlock()
}

// forceAll cancels the context of every handler running or starting from now on (the drain ran
// out of time).
func (r *cancelRegistry) forceAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.forced = true
	for _, j := range r.running {
		j.cancel(nil)
	}
}

// cancel cancels the contexts of the given jobs running here, and remembers the others for a
// while in case they are queued here and about to start.
func (r *cancelRegistry) cancel(ids []uint64, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, at := range r.early {
		if now.Sub(at) > canceledMemory {
			delete(r.early, id)
		}
	}
	early := false
	for _, id := range ids {
		if j, ok := r.running[id]; ok {
			j.cancel(ErrJobCanceled)
			continue
		}
		r.early[id] = now
		early = true
	}
	if early {
		select {
		case r.queued <- struct{}{}:
		default: // one is pending: the shepherd looks at every early cancellation then
		}
	}
}

// takeEarly reports whether job id was canceled before it started here, and forgets it.
func (r *cancelRegistry) takeEarly(id uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.early[id]
	delete(r.early, id)
	return ok
}
