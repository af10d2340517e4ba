package spreader_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/weavejobs/weave/spreader"
)

// A group releases its jobs of the highest priority first, each priority's in push order, also
// those pushed after others were queued; the interleaving between groups is unchanged.
func TestPushAtOrdersJobsWithinTheirGroup(t *testing.T) {
	s := setup(t, spreader.Config{Feeders: 2, Policy: spreader.RoundRobin})
	must(t, s.AddGroup("a"))
	must(t, s.AddGroup("b"))
	must(t, s.Push("a", "a1", "a2"))
	must(t, s.PushAt("a", 5, "a5x", "a5y"))
	must(t, s.PushAt("a", 2, "a2x"))
	must(t, s.Push("b", "b1", "b2", "b3"))
	must(t, s.PushAt("a", 9, "a9"))
	if got := strings.Join(upcoming(s, "a"), " "); got != "a9 a5x a5y a2x a1 a2" {
		t.Fatalf("a's queue in release order: %s", got)
	}
	if got, want := releaseAll(s, true), "a9 b1 a5x b2 a5y b3 a2x a1 a2"; got != want {
		t.Fatalf("released %q, want %q", got, want)
	}
}

// Cancel returns the queued jobs in the order they would have been released, and a priority
// outside 0..MaxPriority is refused without queuing anything.
func TestPushAtCancelAndRange(t *testing.T) {
	s := setup(t, spreader.Config{Feeders: 1})
	must(t, s.AddGroup("a"))
	must(t, s.Push("a", "a1"))
	must(t, s.PushAt("a", 3, "a3"))
	for _, p := range []int{-1, spreader.MaxPriority + 1} {
		if err := s.PushAt("a", p, "bad"); !errors.Is(err, spreader.ErrInvalidPriority) {
			t.Fatalf("PushAt priority %d: %v, want ErrInvalidPriority", p, err)
		}
	}
	if q := s.Queued("a"); q != 2 {
		t.Fatalf("queued %d, want 2", q)
	}
	if got := strings.Join(s.Cancel("a"), " "); got != "a3 a1" {
		t.Fatalf("Cancel returned %q, want \"a3 a1\"", got)
	}
}

// Remove finds a queued job at any priority.
func TestRemoveFindsAPrioritizedJob(t *testing.T) {
	s := setup(t, spreader.Config{Feeders: 1})
	must(t, s.AddGroup("a"))
	must(t, s.Push("a", "a1"))
	must(t, s.PushAt("a", 4, "a4"))
	if !s.Remove("a", "a4", func(x, y string) bool { return x == y }) {
		t.Fatal("a4 not removed")
	}
	if got := releaseAll(s, true); got != "a1" {
		t.Fatalf("released %q, want a1", got)
	}
}

func upcoming(s *spreader.Scheduler[string, string], g string) []string {
	return s.Upcoming(nil, g, 100)
}
