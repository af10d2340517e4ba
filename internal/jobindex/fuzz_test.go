package jobindex

import (
	"bytes"
	"errors"
	"hash/crc32"
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
	// Add, release, finish and forget one job; then snapshot.
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

// FuzzRestore feeds arbitrary bytes to Restore, both as given and with a valid checksum
// appended so the decoder itself is exercised. Restore must return an error wrapping
// ErrCorruptSnapshot or an index whose invariants hold; it must never panic.
func FuzzRestore(f *testing.F) {
	snap := mustSnapshot(f, fuzzSeedIndex(f))
	body := snap[:len(snap)-crc32.Size]
	f.Add(snap)
	f.Add(body) // sealed by the fuzz function: a valid snapshot
	small, err := indexOf(f, testJob{id: 1, require: []string{"gpu"}}, testJob{id: 2, prefer: []string{"ssd"}, state: Done}).MarshalBinary()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(small[:len(small)-crc32.Size])
	for _, n := range []int{0, 4, 5, 6, 9, len(body) / 3, len(body) / 2, len(body) - 1} {
		f.Add(body[:n])
	}
	for _, i := range []int{5, 6, 7, len(body) / 4, len(body) / 2, len(body) - 2} {
		flipped := bytes.Clone(body)
		flipped[i] ^= 0x04
		f.Add(flipped)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, in := range [][]byte{data, seal(data)} {
			y, err := Restore(bytes.NewReader(in))
			if err != nil {
				if !errors.Is(err, ErrCorruptSnapshot) {
					t.Fatalf("error %v does not wrap ErrCorruptSnapshot", err)
				}
				continue
			}
			if y.Len() > 1<<16 {
				continue // valid, but too large to check job by job here
			}
			if err := y.checkInvariants(); err != nil {
				t.Fatalf("restored index broken: %v", err)
			}
			again, err := y.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			if z, err := Restore(bytes.NewReader(again)); err != nil || z.Len() != y.Len() {
				t.Fatalf("re-snapshot does not restore: %v", err)
			}
		}
	})
}

// fuzzSeedIndex builds a small index touching every snapshot feature: several groups,
// profiles with required and preferred resources, all states, IDs across block and bucket
// boundaries, a freed group slot.
func fuzzSeedIndex(t testing.TB) *Index {
	x := New()
	add := func(id uint64, group string, require, prefer []string, st State) {
		if err := x.AddState(id, group, require, prefer, st); err != nil {
			t.Fatal(err)
		}
	}
	for id := uint64(1); id <= 12; id++ {
		add(id, "a", nil, []string{"gpu"}, State(id%numStates))
	}
	for id := uint64(1<<blockBits - 3); id <= 1<<blockBits+3; id++ {
		add(id, "b", []string{"ssd"}, []string{"gpu", "x"}, Pending)
	}
	add(1<<32+5, "c", nil, nil, Running)
	add(1<<32+9, "d", nil, nil, Done)
	if _, err := x.Forget("d"); err != nil {
		t.Fatal(err)
	}
	add(1<<32+10, "e", []string{"tpu"}, nil, Failed)
	return x
}
