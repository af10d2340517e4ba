package spreader_test

import (
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/weavejobs/weave/spreader"
)

// setup returns a scheduler over string groups and jobs with the given config.
func setup(t *testing.T, cfg spreader.Config) *spreader.Scheduler[string, string] {
	t.Helper()
	s, err := spreader.NewScheduler[string, string](cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// addGroup adds g with jobs g1..gn and seals it if sealed is true.
func addGroup(t *testing.T, s *spreader.Scheduler[string, string], g string, n int, sealed bool) {
	t.Helper()
	must(t, s.AddGroup(g))
	for i := 1; i <= n; i++ {
		must(t, s.Push(g, fmt.Sprint(g, i)))
	}
	if sealed {
		must(t, s.Seal(g))
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// releaseAll calls Next until nothing is ready and returns the jobs. If done is
// true, each job is reported Done at once, as if it took no time.
func releaseAll(s *spreader.Scheduler[string, string], done bool) string {
	var out []string
	for g, job, ok := s.Next(); ok; g, job, ok = s.Next() {
		out = append(out, job)
		if done {
			s.Done(g)
		}
	}
	return strings.Join(out, " ")
}

func offers(s *spreader.Scheduler[string, string]) string {
	var out []string
	for _, job := range s.Offers() {
		out = append(out, job)
	}
	return strings.Join(out, " ")
}

func TestNewScheduler(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cfg     spreader.Config
		wantErr bool
	}{
		{name: "defaults with one feeder", cfg: spreader.Config{Feeders: 1}},
		{name: "all fields", cfg: spreader.Config{Feeders: 9, Policy: spreader.RoundRobin, MaxInFlightPerGroup: 3}},
		{name: "zero feeders", cfg: spreader.Config{}, wantErr: true},
		{name: "negative feeders", cfg: spreader.Config{Feeders: -1}, wantErr: true},
		{name: "unknown policy", cfg: spreader.Config{Feeders: 1, Policy: 7}, wantErr: true},
		{name: "negative cap", cfg: spreader.Config{Feeders: 1, MaxInFlightPerGroup: -1}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := spreader.NewScheduler[string, int](tt.cfg)
			if tt.wantErr {
				if !errors.Is(err, spreader.ErrInvalidConfig) || s != nil {
					t.Fatalf("NewScheduler = %v, %v; want nil and ErrInvalidConfig", s, err)
				}
				return
			}
			if err != nil || s.Feeders() != tt.cfg.Feeders {
				t.Fatalf("NewScheduler = %v, %v", s, err)
			}
		})
	}
}

func TestSchedulerErrors(t *testing.T) {
	t.Parallel()
	s := setup(t, spreader.Config{Feeders: 1})
	addGroup(t, s, "a", 1, false)
	addGroup(t, s, "sealed", 1, true)
	tests := []struct {
		name string
		err  error
		want error
	}{
		{"AddGroup duplicate active", s.AddGroup("a"), spreader.ErrDuplicateGroup},
		{"AddGroup duplicate waiting", s.AddGroup("sealed"), spreader.ErrDuplicateGroup},
		{"Push unknown", s.Push("nope", "x"), spreader.ErrUnknownGroup},
		{"Push sealed", s.Push("sealed", "x"), spreader.ErrSealed},
		{"Push nothing to sealed", s.Push("sealed"), spreader.ErrSealed},
		{"Seal unknown", s.Seal("nope"), spreader.ErrUnknownGroup},
		{"Seal twice", s.Seal("sealed"), spreader.ErrSealed},
	}
	for _, tt := range tests {
		if !errors.Is(tt.err, tt.want) {
			t.Errorf("%s: error %v, want %v", tt.name, tt.err, tt.want)
		}
	}
	if err := s.Push("nope", "x"); !strings.Contains(err.Error(), "nope") {
		t.Errorf("error %q does not name the group", err)
	}
}

func TestSchedulerSlots(t *testing.T) {
	t.Parallel()

	t.Run("open group with an empty queue gives up its slot", func(t *testing.T) {
		t.Parallel()
		s := setup(t, spreader.Config{Feeders: 1})
		addGroup(t, s, "a", 1, false)
		addGroup(t, s, "b", 2, true)
		if g, job, _ := s.Next(); job != "a1" {
			t.Fatalf("released %s %q, want a1 (b waits for a's slot)", g, job)
		}
		// a has nothing queued and is not sealed: it is idle, and b holds the slot.
		if s.Active() != 1 || s.Waiting() != 0 {
			t.Fatalf("Active, Waiting = %d, %d; want 1, 0", s.Active(), s.Waiting())
		}
		must(t, s.Push("a", "a2")) // a joins the line behind b
		if s.Active() != 1 || s.Waiting() != 1 {
			t.Fatalf("after Push: Active, Waiting = %d, %d; want 1, 1", s.Active(), s.Waiting())
		}
		if got := releaseAll(s, true); got != "b1 b2 a2" {
			t.Fatalf("released %q, want b1 b2 a2", got)
		}
		if s.Active() != 0 || s.Waiting() != 0 {
			t.Fatalf("Active, Waiting = %d, %d; want 0, 0", s.Active(), s.Waiting())
		}
		must(t, s.Seal("a")) // idle and sealed: gone once a1 is done
		if s.InFlight("a") != 1 {
			t.Fatalf("InFlight(a) = %d, want 1", s.InFlight("a"))
		}
		s.Done("a")
		must(t, s.AddGroup("a")) // forgotten, so the key is free
	})

	t.Run("groups opened and never fed hold no slot", func(t *testing.T) {
		t.Parallel()
		s := setup(t, spreader.Config{Feeders: 2})
		for i := range 1000 {
			must(t, s.AddGroup(fmt.Sprint("stalled", i)))
		}
		addGroup(t, s, "x", 3, true)
		if got := releaseAll(s, true); got != "x1 x2 x3" {
			t.Fatalf("released %q, want x1 x2 x3", got)
		}
	})

	t.Run("sealed group leaves as its last job is released", func(t *testing.T) {
		t.Parallel()
		s := setup(t, spreader.Config{Feeders: 1})
		addGroup(t, s, "a", 1, true)
		addGroup(t, s, "b", 1, true)
		g, _, _ := s.Next()
		// a's job is still in flight, but a has nothing more to offer, so b
		// already holds the slot.
		if g != "a" || s.InFlight("a") != 1 || s.Active() != 1 || s.Waiting() != 0 {
			t.Fatalf("after Next: group %q, InFlight(a) %d, Active %d, Waiting %d", g, s.InFlight("a"), s.Active(), s.Waiting())
		}
		if err := s.AddGroup("a"); !errors.Is(err, spreader.ErrDuplicateGroup) {
			t.Fatalf("AddGroup(a) while draining: %v, want ErrDuplicateGroup", err)
		}
		s.Done("a")
		s.Done("a") // one too many: ignored
		if s.InFlight("a") != 0 {
			t.Fatalf("InFlight(a) = %d after Done", s.InFlight("a"))
		}
		must(t, s.AddGroup("a")) // forgotten once drained, so the key is free
	})

	t.Run("empty sealed groups are skipped", func(t *testing.T) {
		t.Parallel()
		s := setup(t, spreader.Config{Feeders: 2})
		addGroup(t, s, "a", 2, true)
		addGroup(t, s, "e1", 0, true)
		addGroup(t, s, "b", 1, true)
		addGroup(t, s, "e2", 0, true)
		addGroup(t, s, "c", 1, true)
		if got := releaseAll(s, true); got != "a1 b1 a2 c1" {
			t.Fatalf("released %q, want a1 b1 a2 c1", got)
		}
	})

	t.Run("cancel", func(t *testing.T) {
		t.Parallel()
		s := setup(t, spreader.Config{Feeders: 1})
		addGroup(t, s, "a", 3, false)
		addGroup(t, s, "b", 2, false)
		addGroup(t, s, "c", 1, true)
		if _, _, ok := s.Next(); !ok {
			t.Fatal("nothing released")
		}
		if got := s.Cancel("b"); !slices.Equal(got, []string{"b1", "b2"}) {
			t.Fatalf("Cancel(waiting b) = %v", got)
		}
		if got := s.Cancel("a"); !slices.Equal(got, []string{"a2", "a3"}) {
			t.Fatalf("Cancel(active a) = %v", got)
		}
		// a's slot went to c, the next live group in the line.
		if s.Active() != 1 || s.Waiting() != 0 || s.InFlight("a") != 0 {
			t.Fatalf("Active, Waiting, InFlight(a) = %d, %d, %d", s.Active(), s.Waiting(), s.InFlight("a"))
		}
		s.Done("a") // a's released job finishes after the cancel: ignored
		if got := releaseAll(s, true); got != "c1" {
			t.Fatalf("released %q, want c1", got)
		}
		if got := s.Cancel("nope"); got != nil {
			t.Fatalf("Cancel(unknown) = %v", got)
		}
		must(t, s.AddGroup("b")) // the key is free again
	})

	t.Run("Done on unknown group is ignored", func(t *testing.T) {
		t.Parallel()
		s := setup(t, spreader.Config{Feeders: 1})
		s.Done("nope")
		addGroup(t, s, "a", 1, false)
		s.Done("a")
		if s.InFlight("a") != 0 || s.InFlight("nope") != 0 || s.Queued("nope") != 0 {
			t.Fatal("Done changed counts it should not have")
		}
	})

	t.Run("take", func(t *testing.T) {
		t.Parallel()
		s := setup(t, spreader.Config{Feeders: 1})
		addGroup(t, s, "a", 2, false)
		addGroup(t, s, "b", 1, true)
		if job, ok := s.Take("b"); ok {
			t.Fatalf("Take(waiting b) = %q, true", job)
		}
		if job, ok := s.Take("a"); !ok || job != "a1" {
			t.Fatalf("Take(a) = %q, %v", job, ok)
		}
		if s.InFlight("a") != 1 || s.Queued("a") != 1 {
			t.Fatalf("InFlight, Queued = %d, %d", s.InFlight("a"), s.Queued("a"))
		}
	})
}

func TestSchedulerPolicyOrder(t *testing.T) {
	t.Parallel()
	tests := []struct {
		policy     spreader.Policy
		wantOffers string
	}{
		// In flight: a 2, b 1, c 0 (its job is done), d 0. Least first; ties
		// in rotation order from the slot after a's, which released last.
		{spreader.LeastInFlight, "c2 d1 b2 a3"},
		// Rotation order from the slot after a's.
		{spreader.RoundRobin, "b2 c2 d1 a3"},
	}
	for _, tt := range tests {
		t.Run(tt.policy.String(), func(t *testing.T) {
			t.Parallel()
			s := setup(t, spreader.Config{Feeders: 4, Policy: tt.policy})
			for _, g := range []string{"a", "b", "c", "d"} {
				addGroup(t, s, g, 3, false)
			}
			for _, g := range []string{"a", "b", "c", "a"} {
				if _, ok := s.Take(g); !ok {
					t.Fatalf("Take(%s) failed", g)
				}
			}
			s.Done("c")
			if got := offers(s); got != tt.wantOffers {
				t.Fatalf("Offers = %q, want %q", got, tt.wantOffers)
			}
			_, job, _ := s.Next()
			if want := strings.Fields(tt.wantOffers)[0]; job != want {
				t.Fatalf("Next = %q, want the first offer %q", job, want)
			}
		})
	}
}

// TestOffersWhileTaking takes every offer during the range. Each group is
// offered once, at its head job, in the order the range started with. A group
// that moves into a slot the range has passed waits for the next range.
func TestOffersWhileTaking(t *testing.T) {
	t.Parallel()
	tests := []struct {
		policy   spreader.Policy
		wantNext string // offers of the next range
	}{
		// d has nothing in flight; a and c one each, in rotation order from
		// the slot after c's.
		{spreader.LeastInFlight, "d1 a2 c2"},
		{spreader.RoundRobin, "a2 d1 c2"},
	}
	for _, tt := range tests {
		t.Run(tt.policy.String(), func(t *testing.T) {
			t.Parallel()
			s := setup(t, spreader.Config{Feeders: 3, Policy: tt.policy})
			addGroup(t, s, "a", 3, false)
			addGroup(t, s, "b", 1, true) // leaves on Take, and d takes its slot
			addGroup(t, s, "c", 3, false)
			addGroup(t, s, "d", 3, false)
			var got []string
			for g, job := range s.Offers() {
				taken, ok := s.Take(g)
				got = append(got, fmt.Sprint(job, "=", taken, ok))
			}
			if want := "a1=a1true b1=b1true c1=c1true"; strings.Join(got, " ") != want {
				t.Fatalf("offers and takes = %v, want %v", got, want)
			}
			if got := offers(s); got != tt.wantNext {
				t.Fatalf("next Offers = %q, want %q", got, tt.wantNext)
			}
		})
	}
}

func TestMaxInFlightPerGroup(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		cap    int
		policy spreader.Policy
		want   string // Next until nothing is ready, without Done
	}{
		{"no cap", 0, spreader.RoundRobin, "a1 b1 a2 b2 a3 b3"},
		{"cap 1", 1, spreader.RoundRobin, "a1 b1"},
		{"cap 2", 2, spreader.RoundRobin, "a1 b1 a2 b2"},
		{"cap 2 least in flight", 2, spreader.LeastInFlight, "a1 b1 a2 b2"},
		{"cap above group size", 5, spreader.LeastInFlight, "a1 b1 a2 b2 a3 b3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := setup(t, spreader.Config{Feeders: 2, Policy: tt.policy, MaxInFlightPerGroup: tt.cap})
			addGroup(t, s, "a", 3, true)
			addGroup(t, s, "b", 3, true)
			if got := releaseAll(s, false); got != tt.want {
				t.Fatalf("released %q, want %q", got, tt.want)
			}
			if tt.cap != 1 {
				return
			}
			// At the cap: not offered and not takeable, until a job is done.
			if got := offers(s); got != "" {
				t.Fatalf("Offers at the cap = %q", got)
			}
			if _, ok := s.Take("a"); ok {
				t.Fatal("Take succeeded at the cap")
			}
			s.Done("b")
			if got := releaseAll(s, false); got != "b2" {
				t.Fatalf("after Done(b) released %q, want b2", got)
			}
		})
	}
}

func TestSetFeeders(t *testing.T) {
	t.Parallel()
	s := setup(t, spreader.Config{Feeders: 1, Policy: spreader.RoundRobin})
	for _, g := range []string{"a", "b", "c", "d"} {
		addGroup(t, s, g, 2, true)
	}
	s.SetFeeders(3) // b and c move in at once
	if s.Active() != 3 || s.Waiting() != 1 {
		t.Fatalf("after growing: Active, Waiting = %d, %d; want 3, 1", s.Active(), s.Waiting())
	}
	if got := offers(s); got != "a1 b1 c1" {
		t.Fatalf("Offers = %q", got)
	}
	s.SetFeeders(0) // counts as 1; no group is evicted
	if s.Feeders() != 1 || s.Active() != 3 {
		t.Fatalf("after shrinking: Feeders, Active = %d, %d; want 1, 3", s.Feeders(), s.Active())
	}
	// b and c finish in their closing slots and are not replaced; d waits for
	// slot 0, which a holds until it finishes.
	if got := releaseAll(s, true); got != "a1 b1 c1 a2 b2 c2 d1 d2" {
		t.Fatalf("released %q", got)
	}
	s.SetFeeders(2)
	addGroup(t, s, "e", 1, true)
	addGroup(t, s, "f", 1, true)
	addGroup(t, s, "g", 1, true)
	if s.Active() != 2 || s.Waiting() != 1 {
		t.Fatalf("after regrowing: Active, Waiting = %d, %d; want 2, 1", s.Active(), s.Waiting())
	}
}

// TestLineCompaction cancels most of a long line: the line must skip and then
// drop the canceled groups, and keep the rest in order.
func TestLineCompaction(t *testing.T) {
	t.Parallel()
	s := setup(t, spreader.Config{Feeders: 1})
	addGroup(t, s, "head", 1, true)
	var keep []string
	for i := range 1000 {
		g := fmt.Sprint("g", i)
		addGroup(t, s, g, 1, true)
		if i%10 == 0 {
			keep = append(keep, g+"1")
		} else {
			s.Cancel(g)
		}
	}
	if s.Waiting() != 100 {
		t.Fatalf("Waiting = %d, want 100", s.Waiting())
	}
	want := "head1 " + strings.Join(keep, " ")
	if got := releaseAll(s, true); got != want {
		t.Fatalf("released %q\nwant %q", got, want)
	}
}

// TestSchedulerMatchesSpread is the equivalence property. With every group
// complete on arrival and every job done at once, Next reproduces Spread's
// order, under either policy, since nothing stays in flight to break ties.
func TestSchedulerMatchesSpread(t *testing.T) {
	t.Parallel()
	for seed := range uint64(1000) {
		rng := rand.New(rand.NewPCG(seed, 5))
		groups := make([][]string, rng.IntN(30))
		for i := range groups {
			for j := range rng.IntN(6) {
				groups[i] = append(groups[i], fmt.Sprintf("%d.%d", i, j))
			}
		}
		feeders := 1 + rng.IntN(80) // beyond 64: several bitset words
		want := strings.Join(slices.Collect(spreader.Spread(seqsOf(groups), feeders)), " ")
		for _, policy := range []spreader.Policy{spreader.RoundRobin, spreader.LeastInFlight} {
			s := setup(t, spreader.Config{Feeders: feeders, Policy: policy})
			for i, jobs := range groups {
				g := fmt.Sprint(i)
				must(t, s.AddGroup(g))
				must(t, s.Push(g, jobs...))
				must(t, s.Seal(g))
			}
			if got := releaseAll(s, true); got != want {
				t.Fatalf("seed %d, %d feeders, %v: Next order\n got %q\nwant %q (Spread)", seed, feeders, policy, got, want)
			}
		}
	}
}

func seqsOf(groups [][]string) iter.Seq[iter.Seq[string]] { return seqs(groups...) }

func TestDrop(t *testing.T) {
	t.Parallel()
	s := setup(t, spreader.Config{Feeders: 1, Policy: spreader.RoundRobin})
	addGroup(t, s, "a", 2, true)
	addGroup(t, s, "b", 1, true)
	if _, ok := s.Drop("b"); ok {
		t.Fatal("dropped from a group that holds no slot")
	}
	if j, ok := s.Drop("a"); !ok || j != "a1" {
		t.Fatalf("Drop = %q, %v; want a1", j, ok)
	}
	if s.InFlight("a") != 0 {
		t.Fatalf("a dropped job counts in flight: %d", s.InFlight("a"))
	}
	if _, j, _ := s.Next(); j != "a2" {
		t.Fatalf("after the drop Next = %q, want a2", j)
	}
	// a is sealed and drained: its slot goes to b.
	if _, j, _ := s.Next(); j != "b1" {
		t.Fatalf("Next = %q, want b1", j)
	}
}

func TestBeginCountsOutsideJobs(t *testing.T) {
	t.Parallel()
	s := setup(t, spreader.Config{Feeders: 2, Policy: spreader.LeastInFlight, MaxInFlightPerGroup: 2})
	addGroup(t, s, "a", 3, false)
	addGroup(t, s, "b", 3, false)
	if !s.Begin("a") || s.InFlight("a") != 1 {
		t.Fatalf("Begin did not count: in flight %d", s.InFlight("a"))
	}
	// a has one in flight (a retry, say): least in flight offers b first.
	if g, _, _ := s.Next(); g != "b" {
		t.Fatalf("Next gave %q, want b", g)
	}
	s.Begin("a")
	if !s.Capped("a") {
		t.Fatal("a at the cap is not reported capped")
	}
	for g := range s.Offers() {
		if g == "a" {
			t.Fatal("a capped group is offered")
		}
	}
	s.Done("a")
	s.Done("a")
	if s.InFlight("a") != 0 || s.Capped("a") {
		t.Fatalf("after Done: in flight %d", s.InFlight("a"))
	}
	if s.Begin("unknown") {
		t.Fatal("Begin counted an unknown group")
	}
}

func TestRemove(t *testing.T) {
	t.Parallel()
	s := setup(t, spreader.Config{Feeders: 1, Policy: spreader.RoundRobin})
	addGroup(t, s, "a", 3, true)
	addGroup(t, s, "b", 1, true)
	eq := func(x, y string) bool { return x == y }
	if !s.Remove("a", "a2", eq) || s.Remove("a", "a2", eq) || s.Remove("zz", "a1", eq) {
		t.Fatal("Remove reported wrongly")
	}
	var got []string
	for {
		_, j, ok := s.Next()
		if !ok {
			break
		}
		got = append(got, j)
	}
	if fmt.Sprint(got) != "[a1 a3 b1]" {
		t.Fatalf("after removing a2: %v", got)
	}
	// Removing the last queued job of a sealed active group frees its slot.
	s2 := setup(t, spreader.Config{Feeders: 1, Policy: spreader.RoundRobin})
	addGroup(t, s2, "a", 1, true)
	addGroup(t, s2, "b", 1, true)
	s2.Remove("a", "a1", eq)
	if _, j, _ := s2.Next(); j != "b1" {
		t.Fatalf("Next after emptying a = %q, want b1", j)
	}
}

// Upcoming lists a group's queued jobs in release order without releasing them.
func TestUpcoming(t *testing.T) {
	t.Parallel()
	s, err := spreader.NewScheduler[string, int](spreader.Config{Feeders: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Upcoming(nil, "nope", 3); len(got) != 0 {
		t.Fatalf("Upcoming of an unknown group = %v", got)
	}
	_ = s.AddGroup("a")
	_ = s.Push("a", 1, 2, 3, 4)
	if _, job, ok := s.Next(); !ok || job != 1 {
		t.Fatalf("Next = %d, %v", job, ok)
	}
	if got := s.Upcoming([]int{9}, "a", 2); fmt.Sprint(got) != "[9 2 3]" {
		t.Fatalf("Upcoming(a, 2) = %v, want [9 2 3]", got)
	}
	if got := s.Upcoming(nil, "a", 10); fmt.Sprint(got) != "[2 3 4]" || s.Queued("a") != 3 {
		t.Fatalf("Upcoming(a, 10) = %v with %d queued, want [2 3 4] and 3", got, s.Queued("a"))
	}
}

// TestVacantAndEntered: HasVacant follows the slots a group takes and leaves, and Entered tells
// a group with a slot or a place in the line from an idle, draining or unknown one.
func TestVacantAndEntered(t *testing.T) {
	t.Parallel()
	s := setup(t, spreader.Config{Feeders: 1})
	if !s.HasVacant() {
		t.Fatal("an empty scheduler has no vacant slot")
	}
	must(t, s.AddGroup("a"))
	if s.Entered("a") || s.Entered("unknown") {
		t.Fatal("an idle or unknown group counts as entered")
	}
	addGroup(t, s, "b", 1, false)
	if s.HasVacant() || !s.Entered("b") {
		t.Fatalf("b took the only slot: vacant %v, entered %v", s.HasVacant(), s.Entered("b"))
	}
	must(t, s.Push("a", "a1"))
	if !s.Entered("a") {
		t.Fatal("a group waiting in the line does not count as entered")
	}
	if _, _, ok := s.Next(); !ok { // b's job: b leaves its slot idle, a takes it
		t.Fatal("nothing released")
	}
	if s.Entered("b") || !s.Entered("a") || s.HasVacant() {
		t.Fatalf("after b emptied: b entered %v, a entered %v, vacant %v", s.Entered("b"), s.Entered("a"), s.HasVacant())
	}
	must(t, s.Seal("a"))
	if g, _, ok := s.Next(); !ok || g != "a" {
		t.Fatal("a's job not released")
	}
	if s.Entered("a") || !s.HasVacant() {
		t.Fatalf("a draining: entered %v, vacant %v", s.Entered("a"), s.HasVacant())
	}
}
