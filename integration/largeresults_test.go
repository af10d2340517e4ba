package integration_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/worker"
)

// TestLargeResultsFitOutcomeMessages: a group whose jobs all end at once with results near the
// worker's limit (64 jobs × 60 KiB, ten times the server's 1 MiB max payload) completes: the
// coordinator splits their outcomes into messages the server takes. Written as one message, the
// publish failed every time and the coordinator stalled on it.
func TestLargeResultsFitOutcomeMessages(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.coordinator(coordinator.Config{})
	const n = 64
	var mu sync.Mutex
	started := 0
	all := make(chan struct{}) // closed once every job runs: they end together
	e.worker(worker.Config{ID: "w", Concurrency: n}, func(ctx context.Context, j *worker.Job) ([]byte, error) {
		mu.Lock()
		if started++; started == n {
			close(all)
		}
		mu.Unlock()
		select {
		case <-all:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return bytes.Repeat([]byte{j.Payload[0]}, 60<<10), nil
	})
	h := e.publish("big", func(yield func(dispatcher.Job) bool) {
		for i := range n {
			if !yield(dispatcher.Job{Key: fmt.Sprintf("k%02d", i), Payload: []byte{byte('a' + i%26)}}) {
				return
			}
		}
	})
	ctx, cancel := context.WithTimeout(e.ctx, 60*time.Second)
	defer cancel()
	res, err := h.Wait(ctx)
	if err != nil || res.Summary.Done != n || len(res.Jobs) != n {
		t.Fatalf("group of %d large results: %v, %+v", n, err, res)
	}
	for _, o := range res.Jobs {
		if len(o.Result) != 60<<10 {
			t.Fatalf("job %s: result of %d bytes", o.Key, len(o.Result))
		}
	}
}

// TestLargeErrorHistoryFitsItsOutcome: a job that fails every attempt with an error near the
// worker's limit (60 KiB, 20 attempts: its history alone would be 1.2 MB against the server's
// 1 MiB max payload) ends failed, with its last error whole and its history cut to fit one
// message. Kept whole, the outcome could never be published and the coordinator stalled.
func TestLargeErrorHistoryFitsItsOutcome(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.coordinator(coordinator.Config{RetryBase: time.Millisecond, RetryMax: time.Millisecond})
	const attempts = 20
	e.worker(worker.Config{ID: "w", Concurrency: 1}, func(ctx context.Context, j *worker.Job) ([]byte, error) {
		return nil, fmt.Errorf("attempt %d: %s", j.Attempt, bytes.Repeat([]byte{'x'}, 60<<10))
	})
	h := e.publish("failing", func(yield func(dispatcher.Job) bool) {
		yield(dispatcher.Job{Key: "k", MaxAttempts: attempts})
	})
	ctx, cancel := context.WithTimeout(e.ctx, 60*time.Second)
	defer cancel()
	res, err := h.Wait(ctx)
	if err != nil || res.Summary.Failed != 1 || len(res.Jobs) != 1 {
		t.Fatalf("a job failing %d times with 60 KiB errors: %v, %+v", attempts, err, res.Summary)
	}
	o := res.Jobs[0]
	if o.Attempts != attempts || !strings.HasPrefix(o.Err, fmt.Sprintf("attempt %d: xxx", attempts)) || len(o.Err) < 60<<10 {
		t.Fatalf("outcome: %d attempts, last error of %d bytes starting %q", o.Attempts, len(o.Err), o.Err[:min(20, len(o.Err))])
	}
	if len(o.History) == 0 || !strings.HasPrefix(o.History[0].Err, "attempt 1: xxx") {
		t.Fatalf("history of %d attempts, first %+v", len(o.History), o.History[:min(1, len(o.History))])
	}
	size := len(o.Err)
	for _, a := range o.History {
		size += len(a.Err)
	}
	if size > 1<<20 {
		t.Fatalf("outcome of %d bytes of errors: over the max payload", size)
	}
}
