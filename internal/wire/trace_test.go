package wire

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestWorkTracesRoundTrip: the trace context of traced jobs travels in the work batch's header
// and comes back on the same jobs; untraced jobs add nothing and cost no allocation; values that
// do not parse are ignored.
func TestWorkTracesRoundTrip(t *testing.T) {
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	pub := time.UnixMicro(1_700_000_000_123_456)
	h := nats.Header{HdrTraceParent: {tp}, HdrTraceState: {"a=1, b=2"}, HdrPublished: {"1700000000123456"}}
	jobs := []WorkJob{{ID: 5, Trace: JobTrace(h)}, {ID: 6, Trace: JobTrace(nats.Header{})}, {ID: 7, Trace: JobTrace(nats.Header{HdrTraceParent: {tp}})}}
	m := nats.NewMsg("w")
	m.Header = SetWorkTraces(m.Header, jobs)
	if got := len(m.Header[HdrTrace]); got != 2 {
		t.Fatalf("%d Weave-Trace values, want 2: %v", got, m.Header)
	}
	m.Header.Add(HdrTrace, "x y")
	m.Header.Add(HdrTrace, "99 0 "+tp)
	m.Header.Add(HdrTrace, "5")
	got := []WorkJob{{ID: 5}, {ID: 6}, {ID: 7}}
	WorkTraces(m.Header, got)
	for i := range got {
		if got[i].Trace != jobs[i].Trace {
			t.Errorf("job %d: trace %q, want %q", got[i].ID, got[i].Trace, jobs[i].Trace)
		}
	}
	at, parent, state := ParseTrace(got[0].Trace)
	if !at.Equal(pub) || parent != tp || state != "a=1, b=2" {
		t.Errorf("parsed %v %q %q", at, parent, state)
	}
	if at, parent, _ := ParseTrace(got[2].Trace); !at.IsZero() || parent != tp {
		t.Errorf("without a publish time: %v %q", at, parent)
	}
	untraced := []WorkJob{{ID: 1}, {ID: 2}}
	bare := &nats.Msg{Subject: "w"}
	plain := nats.Header{HdrVersion: {"1"}}
	allocs := testing.AllocsPerRun(100, func() {
		_ = JobTrace(plain)
		bare.Header = SetWorkTraces(bare.Header, untraced)
		WorkTraces(bare.Header, untraced)
	})
	if allocs != 0 || bare.Header != nil {
		t.Errorf("untraced jobs: %v allocations, header %v", allocs, bare.Header)
	}
}

// FuzzWorkTraces: whatever a work batch's Weave-Trace values hold (the worker cannot trust
// them), reading them never panics and gives a job only a trace text of bounded size that
// ParseTrace splits without panicking.
func FuzzWorkTraces(f *testing.F) {
	f.Add("5 1700000000123456 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01 a=1")
	f.Add("5")
	f.Add("x y z")
	f.Add("5  ")
	f.Fuzz(func(t *testing.T, v string) {
		jobs := []WorkJob{{ID: 5}, {ID: 6}}
		WorkTraces(nats.Header{HdrTrace: {v, v}}, jobs)
		for _, j := range jobs {
			if len(j.Trace) > maxTraceLen {
				t.Fatalf("trace of %d bytes", len(j.Trace))
			}
			ParseTrace(j.Trace)
		}
	})
}
