package spreader

import "fmt"

// Policy decides the order in which the active groups' ready jobs are offered.
type Policy int

const (
	// LeastInFlight offers first the active group with the fewest jobs in
	// flight. Ties go in round-robin order. Each active group then holds about
	// workers / active groups workers, whatever its task duration, and a
	// finished group's workers go to the others at once. It is the default.
	LeastInFlight Policy = iota
	// RoundRobin offers the groups in slot order, starting after the slot that
	// released a job last. If every group is complete when it is added and
	// every job finishes as soon as it is released, this reproduces [Spread]. Each group gets an equal share of releases. A group
	// whose tasks take ten times longer therefore holds ten times as many
	// workers.
	RoundRobin
)

var policyNames = [...]string{
	LeastInFlight: "least-in-flight",
	RoundRobin:    "round-robin",
}

// String returns "least-in-flight" or "round-robin", or "Policy(n)" for a
// value outside the defined ones.
func (p Policy) String() string {
	if p.valid() {
		return policyNames[p]
	}
	return fmt.Sprintf("Policy(%d)", int(p))
}

// ParsePolicy returns the policy named s. It accepts exactly the names String
// returns.
func ParsePolicy(s string) (Policy, error) {
	for p, name := range policyNames {
		if s == name {
			return Policy(p), nil
		}
	}
	return 0, fmt.Errorf("%w %q: want %q or %q", ErrUnknownPolicy, s, policyNames[LeastInFlight], policyNames[RoundRobin])
}

// MarshalText implements encoding.TextMarshaler, so a Policy reads well in
// JSON, YAML and flags.
func (p Policy) MarshalText() ([]byte, error) {
	if !p.valid() {
		return nil, fmt.Errorf("%w: %d", ErrUnknownPolicy, int(p))
	}
	return []byte(policyNames[p]), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with ParsePolicy.
func (p *Policy) UnmarshalText(text []byte) error {
	parsed, err := ParsePolicy(string(text))
	if err != nil {
		return err
	}
	*p = parsed
	return nil
}

func (p Policy) valid() bool { return p >= 0 && int(p) < len(policyNames) }
