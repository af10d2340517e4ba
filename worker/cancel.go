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
// Written by slot goroutines (start, end) and by the cancel subscription (cancel).
type cancelRegistry struct {
	mu      sync.Mutex
	running map[uint64]context.CancelCauseFunc
	started map[uint64]time.Time // when each running job's handler started (held.go)
	early   map[uint64]time.Time // canceled before starting here, by when it was canceled
}

func newCancelRegistry() *cancelRegistry {
	return &cancelRegistry{running: map[uint64]context.CancelCauseFunc{}, started: map[uint64]time.Time{}, early: map[uint64]time.Time{}}
}

// start registers a job about to run and returns its context; canceled reports a job canceled
// before it started, which must not run.
func (r *cancelRegistry) start(parent context.Context, id uint64) (ctx context.Context, cancel context.CancelCauseFunc, canceled bool) {
	ctx, cancel = context.WithCancelCause(parent)
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.early[id]; ok {
		delete(r.early, id)
		cancel(ErrJobCanceled)
		return ctx, cancel, true
	}
	r.running[id] = cancel
	r.started[id] = time.Now()
	return ctx, cancel, false
}

// end forgets a job whose handler returned.
func (r *cancelRegistry) end(id uint64) {
	r.mu.Lock()
	delete(r.running, id)
	delete(r.started, id)
	r.mu.Unlock()
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
	for _, id := range ids {
		if c, ok := r.running[id]; ok {
			c(ErrJobCanceled)
			continue
		}
		r.early[id] = now
	}
}
