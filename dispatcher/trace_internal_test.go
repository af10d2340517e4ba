package dispatcher

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/weavejobs/weave/internal/tracing"
	"github.com/weavejobs/weave/internal/wire"
)

// TestUntracedPublishAllocatesNothing: with no tracer provider and a ctx without a span, Publish
// adds no span and no header: neither the per-publication setup nor the per-job step allocates.
func TestUntracedPublishAllocatesNothing(t *testing.T) {
	d := &Dispatcher{tracer: tracing.New(nil)}
	ctx := context.Background()
	h := nats.Header{}
	allocs := testing.AllocsPerRun(1000, func() {
		c, end := d.tracePublish(ctx, "g")
		jt := newJobTrace(c)
		jt.set(h)
		end(nil, nil)
	})
	if allocs != 0 || len(h) != 0 {
		t.Fatalf("%v allocations and headers %v untraced, want none", allocs, h)
	}
}

// TestTracedJobHeaders: a traced Publish gives each job the W3C traceparent of its weave.publish
// span and the publish time.
func TestTracedJobHeaders(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	d := &Dispatcher{tracer: tracing.New(tp)}
	ctx, end := d.tracePublish(context.Background(), "g")
	defer end(nil, nil)
	h := nats.Header{}
	newJobTrace(ctx).set(h)
	published, parent, _ := wire.ParseTrace(wire.JobTrace(h))
	if published.IsZero() || len(parent) != 55 || parent[:2] != "00" {
		t.Fatalf("headers %v", h)
	}
}
