package integration_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/integration/jstest"
	"github.com/weavejobs/weave/internal/wire"
	"github.com/weavejobs/weave/worker"
)

// BenchmarkGroupBehindUnsealed measures how long a group of 50 no-op jobs takes from Publish to
// its summary on a fleet of one worker × 4 slots, with no other group and behind 1,000 groups
// opened and never sealed (producers that died after their open). Each op publishes a new
// group; the figure to compare is ms/group between the two sub-benchmarks, taken in the same run.
//
//	go test -run='^$' -bench=GroupBehindUnsealed -benchtime=20x ./integration/
func BenchmarkGroupBehindUnsealed(b *testing.B) {
	for _, unsealed := range []int{0, 1000} {
		b.Run(fmt.Sprint("unsealed=", unsealed), func(b *testing.B) {
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
			w, err := worker.New(nc, worker.Config{Namespace: ns, Concurrency: 4}, worker.HandlerFunc(func(context.Context, *worker.Job) ([]byte, error) { return nil, nil }))
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
			d, err := dispatcher.New(nc, dispatcher.Config{Namespace: ns})
			if err != nil {
				b.Fatal(err)
			}
			defer d.Close()
			// A first group makes sure the worker has joined.
			if h, err := d.Publish(ctx, "warm-up", jobs(1, nil)); err != nil {
				b.Fatal(err)
			} else if _, err := h.WaitSummary(ctx); err != nil {
				b.Fatal(err)
			}
			names, _ := wire.NewNames(ns)
			for i := range unsealed {
				g := fmt.Sprint("stalled-", i)
				if err := nc.PublishMsg(&nats.Msg{Subject: names.GroupSubject(wire.GroupToken(g)), Header: wire.GroupControl{Group: g, Op: wire.OpOpen}.Header()}); err != nil {
					b.Fatal(err)
				}
			}
			if err := nc.Flush(); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			start := time.Now()
			for i := range b.N {
				h, err := d.Publish(ctx, fmt.Sprint("g", i), jobs(50, nil))
				if err != nil {
					b.Fatal(err)
				}
				if sum, err := h.WaitSummary(ctx); err != nil || sum.Done != 50 {
					b.Fatalf("group %d: %+v %v", i, sum, err)
				}
			}
			b.ReportMetric(float64(time.Since(start).Microseconds())/1000/float64(b.N), "ms/group")
			b.ReportMetric(0, "ns/op")
		})
	}
}
