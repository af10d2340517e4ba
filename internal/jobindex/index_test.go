package jobindex

import (
	"errors"
	"maps"
	"slices"
	"testing"
)

func TestAddErrors(t *testing.T) {
	t.Parallel()
	x := New()
	if err := x.Add(1, "g", nil, nil); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name            string
		id              uint64
		group           string
		require, prefer []string
		state           State
		want            error
	}{
		{"duplicate", 1, "h", nil, nil, Done, ErrDuplicateJob},
		{"reserved ID", noJob, "g", nil, nil, Pending, ErrInvalidJob},
		{"empty group", 2, "", nil, nil, Pending, ErrInvalidJob},
		{"empty required name", 2, "g", []string{"a", ""}, nil, Pending, ErrInvalidJob},
		{"empty preferred name", 2, "g", nil, []string{""}, Pending, ErrInvalidJob},
		{"invalid state", 2, "g", nil, nil, State(numStates), ErrInvalidState},
	}
	for _, tt := range tests {
		if err := x.AddState(tt.id, tt.group, tt.require, tt.prefer, tt.state); !errors.Is(err, tt.want) {
			t.Errorf("%s: err=%v, want %v", tt.name, err, tt.want)
		}
	}
	if err := x.Add(MaxID, "g", nil, nil); err != nil {
		t.Errorf("MaxID refused: %v", err)
	}
	if x.Len() != 2 {
		t.Fatalf("Len=%d after failed adds, want 2", x.Len())
	}
	if err := x.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}

// TestAddDoesNotRetainSlices reuses the caller's slice between adds, as a header parser would.
func TestAddDoesNotRetainSlices(t *testing.T) {
	t.Parallel()
	x := New()
	names := []string{"gpu"}
	if err := x.Add(1, "g", names, nil); err != nil {
		t.Fatal(err)
	}
	names[0] = "ssd"
	if err := x.Add(2, "g", names, nil); err != nil {
		t.Fatal(err)
	}
	if c := x.ResourceCounts("gpu").Required.Pending; c != 1 {
		t.Fatalf("gpu requirements: %d, want 1", c)
	}
	if c := x.ResourceCounts("ssd").Required.Pending; c != 1 {
		t.Fatalf("ssd requirements: %d, want 1", c)
	}
}

func TestMoveUnknown(t *testing.T) {
	t.Parallel()
	x := New()
	if _, err := x.Move(5, Running); !errors.Is(err, ErrUnknownJob) {
		t.Fatalf("err=%v, want ErrUnknownJob", err)
	}
}

func TestMoveManyAllOrNothing(t *testing.T) {
	t.Parallel()
	x := indexOf(t, testJob{id: 1}, testJob{id: 2}, testJob{id: 3, state: Done})
	tests := []struct {
		name string
		ids  []uint64
		want error
	}{
		{"illegal member", []uint64{1, 2, 3}, ErrIllegalTransition},
		{"unknown member", []uint64{1, 9}, ErrUnknownJob},
		{"listed twice", []uint64{1, 2, 1}, ErrIllegalTransition},
	}
	for _, tt := range tests {
		if err := x.MoveMany(tt.ids, Running); !errors.Is(err, tt.want) {
			t.Errorf("%s: err=%v, want %v", tt.name, err, tt.want)
		}
		if c := x.Count(Running); c != 0 {
			t.Fatalf("%s: %d jobs moved by a failed batch", tt.name, c)
		}
	}
	if err := x.MoveMany([]uint64{2, 1}, Running); err != nil {
		t.Fatal(err)
	}
	if err := x.MoveMany(nil, Done); err != nil {
		t.Fatal(err)
	}
	if err := x.MoveMany([]uint64{1}, State(numStates)); !errors.Is(err, ErrInvalidState) {
		t.Fatalf("invalid target: %v", err)
	}
	if c := x.Counts(); c != (Counts{Running: 2, Done: 1}) {
		t.Fatalf("Counts=%+v", c)
	}
}

func TestForget(t *testing.T) {
	t.Parallel()
	x := New()
	for id := uint64(1); id <= 6; id++ {
		if err := x.AddState(id, "old", []string{"gpu"}, []string{"ssd"}, []State{Done, Failed, Canceled}[id%3]); err != nil {
			t.Fatal(err)
		}
	}
	if err := x.Add(7, "live", []string{"gpu"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Forget("live"); !errors.Is(err, ErrGroupActive) {
		t.Fatalf("forgetting an active group: %v", err)
	}
	if _, err := x.Forget("nope"); !errors.Is(err, ErrUnknownGroup) {
		t.Fatalf("forgetting an unknown group: %v", err)
	}
	if n, err := x.Forget("old"); err != nil || n != 6 {
		t.Fatalf("Forget=%d,%v, want 6", n, err)
	}
	if _, ok := x.GroupCounts("old"); ok {
		t.Fatal("forgotten group still counted")
	}
	if c := x.ResourceCounts("ssd"); c != (ResourceCounts{}) {
		t.Fatalf("ssd still counted: %+v", c)
	}
	if got := slices.Collect(maps.Keys(maps.Collect(x.Resources()))); !slices.Equal(got, []string{"gpu"}) {
		t.Fatalf("Resources=%v, want only gpu", got)
	}
	if err := x.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}

// TestIterators runs the iterators over many entries, breaks out early, and calls back into the
// index from the loop body: reads from every iterator, changes from Groups' (a group forgotten
// while Groups runs).
func TestIterators(t *testing.T) {
	t.Parallel()
	x := New()
	const n = 775
	for id := range uint64(n) {
		group := "big"
		if id%2 == 1 {
			group = "g" + string(rune('a'+id%26)) + string(rune('a'+id/26%26))
		}
		if err := x.Add(id*3, group, []string{"r" + string(rune('a'+id%26)) + string(rune('a'+id/26%26))}, nil); err != nil {
			t.Fatal(err)
		}
	}
	groups := 0
	for g, c := range x.Groups() {
		if got, ok := x.GroupCounts(g); !ok || got != c {
			t.Fatalf("group %s: %+v vs %+v", g, c, got)
		}
		groups++
	}
	if want := len(x.groupIDs); groups != want {
		t.Fatalf("Groups yielded %d, want %d", groups, want)
	}
	resources := 0
	for r := range x.Resources() {
		_ = x.ResourceCounts(r)
		resources++
	}
	if want := len(x.resourceIDs); resources != want {
		t.Fatalf("Resources yielded %d, want %d", resources, want)
	}
	big := slices.Collect(x.GroupJobs("big", Pending)) // collected first: the moves below change the index
	if len(big) != (n+1)/2 || !slices.IsSorted(big) {
		t.Fatalf("GroupJobs yielded %d jobs (sorted %v), want %d", len(big), slices.IsSorted(big), (n+1)/2)
	}
	if err := x.MoveMany(big, Running); err != nil {
		t.Fatal(err)
	}
	if got := slices.Collect(x.GroupJobs("big", Running)); !slices.Equal(got, big) {
		t.Fatalf("GroupJobs(big, Running) yielded %d jobs, want the %d moved", len(got), len(big))
	}
	for range x.Groups() {
		break
	}
	for range x.Resources() {
		break
	}
	for range x.GroupJobs("big", Running) {
		break
	}
	// Forgetting groups from Groups' loop body: every other group is still yielded once.
	for id := range uint64(n) {
		if id%2 == 1 {
			if _, err := x.Move(id*3, Canceled); err != nil {
				t.Fatal(err)
			}
		}
	}
	seen := map[string]int{}
	for g := range x.Groups() {
		seen[g]++
		if g != "big" {
			if _, err := x.Forget(g); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(seen) != groups || seen["big"] != 1 {
		t.Fatalf("Groups with forgetting body yielded %d groups (big %d times), want %d", len(seen), seen["big"], groups)
	}
	if got := slices.Collect(maps.Keys(maps.Collect(x.Groups()))); !slices.Equal(got, []string{"big"}) {
		t.Fatalf("groups left %v, want [big]", got)
	}
	if slices.Collect(x.GroupJobs("big", State(numStates))) != nil || slices.Collect(x.GroupJobs("none", Running)) != nil {
		t.Fatal("GroupJobs yielded jobs for an invalid state or unknown group")
	}
}

func TestJobResources(t *testing.T) {
	t.Parallel()
	x := New()
	if err := x.Add(1, "g", []string{"eu", "ssd"}, []string{"cache-1"}); err != nil {
		t.Fatal(err)
	}
	if err := x.Add(2, "g", nil, nil); err != nil {
		t.Fatal(err)
	}
	if got := slices.Collect(x.JobResources(1)); !slices.Equal(got, []string{"eu", "ssd", "cache-1"}) {
		t.Fatalf("job 1 resources %v", got)
	}
	if got := slices.Collect(x.JobResources(2)); len(got) != 0 {
		t.Fatalf("job 2 resources %v", got)
	}
	if got := slices.Collect(x.JobResources(3)); len(got) != 0 {
		t.Fatalf("unknown job resources %v", got)
	}
}

// TestAloneJobs: jobs added alone share spans, count in no group, and are forgotten one by one
// from the start, the middle and the end of a span, releasing what only they used.
func TestAloneJobs(t *testing.T) {
	t.Parallel()
	x := New()
	for id := uint64(10); id < 20; id++ {
		if err := x.AddAlone(id, nil, nil, Pending); err != nil {
			t.Fatal(err)
		}
	}
	if err := x.AddAlone(20, []string{"gpu"}, nil, Pending); err != nil {
		t.Fatal(err)
	}
	if err := x.Add(21, "g", nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := x.AddAlone(15, nil, nil, Pending); !errors.Is(err, ErrDuplicateJob) {
		t.Fatalf("adding a job twice: %v", err)
	}
	if x.catalog.n != 3 {
		t.Fatalf("%d spans for ten jobs alone of one profile, one of another and one of a group, want 3", x.catalog.n)
	}
	if g, ok := x.GroupOf(12); g != "" || !ok {
		t.Fatalf("GroupOf(alone) = %q, %v", g, ok)
	}
	if g, ok := x.GroupOf(21); g != "g" || !ok {
		t.Fatalf("GroupOf(21) = %q, %v", g, ok)
	}
	if _, ok := x.GroupOf(99); ok {
		t.Fatal("GroupOf an unknown job reports ok")
	}
	if got := maps.Collect(x.Groups()); len(got) != 1 || got["g"].Pending != 1 {
		t.Fatalf("Groups = %v, want g alone: jobs alone count in no group", got)
	}
	if err := x.ForgetJob(12); !errors.Is(err, ErrGroupActive) {
		t.Fatalf("forgetting a pending job: %v", err)
	}
	if err := x.ForgetJob(21); !errors.Is(err, ErrInvalidJob) {
		t.Fatalf("forgetting a job of a group: %v", err)
	}
	if err := x.ForgetJob(99); !errors.Is(err, ErrUnknownJob) {
		t.Fatalf("forgetting an unknown job: %v", err)
	}
	for i, id := range []uint64{10, 14, 19, 20, 15, 11} { // the span's start, middle, end; a span of its own
		x.moveTo(t, id, []State{Done, Failed, Canceled}[i%3]) // failed too: it has ended, though a redrive may run it again
		if err := x.ForgetJob(id); err != nil {
			t.Fatalf("ForgetJob(%d): %v", id, err)
		}
		if _, ok := x.State(id); ok {
			t.Fatalf("job %d still indexed", id)
		}
		if err := x.checkInvariants(); err != nil {
			t.Fatalf("after ForgetJob(%d): %v", id, err)
		}
	}
	if x.catalog.n != 3 { // 12-13, 16-18, and the group's
		t.Fatalf("%d spans left, want 3", x.catalog.n)
	}
	if _, ok := x.resourceIDs["gpu"]; ok {
		t.Fatal("a resource only a forgotten job used is still interned")
	}
	if c := x.Counts(); c != (Counts{Pending: 6}) {
		t.Fatalf("Counts = %+v, want 6 pending", c)
	}
}

// moveTo moves pending job id along the state machine to a terminal state.
func (x *Index) moveTo(t *testing.T, id uint64, to State) {
	t.Helper()
	if _, err := x.Move(id, Running); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Move(id, to); err != nil {
		t.Fatal(err)
	}
}

// TestFirstPending: the lowest pending job at or above a bound, in each run of IDs.
func TestFirstPending(t *testing.T) {
	t.Parallel()
	x := New()
	if _, ok := x.FirstPending(0); ok {
		t.Fatal("an empty index has a pending job")
	}
	for _, id := range []uint64{5, 9, PackedIDs + 64, PackedIDs + 65} {
		if err := x.Add(id, "g", nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	x.moveTo(t, 5, Done)
	for _, tc := range []struct{ from, want uint64 }{{0, 9}, {9, 9}, {10, PackedIDs + 64}, {PackedIDs, PackedIDs + 64}} {
		if got, ok := x.FirstPending(tc.from); !ok || got != tc.want {
			t.Fatalf("FirstPending(%d) = %d, %v; want %d", tc.from, got, ok, tc.want)
		}
	}
	if _, ok := x.FirstPending(PackedIDs + 66); ok {
		t.Fatal("a pending job above the last")
	}
}
