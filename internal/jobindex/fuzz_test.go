package jobindex

import (
	"math/rand/v2"
	"testing"
)

// FuzzTransitions decodes the input as a sequence of operations (see opRunner) and checks the
// index against the naive model. It must never panic or diverge.
func FuzzTransitions(f *testing.F) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 8 {
		seed := make([]byte, 200)
		for i := range seed {
			seed[i] = byte(rng.Uint32())
		}
		f.Add(seed)
	}
	// Add, release, finish and forget one job; then compile a resource set and select.
	f.Add([]byte{0, 1, 0, 1, 0, 3, 0, 0, 3, 0, 0, 3, 0, 0, 6, 0, 9, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 1024 {
			return // long inputs add time, not coverage
		}
		// Every result is checked as it happens; the whole index every few operations.
		if err := newOpRunner(data).run(8); err != nil {
			t.Fatal(err)
		}
	})
}
