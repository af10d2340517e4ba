package integration_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/integration/jstest"
	"github.com/weavejobs/weave/worker"
)

// BenchmarkRedrive measures a redrive of a group of 1,000 failed jobs (128-byte payloads) on one
// worker × 64 slots whose handler always fails: each op asks the coordinator, which reads the
// failed outcomes and messages and publishes the new incarnation, and waits for its summary
// (every job failed again, so the next op redrives 1,000 again). It reports the time to the
// answer (answer-ms) beside the whole op, and a group of the same jobs published with Publish
// and run to its summary as the reference (publish-ms), in the same run.
//
//	go test -run='^$' -bench=Redrive -benchtime=10x ./integration/
func BenchmarkRedrive(b *testing.B) {
	const n = 1000
	srv := jstest.New(b)
	nc := jstest.NewConn(b, srv.ClientURL())
	const ns = "bench"
	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()
	if _, err := coordinator.InitNamespace(ctx, nc, ns, coordinator.StreamOptions{}); err != nil {
		b.Fatal(err)
	}
	c, err := coordinator.New(nc, coordinator.Config{Namespace: ns})
	if err != nil {
		b.Fatal(err)
	}
	w, err := worker.New(nc, worker.Config{Namespace: ns, Concurrency: 64}, worker.HandlerFunc(func(context.Context, *worker.Job) ([]byte, error) {
		return nil, worker.Permanent(errors.New("always"))
	}))
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 2)
	go func() { done <- c.Run(ctx) }()
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		for range 2 {
			if err := <-done; err != nil {
				b.Error(err)
			}
		}
	}()
	d, err := dispatcher.New(nc, dispatcher.Config{Namespace: ns, RequestTimeout: 30 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	payload := func(_ int, j *dispatcher.Job) { j.Payload = make([]byte, 128) }
	var publish time.Duration
	for _, g := range []string{"g", "reference"} { // the first also waits for the worker to join
		start := time.Now()
		h, err := d.Publish(ctx, g, jobs(n, payload))
		if err != nil {
			b.Fatal(err)
		}
		if sum, err := h.WaitSummary(ctx); err != nil || sum.Failed != n {
			b.Fatalf("group %s: %+v, %v", g, sum, err)
		}
		publish = time.Since(start)
	}
	var answer time.Duration
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		h, err := d.Redrive(ctx, "g")
		if err != nil || h.Accepted() != n {
			b.Fatalf("redrive: %v, %v", h, err)
		}
		answer += time.Since(t0)
		if sum, err := h.WaitSummary(ctx); err != nil || sum.Failed != n {
			b.Fatalf("redriven incarnation: %+v, %v", sum, err)
		}
	}
	b.ReportMetric(float64(answer.Milliseconds())/float64(b.N), "answer-ms")
	b.ReportMetric(float64(publish.Milliseconds()), "publish-ms")
}
