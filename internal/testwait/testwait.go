// Package testwait is how Weave's tests wait for something to happen: a condition polled until it
// holds, with a deadline, and a failure that says what was awaited and what was last seen. A test
// never sleeps to wait.
package testwait

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// Interval is how often For and Seen poll their condition: short, because conditions read local
// state or ask a local server, so that a wait adds little to a test.
const Interval = 5 * time.Millisecond

// For polls cond until it holds. If it does not within timeout, For fails t (from the test's
// goroutine, as t.Fatal must be called) with "timed out after <timeout> waiting for <what>".
func For(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	Seen(t, timeout, what, func() (bool, string) { return cond(), "" })
}

// Seen is For for a condition that also describes what it saw each time it did not hold (a count,
// a state, a body); a failure ends with the last description, so it shows how far things got.
func Seen(t testing.TB, timeout time.Duration, what string, cond func() (ok bool, seen string)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last string
	err := Until(ctx, Interval, func() (string, error) {
		ok, seen := cond()
		if ok {
			return "", nil
		}
		last = seen
		return what, nil
	})
	switch {
	case err == nil:
	case last != "":
		t.Fatalf("timed out after %v waiting for %s; last seen: %s", timeout, what, last)
	default:
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
}

// Until calls check every interval until it reports nothing left to wait for, returns an error,
// or ctx ends; it is the form for code that returns errors instead of failing a test (test
// fixtures, long-running checks). check returns what it still waits for, "" once the condition
// holds; when ctx ends first, the error names that and wraps ctx's cause.
func Until(ctx context.Context, interval time.Duration, check func() (waiting string, err error)) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		waiting, err := check()
		if err != nil {
			return err
		}
		if waiting == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("still waiting for %s: %w", waiting, context.Cause(ctx))
		case <-tick.C:
		}
	}
}
