package worker

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/weavejobs/weave/internal/tracing"
)

// TestTraceRunOffAllocatesNothing: an untraced job on a worker with no tracer provider costs no
// allocation (the default: OpenTelemetry's global provider with nothing installed).
func TestTraceRunOffAllocatesNothing(t *testing.T) {
	p := &slots{tracer: tracing.New(nil), workerID: "w"}
	tk := &task{job: Job{ID: 1, Group: "g", Attempt: 1}, batch: &batch{}}
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		c, end := p.traceRun(ctx, tk, time.Time{})
		if c != ctx || end != nil {
			t.Fatal("traced with tracing off")
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per untraced job with tracing off, want 0", allocs)
	}
}

// BenchmarkTraceRun measures the tracing cost of one attempt: off (no provider, untraced job),
// and on (the SDK with an in-memory exporter, a job carrying a trace context).
//
//	go test -run='^$' -bench=TraceRun -benchmem ./worker/
func BenchmarkTraceRun(b *testing.B) {
	tk := &task{job: Job{ID: 1, Group: "g", Key: "k", Attempt: 1}, batch: &batch{received: time.Now()},
		trace: "1700000000000000 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	b.Run("off", func(b *testing.B) {
		p := &slots{tracer: tracing.New(nil), workerID: "w"}
		untraced := &task{job: tk.job, batch: tk.batch}
		for b.Loop() {
			p.traceRun(b.Context(), untraced, time.Now())
		}
	})
	b.Run("on", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewNoopExporter()))
		p := &slots{tracer: tracing.New(tp), workerID: "w"}
		for b.Loop() {
			_, end := p.traceRun(b.Context(), tk, time.Now())
			out := end(outcome{kind: kindOK})
			out.span.End()
		}
	})
}
