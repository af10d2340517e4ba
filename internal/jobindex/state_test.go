package jobindex

import (
	"errors"
	"strings"
	"testing"
)

// legalMoves is the transition table of ARCHITECTURE.md, written out independently of the
// table in state.go.
var legalMoves = map[[2]State]bool{
	{Pending, Running}:    true,
	{Pending, Canceled}:   true,
	{Running, Done}:       true,
	{Running, Failed}:     true,
	{Running, RetryWait}:  true,
	{Running, Canceled}:   true,
	{Running, Pending}:    true,
	{RetryWait, Pending}:  true,
	{RetryWait, Canceled}: true,
	{Failed, Pending}:     true,
	{Delayed, Pending}:    true,
	{Delayed, Canceled}:   true,
}

// TestTransitions checks every (from, to) pair, including an out-of-range state, against the
// written-out table: CanTransition, and Move on an index holding one job in state from.
func TestTransitions(t *testing.T) {
	t.Parallel()
	states := append(AllStates(), State(numStates))
	for _, from := range states {
		for _, to := range states {
			legal := legalMoves[[2]State{from, to}]
			t.Run(from.String()+"->"+to.String(), func(t *testing.T) {
				t.Parallel()
				if got := CanTransition(from, to); got != legal {
					t.Fatalf("CanTransition=%v, want %v", got, legal)
				}
				if !from.valid() {
					return
				}
				x := New()
				if err := x.AddState(7, "g", nil, nil, from); err != nil {
					t.Fatal(err)
				}
				got, err := x.Move(7, to)
				st, _ := x.State(7)
				switch {
				case legal:
					if err != nil || got != from || st != to {
						t.Fatalf("Move=%s,%v state %s; want %s,nil state %s", got, err, st, from, to)
					}
				case !to.valid():
					if !errors.Is(err, ErrInvalidState) || st != from {
						t.Fatalf("Move=%v state %s; want ErrInvalidState, state %s", err, st, from)
					}
				default:
					var te *TransitionError
					if !errors.As(err, &te) || !errors.Is(err, ErrIllegalTransition) || got != from || st != from {
						t.Fatalf("Move=%s,%v state %s; want TransitionError from %s", got, err, st, from)
					}
					if *te != (TransitionError{ID: 7, From: from, To: to}) {
						t.Fatalf("TransitionError=%+v", *te)
					}
					if msg := err.Error(); !strings.Contains(msg, from.String()) || !strings.Contains(msg, to.String()) {
						t.Fatalf("message %q does not name both states", msg)
					}
				}
				if err := x.checkInvariants(); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

func TestStateNames(t *testing.T) {
	t.Parallel()
	tests := []struct {
		s        State
		name     string
		terminal bool
	}{
		{Pending, "pending", false},
		{Running, "running", false},
		{RetryWait, "retrywait", false},
		{Done, "done", true},
		{Failed, "failed", false},
		{Canceled, "canceled", true},
		{Delayed, "delayed", false},
	}
	if len(tests) != len(AllStates()) {
		t.Fatalf("table covers %d states, AllStates has %d", len(tests), len(AllStates()))
	}
	for i, tt := range tests {
		if AllStates()[i] != tt.s {
			t.Errorf("AllStates()[%d]=%s, want %s", i, AllStates()[i], tt.s)
		}
		if got := tt.s.String(); got != tt.name {
			t.Errorf("String=%q, want %q", got, tt.name)
		}
		if got, err := ParseState(tt.name); err != nil || got != tt.s {
			t.Errorf("ParseState(%q)=%s,%v", tt.name, got, err)
		}
		if got := tt.s.Terminal(); got != tt.terminal {
			t.Errorf("%s.Terminal()=%v", tt.s, got)
		}
	}
	if got := State(9).String(); got != "State(9)" {
		t.Errorf("String of invalid state = %q", got)
	}
	if State(9).Terminal() {
		t.Error("invalid state reported terminal")
	}
	for _, bad := range []string{"", "Pending", "retry_wait", "State(1)"} {
		if _, err := ParseState(bad); !errors.Is(err, ErrInvalidState) {
			t.Errorf("ParseState(%q) err=%v, want ErrInvalidState", bad, err)
		}
	}
}
