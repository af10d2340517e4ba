package spreader_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/weavejobs/weave/spreader"
)

func TestPolicyText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		policy spreader.Policy
		text   string
	}{
		{spreader.LeastInFlight, "least-in-flight"},
		{spreader.RoundRobin, "round-robin"},
	}
	for _, tt := range tests {
		if got := tt.policy.String(); got != tt.text {
			t.Errorf("String() = %q, want %q", got, tt.text)
		}
		if got, err := spreader.ParsePolicy(tt.text); err != nil || got != tt.policy {
			t.Errorf("ParsePolicy(%q) = %v, %v", tt.text, got, err)
		}
		b, err := json.Marshal(struct{ P spreader.Policy }{tt.policy})
		if err != nil || string(b) != `{"P":"`+tt.text+`"}` {
			t.Errorf("json.Marshal = %s, %v", b, err)
		}
		var back struct{ P spreader.Policy }
		if err := json.Unmarshal(b, &back); err != nil || back.P != tt.policy {
			t.Errorf("json.Unmarshal(%s) = %v, %v", b, back.P, err)
		}
	}
	var zero spreader.Policy
	if zero != spreader.LeastInFlight {
		t.Error("the zero Policy is not LeastInFlight")
	}
}

func TestPolicyInvalid(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "Round-Robin", "round_robin", "lif", " least-in-flight"} {
		if _, err := spreader.ParsePolicy(s); !errors.Is(err, spreader.ErrUnknownPolicy) {
			t.Errorf("ParsePolicy(%q) error = %v, want ErrUnknownPolicy", s, err)
		}
	}
	var p spreader.Policy
	if err := p.UnmarshalText([]byte("fastest")); !errors.Is(err, spreader.ErrUnknownPolicy) || p != spreader.LeastInFlight {
		t.Errorf("UnmarshalText(fastest) = %v and left %v", err, p)
	}
	bad := spreader.Policy(9)
	if got := bad.String(); got != "Policy(9)" {
		t.Errorf("String() = %q, want Policy(9)", got)
	}
	if _, err := bad.MarshalText(); !errors.Is(err, spreader.ErrUnknownPolicy) {
		t.Errorf("MarshalText error = %v, want ErrUnknownPolicy", err)
	}
}
