package jobindex

import (
	"slices"
	"testing"
)

// TestGroupInBothRunsOfIDs: a group with jobs below PackedIDs (stored alone) and above it (in
// packs), with another group's jobs in between in both runs, lists, counts and forgets exactly
// its own jobs.
func TestGroupInBothRunsOfIDs(t *testing.T) {
	x := New()
	add := func(id uint64, group string) {
		t.Helper()
		if err := x.Add(id, group, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	add(5, "mixed")
	add(6, "other")
	add(1<<20, "other") // another block, between the runs
	add(PackedIDs+32*7, "mixed")
	add(PackedIDs+32*7+1, "mixed")
	add(PackedIDs+32*8, "other")
	add(PackedIDs+32*9, "mixed")
	if err := x.checkInvariants(); err != nil {
		t.Fatal(err)
	}
	want := []uint64{5, PackedIDs + 32*7, PackedIDs + 32*7 + 1, PackedIDs + 32*9}
	if got := slices.Collect(x.GroupJobs("mixed", Pending)); !slices.Equal(got, want) {
		t.Fatalf("GroupJobs = %v, want %v", got, want)
	}
	if got := slices.Collect(x.GroupJobs("other", Pending)); !slices.Equal(got, []uint64{6, 1 << 20, PackedIDs + 32*8}) {
		t.Fatalf("the other group's jobs: %v", got)
	}
	for _, id := range want {
		if _, err := x.Move(id, Running); err != nil {
			t.Fatal(err)
		}
		if _, err := x.Move(id, Done); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := x.Forget("mixed"); err != nil || n != 4 {
		t.Fatalf("Forget = %d, %v; want 4", n, err)
	}
	if err := x.checkInvariants(); err != nil {
		t.Fatal(err)
	}
	if x.Len() != 3 || x.Count(Pending) != 3 {
		t.Fatalf("after Forget: %d jobs, %d pending; want the other group's 3", x.Len(), x.Count(Pending))
	}
}
