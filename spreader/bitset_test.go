package spreader

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestBitsetNext(t *testing.T) {
	t.Parallel()
	var b bitset
	for _, i := range []int{3, 63, 64, 200, 70_000} {
		b.add(i)
	}
	tests := []struct{ from, next, nextFrom int }{
		{0, 3, 3},
		{3, 3, 3},
		{4, 63, 63},
		{64, 64, 64},
		{65, 200, 200},
		{201, 70_000, 70_000}, // across summary words
		{70_001, -1, 3},
		{1_000_000, -1, 3},
	}
	for _, tt := range tests {
		if got := b.next(tt.from); got != tt.next {
			t.Errorf("next(%d) = %d, want %d", tt.from, got, tt.next)
		}
		if got := b.nextFrom(tt.from); got != tt.nextFrom {
			t.Errorf("nextFrom(%d) = %d, want %d", tt.from, got, tt.nextFrom)
		}
	}
	b.remove(3)
	b.remove(70_000)
	b.remove(2_000_000) // beyond the end: no effect
	if got := b.nextFrom(201); got != 63 {
		t.Errorf("after removing 3 and 70000, nextFrom(201) = %d, want 63", got)
	}
}

// TestReadySetModel checks the ready set against a map from slot to rank, over
// enough slots to span several words.
func TestReadySetModel(t *testing.T) {
	t.Parallel()
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 4))
		slots := 1 + rng.IntN(300)
		if seed%10 == 0 {
			slots = 1 + rng.IntN(20_000) // several summary words
		}
		var x readySet
		want := map[int]int{} // slot → rank
		for range 400 {
			slot := rng.IntN(slots)
			if rank, ok := want[slot]; ok {
				x.remove(slot, rank)
				delete(want, slot)
			} else {
				rank := rng.IntN(4)
				x.add(slot, rank)
				want[slot] = rank
			}
			top := 0 // ranks kept: up to the highest in use (ordered looks at no more)
			for _, r := range want {
				top = max(top, r+1)
			}
			if len(x.ranks) != top || len(x.sizes) != top {
				t.Fatalf("seed %d: %d ranks kept, want %d", seed, len(x.ranks), top)
			}
			if slots > 1000 && rng.IntN(20) != 0 {
				continue // the model is O(slots): check large sets now and then
			}
			from := rng.IntN(slots + 2)
			order := slices.Collect(x.ordered(from))
			if wantOrder := modelOrder(want, slots, from); !slices.Equal(order, wantOrder) {
				t.Fatalf("seed %d: ordered(%d) = %v, want %v", seed, from, order, wantOrder)
			}
			first := -1
			if len(order) > 0 {
				first = order[0]
			}
			if got := x.first(from); got != first {
				t.Fatalf("seed %d: first(%d) = %d, want %d", seed, from, got, first)
			}
		}
	}
}

// modelOrder sorts the slots by rank, then cyclically from from.
func modelOrder(ranks map[int]int, slots, from int) []int {
	var order []int
	for r := range 4 {
		for d := range slots {
			slot := (from + d) % slots
			if from >= slots {
				slot = d
			}
			if rank, ok := ranks[slot]; ok && rank == r {
				order = append(order, slot)
			}
		}
	}
	return order
}
