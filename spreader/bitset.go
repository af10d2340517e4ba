package spreader

import "math/bits"

// bitset is a set of slot numbers in two levels. Each word holds 64 slots, and
// bit w of summary is set while words[w] is non-zero. Finding the next member
// skips empty words 64 at a time: a search over 100,000 slots reads at most 25
// summary words and two words. The zero value is an empty set.
type bitset struct {
	words   []uint64
	summary []uint64
}

// add puts i in the set, growing the set if needed.
func (b *bitset) add(i int) {
	w := i >> 6
	if w >= len(b.words) {
		b.words = append(b.words, make([]uint64, w+1-len(b.words))...)
		if s := w >> 6; s >= len(b.summary) {
			b.summary = append(b.summary, make([]uint64, s+1-len(b.summary))...)
		}
	}
	b.words[w] |= 1 << (i & 63)
	b.summary[w>>6] |= 1 << (w & 63)
}

// remove takes i out of the set.
func (b *bitset) remove(i int) {
	w := i >> 6
	if w >= len(b.words) {
		return
	}
	if b.words[w] &^= 1 << (i & 63); b.words[w] == 0 {
		b.summary[w>>6] &^= 1 << (w & 63)
	}
}

// next returns the smallest member at or after i, or -1 if there is none.
func (b *bitset) next(i int) int {
	w := i >> 6
	if w >= len(b.words) {
		return -1
	}
	if word := b.words[w] >> (i & 63); word != 0 {
		return i + bits.TrailingZeros64(word)
	}
	if w = nextSet(b.summary, w+1); w < 0 {
		return -1
	}
	return w<<6 + bits.TrailingZeros64(b.words[w])
}

// nextFrom returns the first member in cyclic order from i: the smallest at or
// after i, else the smallest overall, or -1 if the set is empty.
func (b *bitset) nextFrom(i int) int {
	if m := b.next(i); m >= 0 {
		return m
	}
	return b.next(0)
}

// nextSet returns the smallest bit set in words at or after i, or -1.
func nextSet(words []uint64, i int) int {
	w := i >> 6
	if w >= len(words) {
		return -1
	}
	if word := words[w] >> (i & 63); word != 0 {
		return i + bits.TrailingZeros64(word)
	}
	for w++; w < len(words); w++ {
		if words[w] != 0 {
			return w<<6 + bits.TrailingZeros64(words[w])
		}
	}
	return -1
}
