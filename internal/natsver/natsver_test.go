package natsver

import (
	"errors"
	"testing"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		version string
		old     bool
	}{
		{"2.9.10", true}, // Debian 12's packaged server
		{"2.10.29", true},
		{"2.11.0-RC.1", false}, // a pre-release counts as its release
		{"2.11.0", false},
		{"2.11.9", false},
		{"2.12.0", false},
		{"3.0.0", false},
		{"1.99.99", true},
		{"v2.10.0", true},
		{"2.15.2+build.1", false},
		{"", false},        // unknown: not known to be too old
		{"2.11", false},    // unparsable
		{"banana", false},  // unparsable
		{"2.x.0", false},   // unparsable
		{"2.-1.0", false},  // unparsable
		{"2.10.x", false},  // unparsable
		{"10.0.0", false},  // numeric, not lexical
		{"2.100.0", false}, // numeric, not lexical
		{"2.2.0", true},    // numeric, not lexical
		{"0.0.0", true},
	} {
		err := Check(tc.version)
		if got := errors.Is(err, ErrServerTooOld); got != tc.old {
			t.Errorf("Check(%q) = %v, want too old: %v", tc.version, err, tc.old)
		}
	}
	want := "weave: nats-server 2.9.10 is too old: Weave needs 2.11.0 or later"
	if err := Check("2.9.10"); err == nil || err.Error() != want {
		t.Errorf("Check(2.9.10) = %v, want %q", err, want)
	}
}
