package jobindex

import (
	"testing"
)

type testJob struct {
	id              uint64
	require, prefer []string
	state           State
}

func indexOf(t testing.TB, jobs ...testJob) *Index {
	t.Helper()
	x := New()
	for _, j := range jobs {
		if err := x.AddState(j.id, "g", j.require, j.prefer, j.state); err != nil {
			t.Fatal(err)
		}
	}
	return x
}

type pick struct {
	id uint64
	m  Match
}

func TestSelect(t *testing.T) {
	t.Parallel()
	gpu, ssd := []string{"gpu"}, []string{"ssd"}
	tests := []struct {
		name       string
		jobs       []testJob
		held       []string
		candidates []uint64
		want       pick // from Select over candidates
		wantAny    pick // from SelectAny
	}{
		{name: "empty index", held: gpu, candidates: []uint64{1, 2}},
		{
			name:       "plain job goes anywhere",
			jobs:       []testJob{{id: 1}},
			candidates: []uint64{1},
			want:       pick{1, MatchFallback}, wantAny: pick{1, MatchFallback},
		},
		{
			name:       "requirement not held",
			jobs:       []testJob{{id: 1, require: gpu}},
			held:       ssd,
			candidates: []uint64{1},
		},
		{
			name:       "requirement held",
			jobs:       []testJob{{id: 1, require: gpu}},
			held:       []string{"ssd", "gpu"},
			candidates: []uint64{1},
			want:       pick{1, MatchRequired}, wantAny: pick{1, MatchRequired},
		},
		{
			name:       "preferred candidate beats earlier fallback",
			jobs:       []testJob{{id: 1}, {id: 2, require: gpu}, {id: 3, prefer: gpu}},
			held:       gpu,
			candidates: []uint64{1, 2, 3},
			want:       pick{3, MatchPreferred}, wantAny: pick{3, MatchPreferred},
		},
		{
			name:       "first fitting candidate wins without preference",
			jobs:       []testJob{{id: 1}, {id: 2, require: gpu}},
			held:       gpu,
			candidates: []uint64{2, 1},
			want:       pick{2, MatchRequired}, wantAny: pick{1, MatchFallback},
		},
		{
			name:       "preference does not override a missing requirement",
			jobs:       []testJob{{id: 1, require: ssd, prefer: gpu}, {id: 2, prefer: ssd}},
			held:       gpu,
			candidates: []uint64{1, 2},
			want:       pick{2, MatchFallback}, wantAny: pick{2, MatchFallback},
		},
		{
			name:       "preference among several resources",
			jobs:       []testJob{{id: 1, prefer: []string{"a", "gpu"}}, {id: 2, prefer: []string{"b"}}},
			held:       gpu,
			candidates: []uint64{2, 1},
			want:       pick{1, MatchPreferred}, wantAny: pick{1, MatchPreferred},
		},
		{
			name: "non-pending and unknown candidates are skipped",
			jobs: []testJob{
				{id: 1, prefer: gpu, state: Running}, {id: 2, prefer: gpu, state: Done},
				{id: 3, prefer: gpu, state: RetryWait}, {id: 4, prefer: gpu},
			},
			held:       gpu,
			candidates: []uint64{9, 1, 2, 3, 4},
			want:       pick{4, MatchPreferred}, wantAny: pick{4, MatchPreferred},
		},
		{
			name:       "SelectAny takes the lowest ID within the tier",
			jobs:       []testJob{{id: 10, prefer: gpu}, {id: 5, prefer: gpu}, {id: 1}, {id: 7, prefer: []string{"gpu", "x"}}},
			held:       gpu,
			candidates: []uint64{10, 7, 5},
			want:       pick{10, MatchPreferred}, wantAny: pick{5, MatchPreferred},
		},
		{
			name:       "empty pool runs only unconstrained jobs",
			jobs:       []testJob{{id: 1, require: gpu}, {id: 2, prefer: gpu}},
			candidates: []uint64{1, 2},
			want:       pick{2, MatchFallback}, wantAny: pick{2, MatchFallback},
		},
		{
			name:       "multi-resource requirement needs all",
			jobs:       []testJob{{id: 1, require: []string{"gpu", "ssd"}}, {id: 2, require: []string{"gpu", "ssd", "tpu"}}},
			held:       []string{"gpu", "ssd"},
			candidates: []uint64{2, 1},
			want:       pick{1, MatchRequired}, wantAny: pick{1, MatchRequired},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			x := indexOf(t, tt.jobs...)
			w := x.Compile(tt.held)
			id, m, ok := x.Select(w, tt.candidates)
			if got := (pick{id, m}); got != tt.want || ok != (tt.want.m != MatchNone) {
				t.Errorf("Select=%v,%v, want %v", got, ok, tt.want)
			}
			id, m, ok = x.SelectAny(w)
			if got := (pick{id, m}); got != tt.wantAny || ok != (tt.wantAny.m != MatchNone) {
				t.Errorf("SelectAny=%v,%v, want %v", got, ok, tt.wantAny)
			}
		})
	}
}

// TestResourceSetFollowsIndex checks that a ResourceSet compiled before a resource existed, or
// for another index, or before a resource's ID was released and reused, still answers right.
func TestResourceSetFollowsIndex(t *testing.T) {
	t.Parallel()
	x := New()
	w := x.Compile([]string{"gpu", "gpu", ""})
	if got := w.Names(); len(got) != 1 || got[0] != "gpu" {
		t.Fatalf("Names=%v", got)
	}
	if _, _, ok := x.SelectAny(w); ok {
		t.Fatal("selected from an empty index")
	}
	if err := x.Add(1, "a", []string{"gpu"}, nil); err != nil {
		t.Fatal(err)
	}
	if id, m, ok := x.SelectAny(w); !ok || id != 1 || m != MatchRequired {
		t.Fatalf("after the resource appeared: %d,%s,%v", id, m, ok)
	}

	// Free gpu's resource ID, then let another resource take it.
	if _, err := x.Move(1, Canceled); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Forget("a"); err != nil {
		t.Fatal(err)
	}
	if err := x.Add(2, "b", []string{"tpu"}, nil); err != nil {
		t.Fatal(err)
	}
	if id, m, ok := x.SelectAny(w); ok {
		t.Fatalf("gpu pool selected %d (%s), which requires tpu", id, m)
	}
	if err := x.Add(3, "b", nil, []string{"gpu"}); err != nil {
		t.Fatal(err)
	}
	if id, m, ok := x.SelectAny(w); !ok || id != 3 || m != MatchPreferred {
		t.Fatalf("SelectAny=%d,%s,%v, want 3 preferred", id, m, ok)
	}

	// The same set against another index.
	y := indexOf(t, testJob{id: 9, prefer: []string{"gpu"}})
	if id, m, ok := y.Select(w, []uint64{9}); !ok || id != 9 || m != MatchPreferred {
		t.Fatalf("other index: %d,%s,%v", id, m, ok)
	}
	if id, _, _ := x.SelectAny(w); id != 3 {
		t.Fatalf("back on the first index: %d", id)
	}
}

func TestMatchString(t *testing.T) {
	t.Parallel()
	for m, want := range map[Match]string{
		MatchNone: "none", MatchPreferred: "preferred", MatchRequired: "required", MatchFallback: "fallback", 9: "Match(9)",
	} {
		if got := m.String(); got != want {
			t.Errorf("%d.String()=%q, want %q", m, got, want)
		}
	}
}

// TestSelectLearned: a learned resource ranks a job preferring it between one preferring a held
// resource and one that merely fits, and never meets a requirement.
func TestSelectLearned(t *testing.T) {
	t.Parallel()
	x := New()
	for _, j := range []struct {
		id              uint64
		require, prefer []string
	}{
		{1, nil, nil},               // fits anywhere
		{2, []string{"gpu"}, nil},   // requires what the pool only learned
		{3, nil, []string{"warm"}},  // prefers a learned resource
		{4, nil, []string{"cache"}}, // prefers a held resource
	} {
		if err := x.Add(j.id, "g", j.require, j.prefer); err != nil {
			t.Fatal(err)
		}
	}
	w := x.CompileLearned([]string{"cache"}, []string{"warm", "gpu"})
	for _, tc := range []struct {
		cands []uint64
		want  uint64
		m     Match
	}{
		{[]uint64{1, 3, 4}, 4, MatchPreferred},
		{[]uint64{1, 3}, 3, MatchLearned},
		{[]uint64{3, 1}, 3, MatchLearned},
		{[]uint64{1, 2}, 1, MatchFallback},
	} {
		id, m, ok := x.Select(w, tc.cands)
		if !ok || id != tc.want || m != tc.m {
			t.Errorf("Select(%v) = %d %v %v, want %d %v", tc.cands, id, m, ok, tc.want, tc.m)
		}
	}
	if _, _, ok := x.Select(w, []uint64{2}); ok {
		t.Error("a learned resource met a requirement")
	}
	if id, m, ok := x.SelectAny(x.CompileLearned(nil, []string{"warm"})); !ok || id != 3 || m != MatchLearned {
		t.Errorf("SelectAny = %d %v %v, want 3 learned", id, m, ok)
	}
}

// TestMayPrefer: true exactly when some job profile prefers a resource the set holds or learned
// and has its requirements met by it.
func TestMayPrefer(t *testing.T) {
	t.Parallel()
	x := New()
	for id, j := range map[uint64]struct{ require, prefer []string }{
		1: {nil, nil},
		2: {[]string{"gpu"}, []string{"cache"}}, // prefers cache, but only where a gpu is
		3: {nil, []string{"warm"}},
	} {
		if err := x.Add(id, "g", j.require, j.prefer); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		held, learned []string
		want          bool
	}{
		{nil, nil, false},
		{[]string{"disk"}, nil, false},
		{[]string{"cache"}, nil, false}, // job 2 prefers it but requires a gpu
		{[]string{"cache", "gpu"}, nil, true},
		{[]string{"warm"}, nil, true},
		{nil, []string{"warm"}, true},
	} {
		if got := x.MayPrefer(x.CompileLearned(tc.held, tc.learned)); got != tc.want {
			t.Errorf("MayPrefer(held %v, learned %v) = %v, want %v", tc.held, tc.learned, got, tc.want)
		}
	}
}

// TestSelectForAPoolNothingSuitsBetter: for a set no job profile prefers anything of, Select
// answers the first pending candidate whose requirements the set meets, skipping jobs not
// pending, unknown IDs and jobs requiring what the set lacks; ok is false when none fits.
func TestSelectForAPoolNothingSuitsBetter(t *testing.T) {
	t.Parallel()
	x := New()
	for id, j := range map[uint64]struct{ require, prefer []string }{
		1: {nil, nil},
		2: {[]string{"gpu"}, nil},
		3: {nil, []string{"warm"}}, // prefers something the set does not hold
		4: {nil, nil},
	} {
		if err := x.Add(id, "g", j.require, j.prefer); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := x.Move(1, Running); err != nil {
		t.Fatal(err)
	}
	w := x.Compile(nil)
	if x.MayPrefer(w) {
		t.Fatal("MayPrefer of an empty set")
	}
	for _, tc := range []struct {
		cands []uint64
		want  uint64
		ok    bool
	}{
		{[]uint64{1, 99, 2, 3, 4}, 3, true}, // 1 runs, 99 unknown, 2 needs a gpu
		{[]uint64{4, 3}, 4, true},
		{[]uint64{1, 2, 99}, 0, false},
	} {
		id, m, ok := x.Select(w, tc.cands)
		if id != tc.want || ok != tc.ok || ok && m != MatchFallback {
			t.Errorf("Select(%v) = %d %v %v, want %d %v", tc.cands, id, m, ok, tc.want, tc.ok)
		}
	}
}
