package jobindex

import (
	"fmt"
	"strconv"
)

// State is where a job is in its lifecycle. The zero value is [Pending], the state every job
// starts in.
type State uint8

// The job states. Their order is the order of Counts and of the state bitmaps.
const (
	// Pending jobs wait to be released to a worker pool.
	Pending State = iota
	// Running jobs have been released and not reported yet.
	Running
	// RetryWait jobs failed an attempt and wait for their retry delay to elapse.
	RetryWait
	// Done jobs succeeded. Terminal.
	Done
	// Failed jobs failed permanently or ran out of attempts. A redrive makes them pending again.
	Failed
	// Canceled jobs were canceled before they finished. Terminal.
	Canceled
	// Delayed jobs were admitted with a time to run at (Job.RunAt) still ahead: they wait for
	// it, holding no worker capacity, and become pending when it comes. A job enters this state
	// only when it is added (AddState).
	Delayed
)

// numStates is the number of states; states are 0..numStates-1 so they can index arrays.
const numStates = 7

var stateNames = [numStates]string{"pending", "running", "retrywait", "done", "failed", "canceled", "delayed"}

// transitions is the legal-move table from ARCHITECTURE.md ("Job state machine"), indexed
// [from][to]. Everything the index enforces derives from it.
var transitions = [numStates][numStates]bool{
	Pending:   {Running: true, Canceled: true},
	Running:   {Done: true, Failed: true, RetryWait: true, Canceled: true, Pending: true},
	RetryWait: {Pending: true, Canceled: true},
	Failed:    {Pending: true},
	Delayed:   {Pending: true, Canceled: true},
}

// predecessors[to] lists the states a job may leave to enter to. Move tries only these, so a
// legal move costs one bitmap removal per candidate state instead of a full state look-up.
var predecessors = func() (p [numStates][]State) {
	for from := range State(numStates) {
		for to := range State(numStates) {
			if transitions[from][to] {
				p[to] = append(p[to], from)
			}
		}
	}
	return p
}()

// String returns the lower-case name used in logs, status output and [ParseState].
func (s State) String() string {
	if s.valid() {
		return stateNames[s]
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// Terminal reports whether no transition leaves s (done and canceled).
func (s State) Terminal() bool {
	if !s.valid() {
		return false
	}
	for _, ok := range transitions[s] {
		if ok {
			return false
		}
	}
	return true
}

func (s State) valid() bool { return s < numStates }

// ParseState returns the state named name, as printed by [State.String].
func ParseState(name string) (State, error) {
	for s, n := range stateNames {
		if n == name {
			return State(s), nil
		}
	}
	return 0, fmt.Errorf("%w %q", ErrInvalidState, name)
}

// AllStates returns every state in declaration order, for rendering tables and diagrams.
func AllStates() []State {
	all := make([]State, numStates)
	for i := range all {
		all[i] = State(i)
	}
	return all
}

// CanTransition reports whether a job may move from one state to another. Staying in the same
// state is not a transition.
func CanTransition(from, to State) bool {
	return from.valid() && to.valid() && transitions[from][to]
}
