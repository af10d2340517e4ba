package dashboard_test

import (
	"context"
	"io"
	"net/http"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weavejobs/weave/cmd/weave/internal/dashboard"
)

// BenchmarkFailedListHugeErrors measures the dashboard answering the Failed view's first page
// (GET /api/failed) of a namespace whose worker failed 40 jobs with 1 MiB errors, as requests
// follow one another and 8 at a time. It reports each answer's size and the heap: its objects at
// their peak over the requests, that peak less what the process held before them (the embedded
// server, coordinator and workers share the process), and the same growth of the live heap.
func BenchmarkFailedListHugeErrors(b *testing.B) {
	e := newEnvSlots(b, 2)
	payloads := make([]string, 40)
	for i := range payloads {
		payloads[i] = "huge"
	}
	ctx, cancel := context.WithTimeout(b.Context(), 5*time.Minute)
	defer cancel()
	if sum, err := e.publish("site-huge", payloads...).WaitSummary(ctx); err != nil || sum.Failed != len(payloads) {
		b.Fatalf("huge group: %+v, %v", sum, err)
	}
	base, _, _ := e.dashboardAs("observer", dashboard.Config{})
	url := base + "api/failed"
	var answered atomic.Int64
	list := func() {
		resp, err := http.Get(url)
		if err != nil {
			b.Error(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Errorf("GET %s: %s %.300s", url, resp.Status, body)
			return
		}
		answered.Add(int64(len(body)))
	}
	list() // the connection and the dispatcher's first reads

	b.Run("serial", func(b *testing.B) {
		measure(b, &answered, func() {
			for b.Loop() {
				list()
			}
		})
	})
	b.Run("8-concurrent", func(b *testing.B) {
		measure(b, &answered, func() {
			b.SetParallelism(max(1, 8/runtime.GOMAXPROCS(0)))
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					list()
				}
			})
		})
	})
}

// measure runs requests, sampling the heap's live objects every millisecond, and reports the
// answers' size per request and the heap's peak.
func measure(b *testing.B, answered *atomic.Int64, requests func()) {
	// Heap objects count garbage not yet collected too (what the process holds); the live heap
	// is what the last collection found reachable.
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/heap/live:bytes"}}
	heap := func() (float64, float64) {
		metrics.Read(sample)
		return float64(sample[0].Value.Uint64()), float64(sample[1].Value.Uint64())
	}
	runtime.GC()
	before, liveBefore := heap()
	answered.Store(0)
	var (
		peak, peakLive float64
		wg             sync.WaitGroup
	)
	stop := make(chan struct{})
	wg.Go(func() {
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			h, l := heap()
			peak, peakLive = max(peak, h), max(peakLive, l)
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	})
	b.ResetTimer()
	requests()
	b.StopTimer()
	close(stop)
	wg.Wait()
	b.ReportMetric(float64(answered.Load())/float64(b.N), "resp-B/op")
	b.ReportMetric(peak/(1<<20), "peak-heap-MiB")
	b.ReportMetric(max(peak-before, 0)/(1<<20), "heap-growth-MiB")
	b.ReportMetric(max(peakLive-liveBefore, 0)/(1<<20), "live-growth-MiB")
}
