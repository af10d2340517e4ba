package jobindex

import (
	"bytes"
	"strconv"
	"sync"
	"testing"
)

// TestConcurrentReaders runs status readers, selectors and snapshotters against a writer that
// adds, moves and forgets jobs. Run with -race. Readers check what a single call guarantees:
// every answer is a consistent snapshot.
func TestConcurrentReaders(t *testing.T) {
	t.Parallel()
	x := New()
	groups, perGroup := 20, 100
	if raceEnabled || testing.Short() {
		groups = 8
	}
	done := make(chan struct{}) // closed by the writer when it has finished
	var wg sync.WaitGroup
	errs := make(chan error, 16)

	wg.Add(1)
	go func() { // the writer: owns every mutation
		defer wg.Done()
		defer close(done)
		id := uint64(0)
		for g := range groups {
			name := "g" + strconv.Itoa(g)
			res := []string{"r" + strconv.Itoa(g%3)}
			first := id + 1
			for range perGroup {
				id++
				if err := x.Add(id, name, res, nil); err != nil {
					errs <- err
					return
				}
			}
			for j := first; j <= id; j++ {
				for _, to := range []State{Running, Done} {
					if _, err := x.Move(j, to); err != nil {
						errs <- err
						return
					}
				}
			}
			if g%2 == 1 {
				if _, err := x.Forget(name); err != nil {
					errs <- err
					return
				}
			}
		}
	}()

	w := x.Compile([]string{"r0", "r1"})
	reader := func(read func() error) {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			if err := read(); err != nil {
				errs <- err
				return
			}
		}
	}
	wg.Add(5)
	go reader(func() error {
		c := x.Counts()
		if c.Total() < c.Done {
			t.Error("impossible counts")
		}
		x.State(uint64(c.Total()))
		x.Count(Pending)
		return nil
	})
	go reader(func() error {
		for g, c := range x.Groups() {
			if c.Total() == 0 {
				t.Errorf("group %s listed with no jobs", g)
			}
			x.GroupCounts(g)
			for range x.GroupJobs(g, Pending) {
			}
		}
		for r := range x.Resources() {
			x.ResourceCounts(r)
		}
		return nil
	})
	go reader(func() error {
		if id, _, ok := x.SelectAny(w); ok {
			x.Select(w, []uint64{id, id + 1, id + 2})
		}
		return nil
	})
	go reader(func() error { // a fresh set per call: compiles concurrently with the others
		x.SelectAny(NewResourceSet("r2"))
		return nil
	})
	go reader(func() error {
		b, err := x.MarshalBinary()
		if err != nil {
			return err
		}
		y, err := Restore(bytes.NewReader(b))
		if err != nil {
			return err
		}
		return y.checkInvariants()
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := x.checkInvariants(); err != nil {
		t.Fatal(err)
	}
	if c := x.Counts(); c.Done != uint64(groups/2*perGroup) || c.Total() != c.Done {
		t.Fatalf("final counts %+v", c)
	}
}
