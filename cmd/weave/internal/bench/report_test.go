package bench

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// fakeResult is a Result with a fixed section.
type fakeResult struct {
	Value float64 `json:"value"`
	s     Section
}

func (f *fakeResult) Scenario() string { return f.s.Scenario }
func (f *fakeResult) Section() Section { return f.s }

func testReport() *Report {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	return &Report{
		Command: "weave bench one two", Server: "embedded",
		Started: start, Finished: start.Add(42 * time.Second),
		Machine: Machine{OS: "linux", Arch: "amd64", CPUs: 2, GOMAXPROCS: 2, LoadStart: "1.00 0.50 0.25", LoadEnd: "1.50 0.60 0.30", Go: "go1.26.8", NATSServer: "2.15.2", NATSClient: "1.55.0"},
		Results: []Result{
			&fakeResult{Value: 1.5, s: Section{
				Scenario: "one", Setup: "The first scenario.",
				Tables: []Table{{Title: "Numbers", Header: []string{"what", "value"}, Rows: [][]string{{"rate", "20,000"}, {"a|b", "3 of 4"}}}},
				Notes:  []string{"A note."},
				Checks: []Check{atLeast("ratio", 0.62, 0.5, "%.2f"), atMost("latency", 7, 5, "%.1f")},
			}},
			&fakeResult{Value: 2, s: Section{Scenario: "two", Setup: "The second.", Checks: []Check{within("share", 1.9, 2, 0.1, "%.2f")}}},
		},
	}
}

func TestChecks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		c    Check
		pass bool
		tgt  string
	}{
		{atLeast("x", 0.5, 0.5, "%.2f"), true, "≥ 0.50"},
		{atLeast("x", 0.49, 0.5, "%.2f"), false, "≥ 0.50"},
		{atMost("x", 5, 5, "%.0f"), true, "≤ 5"},
		{below("x", 1, 1, "%.0f"), false, "< 1"},
		{below("x", 0.99, 1, "%.2f"), true, "< 1.00"},
		{within("x", 2.2, 2, 0.1, "%.2f"), true, "2.00 ± 10%"},
		{within("x", 1.79, 2, 0.1, "%.2f"), false, "2.00 ± 10%"},
	} {
		if tc.c.Pass != tc.pass || tc.c.Target != tc.tgt {
			t.Errorf("%+v: want pass %v, target %q", tc.c, tc.pass, tc.tgt)
		}
	}
	r := testReport()
	if n := len(r.Checks()); n != 3 {
		t.Errorf("%d checks", n)
	}
	if m := r.Missed(); m != 1 {
		t.Errorf("%d missed, want 1", m)
	}
}

func TestWriteText(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	if err := testReport().WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"2 CPUs (GOMAXPROCS 2), load 1.00 0.50 0.25 → 1.50 0.60 0.30",
		"== one ==\nThe first scenario.",
		"Numbers\n  what   value\n  rate  20,000\n  a|b   3 of 4\n",
		"  note: A note.",
		"ratio    ≥ 0.50      0.62  PASS",
		"latency  ≤ 5.0        7.0  MISS",
		"== two ==",
		"2 of 3 targets met (42s)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q:\n%s", want, out)
		}
	}
}

func TestWriteMarkdown(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	if err := testReport().WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"Command: `weave bench one two`",
		"Measured 2026-01-02 03:04 UTC, 42s; server: embedded.",
		"Versions: go1.26.8, nats-server 2.15.2, nats.go 1.55.0.",
		"| scenario | metric | target | measured |  |\n|---|---|---|--:|---|\n| one | ratio | ≥ 0.50 | 0.62 | **PASS** |\n| one | latency | ≤ 5.0 | 7.0 | **MISS** |\n| two | share | 2.00 ± 10% | 1.90 | **PASS** |\n",
		"### one\n\nThe first scenario.\n\n**Numbers**\n\n| what | value |\n|---|--:|\n| rate | 20,000 |\n| a\\|b | 3 of 4 |\n",
		"- A note.",
		"### two",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("markdown lacks %q:\n%s", want, out)
		}
	}
	// Every table line has as many cells as its header.
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "|") && !strings.HasSuffix(line, "|") {
			t.Errorf("unterminated table row %q", line)
		}
	}
}

func TestWriteJSON(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	if err := testReport().WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Command   string
		Server    string
		Machine   Machine
		Scenarios []struct {
			Scenario string
			Checks   []Check
			Result   struct{ Value float64 }
		}
	}
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	if got.Command != "weave bench one two" || got.Machine.CPUs != 2 || len(got.Scenarios) != 2 {
		t.Fatalf("decoded %+v", got)
	}
	one := got.Scenarios[0]
	if one.Scenario != "one" || len(one.Checks) != 2 || one.Checks[1].Pass || one.Checks[0].Value != 0.62 || one.Result.Value != 1.5 {
		t.Errorf("scenario one: %+v", one)
	}
}

func TestFormatting(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ got, want string }{
		{count(0), "0"},
		{count(999), "999"},
		{count(1000), "1,000"},
		{count(20_000), "20,000"},
		{count(-1234567), "-1,234,567"},
		{rate(56374.4), "56,374"},
		{mib(0), "n/a"},
		{mib(3 << 20), "3.0 MiB"},
		{msec(1.234), "1.23"},
		{msec(12.34), "12.3"},
		{msec(123.4), "123"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
	for c, want := range map[string]bool{"20,000": true, "0.48": true, "3 of 4": true, "79.4 MiB": true, "12%": true, "rate": false, "2.00 ± 10%": false, "": false, "first Publish → x": false} {
		if numeric(c) != want {
			t.Errorf("numeric(%q) = %v", c, !want)
		}
	}
}

// TestSectionsRender renders every scenario's result type from a zero value and a small
// populated one, so a renderer never panics on missing data.
func TestSectionsRender(t *testing.T) {
	t.Parallel()
	results := []Result{
		&ThroughputResult{}, &LatencyResult{}, &SingleResult{}, &FairnessResult{}, &WeightsResult{}, &LimitsResult{}, &AffinityResult{}, &SpreadResult{}, &ChainsResult{}, &HerdResult{}, &ScaleResult{},
		&FairnessResult{Runs: []FairnessRun{{Policy: "least-in-flight", Groups: []FairnessGroup{{Group: "A", TaskMS: 10, Jobs: 3, InFlight: 2}}}}},
		&WeightsResult{Runs: []WeightsRun{{Groups: []WeightsGroup{{Group: "A", TaskMS: 10, Weight: 3, Jobs: 3, InFlight: 2}}}}},
		&ScaleResult{Steps: []ScaleStep{{Jobs: 10}, {Jobs: 100}}, Slopes: []ScaleSlope{{From: 10, To: 100}}},
		&ThroughputResult{Config: ThroughputConfig{Shapes: []Shape{{16, 4}}}, Fleets: []FleetResult{{Shape: Shape{16, 4}, Rounds: []ThroughputRound{{}}}}},
	}
	r := &Report{Results: results}
	for _, write := range []func(*bytes.Buffer) error{
		func(b *bytes.Buffer) error { return r.WriteText(b) },
		func(b *bytes.Buffer) error { return r.WriteMarkdown(b) },
		func(b *bytes.Buffer) error { return r.WriteJSON(b) },
	} {
		var b bytes.Buffer
		if err := write(&b); err != nil {
			t.Fatal(err)
		}
		for _, name := range Scenarios {
			if !strings.Contains(b.String(), name) {
				t.Errorf("output lacks %s", name)
			}
		}
	}
}
