package wire

import (
	"errors"
	"strings"
	"testing"
)

func TestNewNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ns, want string
		ok       bool
	}{
		{"", "weave", true},
		{"prod-1_a", "prod-1_a", true},
		{"has.dot", "", false},
		{"star*", "", false},
		{strings.Repeat("x", 33), "", false},
	} {
		n, err := NewNames(tc.ns)
		if tc.ok != (err == nil) {
			t.Fatalf("NewNames(%q) error = %v, want ok=%v", tc.ns, err, tc.ok)
		}
		if err != nil {
			if !errors.Is(err, ErrBadName) {
				t.Fatalf("NewNames(%q) error %v does not wrap ErrBadName", tc.ns, err)
			}
			continue
		}
		if n.Namespace() != tc.want || n.JobsStream() != tc.want+"_JOBS" || n.JobSubject("g") != tc.want+".jobs.g" {
			t.Fatalf("NewNames(%q) gave %+v", tc.ns, n)
		}
	}
}

func TestGroupToken(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ id, tok string }{
		{"group-42", "group-42"},
		{"example.com", "~ZXhhbXBsZS5jb20"},
		{"~x", "~fng"},
		{"a b", "~YSBi"},
		{strings.Repeat("a", 64), strings.Repeat("a", 64)},
	} {
		if got := GroupToken(tc.id); got != tc.tok {
			t.Errorf("GroupToken(%q) = %q, want %q", tc.id, got, tc.tok)
		}
		back, err := ParseGroupToken(tc.tok)
		if err != nil || back != tc.id {
			t.Errorf("ParseGroupToken(%q) = %q, %v; want %q", tc.tok, back, err, tc.id)
		}
	}
	for _, bad := range []string{"", "~!!", "a.b", strings.Repeat("a", 65)} {
		if _, err := ParseGroupToken(bad); err == nil {
			t.Errorf("ParseGroupToken(%q) accepted", bad)
		}
	}
}

func TestPoolKey(t *testing.T) {
	t.Parallel()
	if got := PoolKey(nil); got != "any" {
		t.Fatalf("PoolKey(nil) = %q", got)
	}
	a, b := PoolKey([]string{"x", "y", "x"}), PoolKey([]string{"y", "x"})
	if a != b || len(a) != 17 || a[0] != 'p' {
		t.Fatalf("PoolKey not order/duplicate independent: %q %q", a, b)
	}
	if a == PoolKey([]string{"x"}) {
		t.Fatal("different resource sets share a pool key")
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	bad := []error{
		ValidateGroupID(""),
		ValidateGroupID(strings.Repeat("g", MaxGroupIDLen+1)),
		ValidateGroupID("a\nb"),
		ValidateGroupID("\xff"),
		ValidateKey(strings.Repeat("k", MaxKeyLen+1)),
		ValidateResources("required", []string{"a,b"}),
		ValidateResources("required", []string{""}),
		ValidateResources("required", make([]string, MaxResources+1)),
		ValidateWorkerID("a.b"),
	}
	for i, err := range bad {
		if !errors.Is(err, ErrBadName) {
			t.Errorf("case %d: got %v, want ErrBadName", i, err)
		}
	}
	good := []error{
		ValidateGroupID("example.com/ä"),
		ValidateKey(""),
		ValidateResources("held", []string{"shard-7", "eu-west/db@1"}),
		ValidateWorkerID("w-1"),
	}
	for i, err := range good {
		if err != nil {
			t.Errorf("good case %d: %v", i, err)
		}
	}
}

// TestPoolWorkerSubjects: a worker's subjects carry its pool and ID, and parse back; subjects of
// another shape, or with an invalid worker ID, do not parse.
func TestPoolWorkerSubjects(t *testing.T) {
	t.Parallel()
	n, _ := NewNames("ns")
	pool := PoolKey([]string{"gpu", "eu", "gpu"})
	if pool != "pabdacf3fd6a8157e" {
		t.Fatalf("PoolKey = %s: the wire format changed (want the first 8 bytes of SHA-256 of \"eu\\ngpu\", computed independently)", pool)
	}
	for _, tc := range []struct {
		subject string
		parse   func(string) (string, string, bool)
	}{
		{n.HeartbeatSubject(pool, "w-1"), n.ParseHeartbeatSubject},
		{n.JoinSubject(pool, "w-1"), n.ParseJoinSubject},
		{n.ReportSubject(pool, "w-1"), n.ParseReportSubject},
	} {
		p, w, ok := tc.parse(tc.subject)
		if !ok || p != pool || w != "w-1" {
			t.Errorf("%s parsed as %q %q %v", tc.subject, p, w, ok)
		}
	}
	if p, w, ok := n.ParseReportSubject(n.ReportSubject(pool, RescueWorker)); !ok || p != pool || w != RescueWorker {
		t.Errorf("rescue report subject parsed as %q %q %v", p, w, ok)
	}
	for _, bad := range []string{"ns.ev.report.w-1", "ns.ev.report.any.w.1", "ns.ev.report.any.", "ns.ev.report..w", "ns.ev.coord", "other.ev.report.any.w"} {
		if _, _, ok := n.ParseReportSubject(bad); ok {
			t.Errorf("%q parsed as a report subject", bad)
		}
	}
	if _, _, ok := n.ParseHeartbeatSubject("ns.hb.w-1"); ok {
		t.Error("an old-style heartbeat subject parsed")
	}
}

func TestOutcomeSubjects(t *testing.T) {
	t.Parallel()
	n, _ := NewNames("ns")
	for _, c := range []struct{ subject, gtok string }{
		{n.OutcomeSubject("g"), "g"},
		{n.OutcomeSubjectTo("g", "p-1"), "g"},
		{n.OutcomeSubjectTo("~Zy4x", ""), "~Zy4x"},
	} {
		if gtok, ok := n.ParseOutcomeSubject(c.subject); !ok || gtok != c.gtok {
			t.Errorf("ParseOutcomeSubject(%q) = %q, %v; want %q", c.subject, gtok, ok, c.gtok)
		}
	}
	if got := n.OutcomeSubjectTo("g", ""); got != "ns.out.g."+NoReply {
		t.Errorf("OutcomeSubjectTo without a reply token = %q", got)
	}
	for _, bad := range []string{"ns.out.", "ns.jobs.g", "other.out.g"} {
		if _, ok := n.ParseOutcomeSubject(bad); ok {
			t.Errorf("ParseOutcomeSubject(%q) accepted", bad)
		}
	}
}
