package tracing

import (
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// TestGet: tracing is off with OpenTelemetry's default global provider and with a noop one, on
// with a real provider, given in the Config or installed globally later; and Get does not
// allocate once the provider is known.
func TestGet(t *testing.T) {
	global := New(nil)
	if _, on := global.Get(); on {
		t.Fatal("on with nothing installed")
	}
	if allocs := testing.AllocsPerRun(100, func() { global.Get() }); allocs != 0 {
		t.Fatalf("Get allocates %v times", allocs)
	}
	if _, on := New(noop.NewTracerProvider()).Get(); on {
		t.Fatal("on with a noop provider")
	}
	tp := sdktrace.NewTracerProvider()
	if _, on := New(tp).Get(); !on {
		t.Fatal("off with an SDK provider")
	}
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	defer otel.SetTracerProvider(prev)
	if _, on := global.Get(); !on {
		t.Fatal("off after a provider was installed globally")
	}
}
