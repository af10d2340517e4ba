// Package tracing holds what the dispatcher and the worker share to trace jobs with
// OpenTelemetry: the tracer they record spans with (a no-op unless a tracer provider is
// configured), the W3C trace context propagator, and a carrier over NATS headers.
//
// The names of the spans and attributes are documented in docs/operating.md ("Traces").
package tracing

import (
	"reflect"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ScopeName is the instrumentation scope of Weave's spans.
const ScopeName = "github.com/weavejobs/weave"

// Propagator carries a job's trace context in its headers: W3C traceparent and tracestate.
var Propagator propagation.TextMapPropagator = propagation.TraceContext{}

// Span names.
const (
	SpanPublish = "weave.publish" // the dispatcher's Publish of one group
	SpanQueue   = "weave.queue"   // a job from its publish to the start of an attempt (recorded by the worker)
	SpanRun     = "weave.run"     // one attempt: the handler's run, on the worker
	SpanOutcome = "weave.outcome" // from the handler's return until its report is stored
)

// Tracer gives the tracer spans are recorded with. It is safe for concurrent use.
type Tracer struct {
	tp    trace.TracerProvider // set in Config; nil: the global one, read at each use
	cache atomic.Pointer[cached]
}

type cached struct {
	tp     trace.TracerProvider
	tracer trace.Tracer
	on     bool
}

// New returns a Tracer using tp, or otel.GetTracerProvider() at each use when tp is nil (so a
// provider installed with otel.SetTracerProvider after New is used too).
func New(tp trace.TracerProvider) *Tracer { return &Tracer{tp: tp} }

// Get returns the tracer, and whether a tracer provider is configured: false for OpenTelemetry's
// global default (nothing installed) and for noop.TracerProvider. Callers skip their spans then,
// so tracing costs nothing when off. It does not allocate once the provider is known.
func (t *Tracer) Get() (trace.Tracer, bool) {
	tp := t.tp
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	comparable := reflect.TypeOf(tp).Comparable()
	if c := t.cache.Load(); c != nil && comparable && c.tp == tp {
		return c.tracer, c.on
	}
	c := &cached{tp: tp, tracer: tp.Tracer(ScopeName), on: !isNoop(tp)}
	if comparable {
		t.cache.Store(c)
	}
	return c.tracer, c.on
}

// globalDefault is the type of OpenTelemetry's global provider before one is installed: it
// records nothing until otel.SetTracerProvider, which then replaces it.
var globalDefault = reflect.TypeOf(otel.GetTracerProvider())

func isNoop(tp trace.TracerProvider) bool {
	if _, ok := tp.(noop.TracerProvider); ok {
		return true
	}
	typ := reflect.TypeOf(tp)
	return typ == globalDefault && typ.String() == "*global.tracerProvider"
}

// Carrier adapts NATS headers to the propagator, with the header names exactly as the W3C
// specification spells them (lower case): nats.Header keeps keys as set.
type Carrier nats.Header

// Get returns the first value of key.
func (c Carrier) Get(key string) string {
	if v := c[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set sets key to value.
func (c Carrier) Set(key, value string) { c[key] = []string{value} }

// Keys lists the keys.
func (c Carrier) Keys() []string {
	out := make([]string, 0, len(c))
	for k := range c {
		out = append(out, k)
	}
	return out
}
