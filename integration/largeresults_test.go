package integration_test

import (
	"bytes"
	"context"
	"fmt"
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
