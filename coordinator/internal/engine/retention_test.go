package engine

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/weavejobs/weave/internal/wire"
)

// TestRetainedLookups checks the retained groups' index, and the search for a finished job's
// group, against a scan of every retained group, over chunk boundaries, IDs with many
// incarnations, and expiry down to none and back.
func TestRetainedLookups(t *testing.T) {
	te := newTestEngine(t, Config{ResultRetention: time.Hour})
	rt := &te.e.retention
	type kept struct {
		id      string
		openSeq uint64
	}
	var all []kept // what is retained, oldest first
	seq := uint64(0)
	add := func(n int) {
		for range n {
			seq++
			id := fmt.Sprint("g", seq%7) // seven IDs, each with many incarnations
			if seq%5 == 0 {
				id = fmt.Sprint("s", seq) // and IDs with one
			}
			te.e.retain(id, seq, seq, false, seq, te.now.Add(time.Duration(seq)*time.Second), wire.GroupSummary{Jobs: 1, Done: 1}, true)
			all = append(all, kept{id, seq})
		}
	}
	check := func(when string) {
		t.Helper()
		if rt.retained.len() != len(all) {
			t.Fatalf("%s: %d retained, want %d", when, rt.retained.len(), len(all))
		}
		ids := map[string]bool{"g0": true, "g3": true, "never": true}
		for _, k := range all[max(0, len(all)-3):] {
			ids[k.id] = true
		}
		if len(all) > 0 {
			ids[all[0].id] = true
		}
		for id := range ids {
			var want, got []uint64
			for _, k := range slices.Backward(all) {
				if k.id == id {
					want = append(want, k.openSeq)
				}
			}
			for r := range rt.ofID(id) {
				got = append(got, r.openSeq)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("%s: incarnations of %s %v, want %v", when, id, got, want)
			}
		}
		// Each group here is one job, its incarnation: inspecting it finds that group alone.
		jobs := []uint64{seq + 1} // never stored
		if len(all) > 0 {
			jobs = append(jobs, all[0].openSeq, all[len(all)/2].openSeq, all[len(all)-1].openSeq)
		}
		for _, job := range jobs {
			var want []uint64
			for _, k := range all {
				if k.openSeq == job {
					want = append(want, job)
				}
			}
			var got []uint64
			for _, c := range te.e.Inspect(wire.InspectRequest{Job: job}).Candidates {
				got = append(got, c.Incarnation)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("%s: job %d's candidates %v, want %v", when, job, got, want)
			}
		}
	}
	expireTo := func(n int) { // keep the newest n
		drop := len(all) - n
		te.e.ExpireRetained(te.now.Add(time.Hour + time.Duration(all[drop-1].openSeq)*time.Second))
		all = all[drop:]
	}
	add(3*retainedChunk + 5)
	check("appended over four chunks")
	expireTo(retainedChunk + 3)
	check("expired to part of two chunks")
	add(retainedChunk)
	check("appended again")
	expireTo(0)
	check("all expired")
	if len(rt.latest) != 0 || len(rt.retained.chunks) != 0 {
		t.Fatalf("all expired, yet %d IDs indexed and %d chunks held", len(rt.latest), len(rt.retained.chunks))
	}
	add(10)
	check("retained again")
	if rep := te.e.Inspect(wire.InspectRequest{Group: all[len(all)-1].id}); rep.Group == nil || rep.Group.Incarnation != all[len(all)-1].openSeq {
		t.Fatalf("inspect %s: %+v, want its incarnation %d", all[len(all)-1].id, rep.Group, all[len(all)-1].openSeq)
	}
}

// TestRetainedSummaries: a retained group keeps how it ended, in its compact counts or, past
// them, aside (dropped with it).
func TestRetainedSummaries(t *testing.T) {
	te := newTestEngine(t, Config{ResultRetention: time.Hour})
	rt := &te.e.retention
	sums := map[string]wire.GroupSummary{
		"small":    {Jobs: 3, Done: 1, Failed: 1, Canceled: 1},
		"big":      {Jobs: 1 << 33, Done: 1<<33 - 2, Failed: 2},
		"abandon":  {Jobs: 2, Done: 2, Abandoned: true},
		"boundary": {Jobs: math.MaxUint32, Done: math.MaxUint32},
	}
	seq := uint64(0)
	for _, id := range []string{"small", "big", "abandon", "boundary"} {
		seq++
		te.e.retain(id, seq, seq, false, seq, te.now, sums[id], true)
	}
	for id, want := range sums {
		for r := range rt.ofID(id) {
			if got := rt.summary(r); got != want {
				t.Errorf("%s: summary %+v, want %+v", id, got, want)
			}
		}
	}
	if len(rt.bigSums) != 1 {
		t.Errorf("%d summaries kept aside, want 1 (big)", len(rt.bigSums))
	}
	te.e.ExpireRetained(te.now.Add(time.Hour))
	if rt.retained.len() != 0 || len(rt.bigSums) != 0 {
		t.Errorf("after expiry: %d retained, %d summaries aside", rt.retained.len(), len(rt.bigSums))
	}
}
