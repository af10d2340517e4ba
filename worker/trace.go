package worker

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/weavejobs/weave/internal/tracing"
	"github.com/weavejobs/weave/internal/wire"
)

// Traces. A job published with a trace context carries it to the worker (in its work batch's
// Weave-Trace header, see wire.JobTrace): its handler's ctx continues the producer's trace. With
// a tracer provider configured, each attempt records weave.queue (from the job's publish to the
// attempt's start; from the batch's receipt when the publish time is not known), weave.run
// (around the handler) and weave.outcome (from the handler's return until its report is stored
// in NS_EVENTS, where the coordinator decides the job's outcome from it). An untraced job with no
// tracer provider configured costs nothing: no span, no allocation.

var kindNames = [...]string{
	kindOK: "ok", kindError: "error", kindPermanent: "permanent", kindPanic: "panic", kindTimeout: "timeout",
	kindShutdown: "shutdown", kindCanceled: "canceled", kindReturned: "returned", kindLost: "lost",
}

// traceRun starts the spans of one attempt and returns the handler's context, and the function
// that ends the run span and returns the outcome with its outcome span (nil when nothing is
// recorded).
func (sl *slots) traceRun(ctx context.Context, t *task, start time.Time) (context.Context, func(outcome) outcome) {
	tracer, on := sl.tracer.Get()
	if t.trace == "" && !on {
		return ctx, nil
	}
	published, parent, state := wire.ParseTrace(t.trace)
	if parent != "" {
		c := tracing.Carrier{wire.HdrTraceParent: {parent}}
		if state != "" {
			c[wire.HdrTraceState] = []string{state}
		}
		ctx = tracing.Propagator.Extract(ctx, c)
	}
	if !on {
		return ctx, nil // the handler continues the producer's trace; nothing recorded here
	}
	attrs := []attribute.KeyValue{
		attribute.Int64("weave.job.id", int64(t.job.ID)), attribute.String("weave.group", t.job.Group),
		attribute.String("weave.job.key", t.job.Key), attribute.Int("weave.job.attempt", t.job.Attempt),
		attribute.String("weave.worker", sl.workerID),
	}
	if published.IsZero() {
		published = t.batch.received
	}
	_, queue := tracer.Start(ctx, tracing.SpanQueue, trace.WithTimestamp(published), trace.WithAttributes(attrs...))
	queue.End(trace.WithTimestamp(start))
	runCtx, run := tracer.Start(ctx, tracing.SpanRun, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithTimestamp(start), trace.WithAttributes(attrs...))
	return runCtx, func(out outcome) outcome {
		kind := kindNames[out.kind]
		run.SetAttributes(attribute.String("weave.outcome", kind))
		if out.report.Status != wire.StatusOK {
			run.SetStatus(codes.Error, string(out.report.Data))
		}
		run.End()
		// A sibling of the run, in the job's trace: it starts when the run has ended.
		_, out.span = tracer.Start(ctx, tracing.SpanOutcome, trace.WithAttributes(append(attrs, attribute.String("weave.outcome", kind))...))
		return out
	}
}

// endOutcomes ends the outcome spans of reports now stored.
func endOutcomes(spans []trace.Span) {
	for _, s := range spans {
		s.End()
	}
}
