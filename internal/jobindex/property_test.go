package jobindex

import (
	"math/rand/v2"
	"testing"
)

// TestPropertyModel runs random operation sequences (add, move, batch move, forget, select,
// compile) against the index and the naive model, and checks that
// states, counts, group and resource counts, group members and selections agree, and that
// every internal invariant holds.
func TestPropertyModel(t *testing.T) {
	t.Parallel()
	runs, length := 1000, 600
	if raceEnabled || testing.Short() {
		runs = 40
	}
	for seed := range uint64(runs) {
		rng := rand.New(rand.NewPCG(seed, 0))
		data := make([]byte, length)
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		// Bias ID bytes towards one region now and then, so jobs pile up in adjacent IDs and
		// spans merge and split.
		if seed%2 == 0 {
			for i := range data {
				if rng.IntN(3) == 0 {
					data[i] &= 0x3f
				}
			}
		}
		if err := newOpRunner(data).run(25); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
}
