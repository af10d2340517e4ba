package jobindex

import (
	"math/rand/v2"
	"slices"
	"testing"
)

type entry struct{ group, profile uint32 }

// TestCatalogModel inserts IDs in random order, removes whole groups, and compares every
// look-up, scan and the span structure with a map.
func TestCatalogModel(t *testing.T) {
	t.Parallel()
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 1))
		var c catalog
		want := map[uint64]entry{}
		// IDs around a block boundary and a 2^32 boundary, dense enough to merge.
		bases := []uint64{0, 1<<blockBits - 100, 1<<32 - 100}
		randomID := func() uint64 { return bases[rng.IntN(len(bases))] + uint64(rng.IntN(200)) }
		for range 2000 {
			if rng.IntN(50) == 0 {
				g := uint32(rng.IntN(3))
				var removed []uint64
				c.removeGroup(g, 0, MaxID, func(lo, hi uint64, p uint32) {
					for id := lo; id <= hi; id++ {
						if e, ok := want[id]; !ok || e != (entry{g, p}) {
							t.Fatalf("seed %d: removed %d as %d/%d, model %v,%v", seed, id, g, p, e, ok)
						}
						removed = append(removed, id)
					}
				})
				for id, e := range want {
					if e.group == g {
						delete(want, id)
						removed = slices.DeleteFunc(removed, func(r uint64) bool { return r == id })
					}
				}
				if len(removed) != 0 {
					t.Fatalf("seed %d: removed IDs not in group: %v", seed, removed)
				}
				continue
			}
			id := randomID()
			if _, ok := want[id]; ok {
				continue
			}
			e := entry{uint32(rng.IntN(3)), uint32(rng.IntN(2))}
			c.insert(id, e.group, e.profile)
			want[id] = e
		}
		checkCatalog(t, &c, want)
	}
}

func checkCatalog(t *testing.T, c *catalog, want map[uint64]entry) {
	t.Helper()
	got := map[uint64]entry{}
	spans := 0
	c.each(func(lo, hi uint64, g, p uint32) bool {
		spans++
		for id := lo; id <= hi; id++ {
			got[id] = entry{g, p}
		}
		return true
	})
	if len(got) != len(want) || spans != c.n {
		t.Fatalf("catalog holds %d IDs in %d spans (n=%d), want %d IDs", len(got), spans, c.n, len(want))
	}
	for id, e := range want {
		g, p, ok := c.lookup(id)
		if !ok || (entry{g, p}) != e || got[id] != e {
			t.Fatalf("lookup(%d)=%d,%d,%v, want %v", id, g, p, ok, e)
		}
		if _, _, ok := c.lookup(id + 1); ok != (func() bool { _, in := want[id+1]; return in })() {
			t.Fatalf("lookup(%d) presence wrong", id+1)
		}
	}
	// Minimal encoding: no two touching spans in a block share group and profile.
	for b := range c.keys {
		ss := c.spans[b]
		for i := 1; i < len(ss); i++ {
			if int(ss[i-1].hi)+1 == int(ss[i].lo) && ss[i-1].group == ss[i].group && ss[i-1].profile == ss[i].profile {
				t.Fatalf("unmerged spans %+v %+v", ss[i-1], ss[i])
			}
		}
	}
}

// TestCatalogScan: ranges inserted in ascending order merge into spans across block
// boundaries, and scan yields one group's spans in order.
func TestCatalogScan(t *testing.T) {
	t.Parallel()
	var c catalog
	want := map[uint64]entry{}
	add := func(lo, hi uint64, g, p uint32) {
		for id := lo; id <= hi; id++ {
			c.insert(id, g, p)
			want[id] = entry{g, p}
		}
	}
	add(5, 10, 0, 0)
	add(11, 1<<blockBits+3, 0, 0) // continues the span and crosses a block boundary
	add(1<<blockBits+4, 1<<blockBits+4, 1, 0)
	add(3<<blockBits-2, 3<<blockBits+1, 1, 1)
	checkCatalog(t, &c, want)
	if got := len(c.keys); got != 4 {
		t.Fatalf("%d blocks, want 4", got)
	}

	var ids []uint64
	c.scan(1, 0, MaxID, func(lo, hi uint64) bool {
		ids = append(ids, lo, hi)
		return true
	})
	if want := []uint64{1<<blockBits + 4, 1<<blockBits + 4, 3<<blockBits - 2, 3<<blockBits - 1, 3 << blockBits, 3<<blockBits + 1}; !slices.Equal(ids, want) {
		t.Fatalf("scan=%v, want %v", ids, want)
	}
}
