package spreader

import "iter"

// readySet is the set of slots whose group has a job to offer, indexed by rank.
// The policy gives a group its rank, and lower ranks are offered first:
// RoundRobin ranks every group 0, and LeastInFlight ranks a group by its jobs in
// flight. Within one rank, slots are offered in cyclic order from the rotation
// point.
//
// Each rank in use has its own bitset of slots. Finding the best slot costs a
// search of one bitset, O(slots/4096), plus an amortised O(1) step to find the
// lowest rank in use. A rank changes by one at a time, and only a Done can lower
// the lowest rank in use, by at most one. A rank that empties hands its bitset
// to the next rank that needs one rather than keeping it. Bitset memory is
// therefore bounded by the number of distinct ranks in use at once. Only a
// small header per rank up to the highest rank in use is kept.
type readySet struct {
	ranks []bitset // ranks[r] holds the ready slots of rank r; zero when none
	sizes []int    // sizes[r] is the number of slots in ranks[r]
	low   int      // no rank below low has slots
	n     int      // slots in the set
	spare []bitset // emptied bitsets, all zero, for reuse
}

func (x *readySet) add(slot, rank int) {
	for rank >= len(x.ranks) {
		x.ranks = append(x.ranks, bitset{})
		x.sizes = append(x.sizes, 0)
	}
	if k := len(x.spare); x.sizes[rank] == 0 && k > 0 {
		x.ranks[rank], x.spare = x.spare[k-1], x.spare[:k-1]
	}
	x.ranks[rank].add(slot)
	x.sizes[rank]++
	x.n++
	x.low = min(x.low, rank)
}

func (x *readySet) remove(slot, rank int) {
	x.ranks[rank].remove(slot)
	x.n--
	if x.sizes[rank]--; x.sizes[rank] == 0 {
		x.spare = append(x.spare, x.ranks[rank])
		x.ranks[rank] = bitset{}
		// Drop the empty ranks at the top, so a pass over the ranks (ordered) stops at the
		// highest in use, not at the highest ever seen (one group given every slot at the start).
		n := len(x.ranks)
		for n > 0 && x.sizes[n-1] == 0 {
			n--
		}
		x.ranks, x.sizes = x.ranks[:n], x.sizes[:n]
	}
}

// first returns the slot to offer first: the lowest rank, and within it the
// first slot in cyclic order from from. It returns -1 if the set is empty.
func (x *readySet) first(from int) int {
	if x.n == 0 {
		return -1
	}
	for x.sizes[x.low] == 0 {
		x.low++
	}
	return x.ranks[x.low].nextFrom(from)
}

// next returns the first slot of rank r at or after i, or -1; the ranks above
// the highest in use are gone (see remove).
func (x *readySet) next(r, i int) int {
	if r >= len(x.ranks) {
		return -1
	}
	return x.ranks[r].next(i)
}

// ordered yields every slot in offer order from the rotation point from. It
// reads the set as it goes, so the caller may change the set between slots.
// Changes to a rank the loop has passed, or to slots earlier in the current
// rank's cycle, are not seen, and a slot whose rank rises during the loop can
// come round again. Callers that care filter those repeats out.
func (x *readySet) ordered(from int) iter.Seq[int] {
	return func(yield func(int) bool) {
		for r := x.low; r < len(x.ranks); r++ {
			if x.sizes[r] == 0 {
				continue
			}
			// The cycle runs from from to the end, then from 0 up to from.
			for i := from; ; {
				slot := x.next(r, i)
				if slot < 0 {
					break
				}
				if !yield(slot) {
					return
				}
				i = slot + 1
			}
			for i := 0; ; {
				slot := x.next(r, i)
				if slot < 0 || slot >= from {
					break
				}
				if !yield(slot) {
					return
				}
				i = slot + 1
			}
		}
	}
}
