package feeder_test

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/weavejobs/weave/feeder"
)

func TestQueue(t *testing.T) {
	t.Parallel()
	var q feeder.Queue[int]
	if _, ok := q.Pop(); ok {
		t.Fatal("Pop on the zero Queue reported an item")
	}
	if _, ok := q.Peek(); ok {
		t.Fatal("Peek on the zero Queue reported an item")
	}
	for i := range 20 {
		q.Push(i)
	}
	for want := range 20 {
		if v, ok := q.Peek(); !ok || v != want {
			t.Fatalf("Peek = %d, %v, want %d", v, ok, want)
		}
		if v, ok := q.Pop(); !ok || v != want {
			t.Fatalf("Pop = %d, %v, want %d", v, ok, want)
		}
	}
	if q.Len() != 0 {
		t.Fatalf("Len = %d after draining", q.Len())
	}
}

func TestQueueDeleteFunc(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   []int
		want []int
	}{
		{name: "empty", in: nil, want: nil},
		{name: "none deleted", in: []int{1, 3, 5}, want: []int{1, 3, 5}},
		{name: "all deleted", in: []int{2, 4}, want: nil},
		{name: "keeps order", in: []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, want: []int{1, 3, 5, 7, 9, 11}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var q feeder.Queue[int]
			// Rotate the ring first so the items wrap around the buffer's end.
			for range 5 {
				q.Push(-1)
			}
			for range 5 {
				q.Pop()
			}
			for _, v := range tt.in {
				q.Push(v)
			}
			q.DeleteFunc(func(v int) bool { return v%2 == 0 })
			if got := slices.Collect(q.All()); !slices.Equal(got, tt.want) {
				t.Errorf("after DeleteFunc = %v, want %v", got, tt.want)
			}
			q.Push(100)
			if got := slices.Collect(q.All()); got[len(got)-1] != 100 || len(got) != len(tt.want)+1 {
				t.Errorf("Push after DeleteFunc = %v", got)
			}
		})
	}
}

// TestQueueModel runs random operations on a Queue and on a plain slice and
// requires the same answers.
func TestQueueModel(t *testing.T) {
	t.Parallel()
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 1))
		var q feeder.Queue[int]
		var model []int
		for step := range 500 {
			switch op := rng.IntN(10); {
			case op < 5: // push more than pop so the queue grows and wraps
				v := rng.Int()
				q.Push(v)
				model = append(model, v)
			case op < 9:
				v, ok := q.Pop()
				if ok != (len(model) > 0) || ok && v != model[0] {
					t.Fatalf("seed %d step %d: Pop = %d, %v; model %v", seed, step, v, ok, model)
				}
				if ok {
					model = model[1:]
				}
			default:
				mod := rng.IntN(4) + 2
				q.DeleteFunc(func(v int) bool { return v%mod == 0 })
				model = slices.DeleteFunc(model, func(v int) bool { return v%mod == 0 })
			}
			if q.Len() != len(model) {
				t.Fatalf("seed %d step %d: Len = %d, model %d", seed, step, q.Len(), len(model))
			}
			if v, ok := q.Peek(); ok != (len(model) > 0) || ok && v != model[0] {
				t.Fatalf("seed %d step %d: Peek = %d, %v; model %v", seed, step, v, ok, model)
			}
		}
		if got := slices.Collect(q.All()); !slices.Equal(got, model) {
			t.Fatalf("seed %d: All = %v, model %v", seed, got, model)
		}
	}
}

// TestQueueGivesMemoryBack checks that draining a large queue releases its
// buffer: the allocation made by the next growth shows the buffer's size.
//
// Not parallel: testing.AllocsPerRun refuses to run in a parallel test.
func TestQueueGivesMemoryBack(t *testing.T) {
	var q feeder.Queue[[64]byte]
	for range 1 << 16 {
		q.Push([64]byte{})
	}
	for q.Len() > 0 {
		q.Pop()
	}
	// After draining, the buffer is at its minimum again: filling it to 8 items
	// must not allocate, and the 9th push allocates only a small buffer.
	allocs := testing.AllocsPerRun(10, func() {
		for range 8 {
			q.Push([64]byte{})
		}
		for range 8 {
			q.Pop()
		}
	})
	if allocs != 0 {
		t.Errorf("a drained queue allocated %v times to hold 8 items; its buffer was not shrunk to the minimum", allocs)
	}
}
