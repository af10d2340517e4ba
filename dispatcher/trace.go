package dispatcher

import (
	"context"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/weavejobs/weave/internal/tracing"
	"github.com/weavejobs/weave/internal/wire"
)

// Traces. Publish records a weave.publish span (when a tracer provider is configured) and gives
// each job the trace context of its ctx: that span's, or the caller's when tracing is off here,
// so a handler's ctx continues the producer's trace. See docs/operating.md, "Traces".

// tracePublish starts the weave.publish span of one Publish (none when tracing is off) and
// returns the context to publish in and the function that ends the span.
func (d *Dispatcher) tracePublish(ctx context.Context, groupID string) (context.Context, func(*Handle, error)) {
	tracer, on := d.tracer.Get()
	if !on {
		return ctx, func(*Handle, error) {}
	}
	ctx, span := tracer.Start(ctx, tracing.SpanPublish, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String("weave.namespace", d.cfg.Namespace), attribute.String("weave.group", groupID)))
	return ctx, func(h *Handle, err error) {
		if h != nil {
			span.SetAttributes(attribute.Int64("weave.group.incarnation", int64(h.openSeq)),
				attribute.Int("weave.jobs.accepted", h.accepted), attribute.Int("weave.jobs.duplicates", h.duplicates))
		}
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

// jobTrace is the trace context every job of one Publish carries: nil when its ctx has none.
type jobTrace struct {
	parent, state []string // the header values, shared by every job of the publication
}

func newJobTrace(ctx context.Context) jobTrace {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return jobTrace{}
	}
	c := tracing.Carrier{}
	tracing.Propagator.Inject(ctx, c)
	return jobTrace{parent: c[wire.HdrTraceParent], state: c[wire.HdrTraceState]}
}

// set adds the trace context and the publish time to a job's headers; nothing when untraced.
func (t jobTrace) set(h nats.Header) {
	if t.parent == nil {
		return
	}
	h[wire.HdrTraceParent] = t.parent
	if t.state != nil {
		h[wire.HdrTraceState] = t.state
	}
	h[wire.HdrPublished] = []string{strconv.FormatInt(time.Now().UnixMicro(), 10)}
}
