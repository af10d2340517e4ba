package spreader_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/weavejobs/weave/spreader"
)

// OpenSlot gives a waiting group a slot beyond the feeders at once; the slot closes when the
// group leaves it, and the group that waited behind it still waits for a feeder slot.
func TestOpenSlot(t *testing.T) {
	s := setup(t, spreader.Config{Feeders: 1, Policy: spreader.RoundRobin})
	addGroup(t, s, "big", 3, true)
	addGroup(t, s, "next", 1, true)
	addGroup(t, s, "urgent", 2, true)
	if err := s.OpenSlot("big"); !errors.Is(err, spreader.ErrNotWaiting) {
		t.Fatalf("OpenSlot of an active group: %v, want ErrNotWaiting", err)
	}
	must(t, s.OpenSlot("urgent"))
	if got := slices.Collect(s.Holders()); !slices.Equal(got, []string{"big", "urgent"}) || s.Extra() != 1 || s.Waiting() != 1 {
		t.Fatalf("holders %v, extra %d, waiting %d; want big and urgent, 1, 1", got, s.Extra(), s.Waiting())
	}
	if got, want := releaseAll(s, true), "big1 urgent1 big2 urgent2 big3 next1"; got != want {
		t.Fatalf("released %q, want %q", got, want)
	}
	if s.Extra() != 0 || s.Active() != 0 {
		t.Fatalf("extra %d, active %d after every group left; want 0, 0", s.Extra(), s.Active())
	}
}
