package wire

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

// TestAfterRoundTrip: an open's and a single job's edges travel in headers, with
// the version that makes a coordinator before them refuse the message; group IDs with spaces
// survive.
func TestAfterRoundTrip(t *testing.T) {
	t.Parallel()
	edges := []After{
		{Group: "crawl site 1", When: WhenSuccess, IfFailed: IfFailedWait},
		{Group: "b", Incarnation: 17, When: WhenFailure},
		{Group: "c", When: WhenComplete},
	}
	open := GroupControl{Group: "index", Op: OpOpen, After: edges, Priority: 3}
	h := Header(open.Header())
	if h.Get(HdrVersion) != "3" || len(h.Values(HdrAfter)) != 3 {
		t.Fatalf("headers %v", h)
	}
	if back, err := ParseGroupControl(h); err != nil || !reflect.DeepEqual(back, open) {
		t.Fatalf("open: %+v %v, want %+v", back, err, open)
	}
	plain := GroupControl{Group: "index", Op: OpOpen}
	if v := Header(plain.Header()).Get(HdrVersion); v != "1" {
		t.Fatalf("an open without edges has version %s, want 1 (readable by earlier coordinators)", v)
	}
	single := JobMeta{Group: "j", Single: true, After: edges[:1], Priority: 1}
	if back, err := ParseJobMeta(single.Header()); err != nil || !reflect.DeepEqual(back.After, single.After) || back.Priority != 1 {
		t.Fatalf("single: %+v %v", back, err)
	}
	// A job of a group carries its priority within the group; its group's edges are its open's.
	job := JobMeta{Group: "j", Priority: 7}
	if back, err := ParseJobMeta(job.Header()); err != nil || back.Priority != 7 || Header(job.Header()).Get(HdrVersion) != "3" {
		t.Fatalf("job of priority 7: %+v %v (version %s)", back, err, Header(job.Header()).Get(HdrVersion))
	}
	if v := Header(JobMeta{Group: "j"}.Header()).Get(HdrVersion); v != "1" {
		t.Fatalf("a job of priority 0 has version %s, want 1 (readable by earlier coordinators)", v)
	}
	h = Header(JobMeta{Group: "j"}.Header())
	h.Set(HdrVersion, "3")
	h.Add(HdrAfter, After{Group: "other"}.value())
	if _, err := ParseJobMeta(h); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "not a single job") {
		t.Fatalf("a job of a group with Weave-After: %v, want ErrMalformed", err)
	}
	if err := (JobMeta{Group: "j", Priority: MaxPriority + 1}).Validate(); !errors.Is(err, ErrBadOption) {
		t.Fatalf("priority %d: %v, want ErrBadOption", MaxPriority+1, err)
	}
}

// TestAfterRefused: malformed edges are refused with what is wrong.
func TestAfterRefused(t *testing.T) {
	t.Parallel()
	base := func() nats.Header {
		h := nats.Header{}
		h.Set(HdrVersion, "3")
		h.Set(HdrGroup, "g")
		h.Set(HdrOp, "open")
		return h
	}
	for _, tc := range []struct {
		name, key, val, want string
	}{
		{"unknown condition", HdrAfter, "sometimes cancel 0 a", "bad Weave-After"},
		{"missing group", HdrAfter, "success cancel 0", "bad Weave-After"},
		{"bad incarnation", HdrAfter, "success cancel 01 a", "bad Weave-After"},
		{"wait on failure", HdrAfter, "failure wait 0 a", "applies to a success condition only"},
		{"itself", HdrAfter, "success cancel 0 g", "cannot run after itself"},
		{"priority", HdrPriority, "10", "bad Weave-Priority"},
		{"priority zero-padded", HdrPriority, "03", "bad Weave-Priority"},
		{"bidi group", HdrAfter, "success cancel 0 a\u202eb", "bidi control"},
	} {
		h := base()
		h.Add(tc.key, tc.val)
		if _, err := ParseGroupControl(h); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrMalformed saying %q", tc.name, err, tc.want)
		}
	}
	h := base()
	h.Add(HdrAfter, "success cancel 0 a")
	h.Add(HdrAfter, "complete cancel 0 a")
	if _, err := ParseGroupControl(h); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "named twice") {
		t.Errorf("twice: %v", err)
	}
	h = base()
	h.Set(HdrVersion, "1")
	h.Add(HdrAfter, "success cancel 0 a")
	if _, err := ParseGroupControl(h); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "want 3") {
		t.Errorf("edges under version 1: %v", err)
	}
	job := JobMeta{Group: "g", After: []After{{Group: "a"}}}
	if err := job.Validate(); !errors.Is(err, ErrBadOption) {
		t.Errorf("edges on a job of a group: %v", err)
	}
}
