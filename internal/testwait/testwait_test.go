package testwait_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weavejobs/weave/internal/testwait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// failT records the failure For or Seen reports instead of ending the test.
type failT struct {
	testing.TB
	msg string
}

func (f *failT) Helper() {}

func (f *failT) Fatalf(format string, args ...any) { f.msg = fmt.Sprintf(format, args...) }

func TestForReturnsOnceTheConditionHolds(t *testing.T) {
	calls := 0
	f := &failT{TB: t}
	testwait.For(f, time.Minute, "the third call", func() bool { calls++; return calls == 3 })
	if f.msg != "" || calls != 3 {
		t.Fatalf("failure %q after %d calls, want none after 3", f.msg, calls)
	}
}

func TestForNamesWhatItWaitedFor(t *testing.T) {
	f := &failT{TB: t}
	start := time.Now()
	testwait.For(f, 50*time.Millisecond, "a condition that never holds", func() bool { return false })
	if want := "timed out after 50ms waiting for a condition that never holds"; f.msg != want {
		t.Fatalf("failure %q, want %q", f.msg, want)
	}
	if time.Since(start) < 50*time.Millisecond {
		t.Fatalf("gave up after %v, before the timeout", time.Since(start))
	}
}

func TestSeenReportsTheLastObservation(t *testing.T) {
	f := &failT{TB: t}
	n := 0
	testwait.Seen(f, 30*time.Millisecond, "ten", func() (bool, string) { n++; return false, fmt.Sprintf("count %d", n) })
	if want := fmt.Sprintf("timed out after 30ms waiting for ten; last seen: count %d", n); f.msg != want {
		t.Fatalf("failure %q, want %q", f.msg, want)
	}
}

func TestUntil(t *testing.T) {
	boom := errors.New("boom")
	if err := testwait.Until(t.Context(), time.Millisecond, func() (string, error) { return "x", boom }); err != boom {
		t.Errorf("a check's error: got %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	err := testwait.Until(ctx, time.Millisecond, func() (string, error) { return "the leader", nil })
	if !errors.Is(err, context.DeadlineExceeded) || err.Error() != "still waiting for the leader: context deadline exceeded" {
		t.Errorf("the context's end: got %v", err)
	}
}
