package integration_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/internal/testwait"
	"github.com/weavejobs/weave/worker"
)

// orderLog records the payloads of the jobs a worker started, in order.
type orderLog struct {
	mu    sync.Mutex
	order []int
}

func (l *orderLog) handler(block <-chan struct{}) worker.HandlerFunc {
	return func(ctx context.Context, j *worker.Job) ([]byte, error) {
		i, _ := strconv.Atoi(string(j.Payload))
		l.mu.Lock()
		l.order = append(l.order, i)
		first := len(l.order) == 1
		l.mu.Unlock()
		if first && block != nil {
			select {
			case <-block:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return nil, nil
	}
}

func (l *orderLog) got() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.order)
}

// waitPending waits until the coordinator counts n of group's jobs pending.
func (e *env) waitPending(group string, n int) {
	e.t.Helper()
	testwait.For(e.t, 30*time.Second, fmt.Sprintf("%d jobs of %s pending", n, group), func() bool {
		gi, err := e.d.Group(e.ctx, group)
		return err == nil && gi.Jobs[dispatcher.StatePending] == n
	})
}

// TestJobPrioritiesWithinGroup: a group's jobs, published in runs of one priority (so packs cut
// at each change), run the highest priority first and each priority's in publish order, on a
// one-slot worker that joins once they are all pending.
func TestJobPrioritiesWithinGroup(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.coordinator(coordinator.Config{Prefetch: -1})
	prio := func(i int) int { return []int{0, 3, 1, 3, 0, 9}[i/6] }
	h := e.publish("g", func(yield func(dispatcher.Job) bool) {
		for i := range 36 {
			if !yield(dispatcher.Job{Payload: []byte(strconv.Itoa(i)), Priority: prio(i)}) {
				return
			}
		}
	})
	e.waitPending("g", 36)
	// Read while it waits: once its group completes, its message (which holds its priority) goes.
	if info, err := e.d.Job(e.ctx, h.LastID()); err != nil || info.Priority != 9 {
		t.Fatalf("the last job: %+v, %v; want priority 9", info, err)
	}
	var log orderLog
	e.worker(worker.Config{Concurrency: 1}, log.handler(nil))
	if res := e.wait(h); res.Summary.Done != 36 {
		t.Fatalf("%d of 36 jobs done", res.Summary.Done)
	}
	want := make([]int, 36)
	for i := range want {
		want[i] = i
	}
	slices.SortStableFunc(want, func(a, b int) int { return prio(b) - prio(a) })
	if got := log.got(); !slices.Equal(got, want) {
		t.Fatalf("jobs ran in the order\n%v, want\n%v", got, want)
	}
}

// TestUrgentJobOvertakesItsGroup: a job of priority 9 published while its group runs goes ahead
// of the group's jobs still waiting.
func TestUrgentJobOvertakesItsGroup(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.coordinator(coordinator.Config{Prefetch: -1})
	block := make(chan struct{})
	var log orderLog
	e.worker(worker.Config{Concurrency: 1}, log.handler(block))
	e.waitWorkers(1)
	urgent := make(chan struct{})
	published := make(chan *dispatcher.Handle, 1)
	go func() {
		h, err := e.d.Publish(e.ctx, "g", func(yield func(dispatcher.Job) bool) {
			for i := range 10 {
				if !yield(dispatcher.Job{Payload: []byte(strconv.Itoa(i))}) {
					return
				}
			}
			<-urgent
			yield(dispatcher.Job{Payload: []byte("99"), Priority: 9})
		})
		if err != nil {
			t.Errorf("publish: %v", err)
		}
		published <- h
	}()
	testwait.For(t, 30*time.Second, "the first job to start", func() bool { return len(log.got()) == 1 })
	e.waitPending("g", 9)
	close(urgent)
	e.waitPending("g", 10)
	close(block)
	h := <-published
	if h == nil {
		t.FailNow()
	}
	if res := e.wait(h); res.Summary.Done != 11 {
		t.Fatalf("%d of 11 jobs done", res.Summary.Done)
	}
	if got, want := log.got(), []int{0, 99, 1, 2, 3, 4, 5, 6, 7, 8, 9}; !slices.Equal(got, want) {
		t.Fatalf("jobs ran in the order %v, want %v", got, want)
	}
}

// TestSingleJobPriority: a single job's Priority is its group's, and giving it two ways that
// differ is refused at the API.
func TestSingleJobPriority(t *testing.T) {
	t.Parallel()
	e := setup(t)
	_, _, err := e.d.Submit(e.ctx, "s", dispatcher.Job{Priority: 3}, dispatcher.Priority(4))
	if !errors.Is(err, dispatcher.ErrInvalidOption) {
		t.Fatalf("Submit with Job.Priority 3 and Priority(4): %v, want ErrInvalidOption", err)
	}
	_, _, err = e.d.Submit(e.ctx, "s", dispatcher.Job{Priority: 10})
	if !errors.Is(err, dispatcher.ErrInvalidJob) {
		t.Fatalf("Submit with Job.Priority 10: %v, want ErrInvalidJob", err)
	}
	if _, _, err := e.d.Submit(e.ctx, "s", dispatcher.Job{Priority: 3}); err != nil {
		t.Fatal(err)
	}
	e.coordinator(coordinator.Config{})
	testwait.For(t, 30*time.Second, "group s pending at priority 3", func() bool {
		gi, err := e.d.Group(e.ctx, "s")
		return err == nil && gi.Priority == 3 && gi.Jobs[dispatcher.StatePending] == 1
	})
}

// TestGroupPriorityGoesFirst: with a one-slot worker joining once both are pending, every job of
// the group of priority 5 runs before any of the group of priority 0 published before it.
func TestGroupPriorityGoesFirst(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.coordinator(coordinator.Config{Prefetch: -1})
	payloads := func(base int) func(yield func(dispatcher.Job) bool) {
		return func(yield func(dispatcher.Job) bool) {
			for i := range 5 {
				if !yield(dispatcher.Job{Payload: []byte(strconv.Itoa(base + i))}) {
					return
				}
			}
		}
	}
	low := e.publish("low", payloads(0))
	high, err := e.d.Publish(e.ctx, "high", payloads(100), dispatcher.Priority(5))
	if err != nil {
		t.Fatal(err)
	}
	e.waitPending("low", 5)
	e.waitPending("high", 5)
	var log orderLog
	e.worker(worker.Config{Concurrency: 1}, log.handler(nil))
	e.wait(low)
	e.wait(high)
	if got, want := log.got(), []int{100, 101, 102, 103, 104, 0, 1, 2, 3, 4}; !slices.Equal(got, want) {
		t.Fatalf("jobs ran in the order %v, want %v", got, want)
	}
}
