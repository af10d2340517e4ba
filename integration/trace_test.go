package integration_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/internal/testwait"
	"github.com/weavejobs/weave/worker"
)

// TestTraceFollowsJobs: the producer's trace continues through Publish, the coordinator's release
// and the worker into the handler: weave.publish is a child of the producer's span; each
// attempt's weave.queue, weave.run and weave.outcome are children of weave.publish; the
// handler's own span is a child of weave.run. Recorded with the SDK's in-memory exporter.
func TestTraceFollowsJobs(t *testing.T) {
	t.Parallel()
	e := setup(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	e.coordinator(coordinator.Config{RetryBase: time.Millisecond, RetryMax: 10 * time.Millisecond})
	e.worker(worker.Config{ID: "w1", Concurrency: 2, TracerProvider: tp}, func(ctx context.Context, j *worker.Job) ([]byte, error) {
		_, span := tp.Tracer("test").Start(ctx, "handler "+j.Key)
		defer span.End()
		if j.Key == "k1" && j.Attempt == 1 {
			return nil, errors.New("first attempt fails")
		}
		return nil, nil
	})
	d, err := dispatcher.New(e.nc, dispatcher.Config{Namespace: e.ns, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	ctx, producer := tp.Tracer("test").Start(e.ctx, "producer")
	before := time.Now()
	h, err := d.Publish(ctx, "traced", jobs(2, nil))
	producer.End()
	if err != nil {
		t.Fatal(err)
	}
	if sum, err := h.WaitSummary(e.ctx); err != nil || sum.Done != 2 {
		t.Fatalf("summary %+v, %v", sum, err)
	}
	byName := func() map[string][]tracetest.SpanStub {
		m := map[string][]tracetest.SpanStub{}
		for _, s := range exp.GetSpans() {
			m[s.Name] = append(m[s.Name], s)
		}
		return m
	}
	// k0 ran once, k1 twice: 3 attempts, each with its three spans.
	testwait.For(t, 10*time.Second, "every span", func() bool {
		m := byName()
		return len(m["weave.publish"]) == 1 && len(m["weave.queue"]) == 3 && len(m["weave.run"]) == 3 && len(m["weave.outcome"]) == 3
	})
	m := byName()
	prod, pub := m["producer"][0], m["weave.publish"][0]
	if pub.Parent.SpanID() != prod.SpanContext.SpanID() || pub.SpanContext.TraceID() != prod.SpanContext.TraceID() {
		t.Fatalf("weave.publish is not a child of the producer's span: %v", pub.Parent)
	}
	if !hasAttr(pub, "weave.group", "traced") || !hasAttr(pub, "weave.jobs.accepted", "2") {
		t.Errorf("weave.publish attributes: %v", pub.Attributes)
	}
	runs := map[string]tracetest.SpanStub{} // by key and attempt
	for _, name := range []string{"weave.queue", "weave.run", "weave.outcome"} {
		for _, s := range m[name] {
			if s.Parent.SpanID() != pub.SpanContext.SpanID() || s.SpanContext.TraceID() != prod.SpanContext.TraceID() {
				t.Errorf("%s is not a child of weave.publish", name)
			}
			if !hasAttr(s, "weave.group", "traced") || !hasAttr(s, "weave.worker", "w1") {
				t.Errorf("%s attributes: %v", name, s.Attributes)
			}
			if name == "weave.queue" && (s.StartTime.Before(before) || s.EndTime.Before(s.StartTime)) {
				t.Errorf("weave.queue from %v to %v, published after %v", s.StartTime, s.EndTime, before)
			}
			if name == "weave.run" {
				runs[attr(s, "weave.job.key")+"/"+attr(s, "weave.job.attempt")] = s
			}
		}
	}
	if r := runs["k1/1"]; !hasAttr(r, "weave.outcome", "error") || r.Status.Description != "first attempt fails" {
		t.Errorf("k1's failed attempt: %v %v", r.Attributes, r.Status)
	}
	for _, k := range []string{"k0/1", "k1/2"} {
		if !hasAttr(runs[k], "weave.outcome", "ok") {
			t.Errorf("run %s: %v", k, runs[k].Attributes)
		}
	}
	for _, hs := range append(m["handler k0"], m["handler k1"]...) {
		found := false
		for _, r := range runs {
			found = found || hs.Parent.SpanID() == r.SpanContext.SpanID()
		}
		if !found || hs.SpanContext.TraceID() != prod.SpanContext.TraceID() {
			t.Errorf("handler span %s is not a child of a weave.run span", hs.Name)
		}
	}
	if n := len(m["handler k0"]) + len(m["handler k1"]); n != 3 {
		t.Errorf("%d handler spans, want 3", n)
	}
}

// TestTraceWithoutWorkerTracing: a worker with no tracer provider records nothing, but its
// handlers' ctx still continues the producer's trace.
func TestTraceWithoutWorkerTracing(t *testing.T) {
	t.Parallel()
	e := setup(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	e.coordinator(coordinator.Config{})
	var mu sync.Mutex
	seen := map[string]trace.SpanContext{}
	e.worker(worker.Config{Concurrency: 1}, func(ctx context.Context, j *worker.Job) ([]byte, error) {
		mu.Lock()
		defer mu.Unlock()
		seen[j.Key] = trace.SpanContextFromContext(ctx)
		return nil, nil
	})
	d, err := dispatcher.New(e.nc, dispatcher.Config{Namespace: e.ns, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	ctx, producer := tp.Tracer("test").Start(e.ctx, "producer")
	h, err := d.Publish(ctx, "g", jobs(2, nil))
	producer.End()
	if err != nil {
		t.Fatal(err)
	}
	e.wait(h)
	// An untraced producer's jobs carry nothing.
	e.wait(e.publish("untraced", jobs(1, func(_ int, j *dispatcher.Job) { j.Key = "u" })))
	var pub tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == "weave.publish" {
			pub = s
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, k := range []string{"k0", "k1"} {
		sc := seen[k]
		if sc.TraceID() != pub.SpanContext.TraceID() || sc.SpanID() != pub.SpanContext.SpanID() || !sc.IsRemote() {
			t.Errorf("handler of %s: span context %v, want the remote weave.publish %v", k, sc, pub.SpanContext)
		}
	}
	if seen["u"].IsValid() {
		t.Errorf("an untraced job's handler has a span context: %v", seen["u"])
	}
	for _, s := range exp.GetSpans() {
		if s.Name != "weave.publish" && s.Name != "producer" {
			t.Errorf("span %s recorded without a worker tracer provider", s.Name)
		}
	}
}

func attr(s tracetest.SpanStub, key string) string {
	for _, a := range s.Attributes {
		if string(a.Key) == key {
			return a.Value.String()
		}
	}
	return ""
}

func hasAttr(s tracetest.SpanStub, key, value string) bool { return attr(s, key) == fmt.Sprint(value) }
