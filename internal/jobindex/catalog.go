package jobindex

import "slices"

// blockBits sets the catalog block size to 2^16 IDs, the size of a roaring container: offsets
// inside a block fit in a uint16 and one block's spans stay short, so an insertion or removal
// never moves more than one block's worth of memory.
const blockBits = 16

const blockMask = 1<<blockBits - 1

// span says that the IDs base+lo..base+hi (inclusive) all belong to group and use profile.
type span struct {
	lo, hi  uint16
	group   uint32
	profile uint32
}

// catalog maps every job ID to its group and profile, run-length encoded.
//
// Job IDs grow as jobs are published (see the package doc), and a group's jobs are published
// together, so consecutive IDs usually share group and profile: a group of 100 jobs is one 12-byte span,
// not 100 entries. Interleaved publishing only splits a group into more spans. The catalog is
// what lets a state change find the job's group and profile (to keep per-group and
// per-profile counters) and lets selection check a candidate's resources in O(log spans).
type catalog struct {
	keys  []uint64 // block keys (ID >> blockBits), ascending
	spans [][]span // spans[i] cover block keys[i]: ascending, disjoint, never empty
	n     int      // number of spans, for stats and the invariant checks
}

// findBlock returns the position of block key, or where it would be inserted.
func (c *catalog) findBlock(key uint64) (int, bool) {
	n := len(c.keys)
	if n > 0 && c.keys[n-1] == key { // the ID frontier: most adds and moves land here
		return n - 1, true
	}
	lo, hi := 0, n
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if c.keys[m] < key {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, lo < n && c.keys[lo] == key
}

// searchSpans returns the index of the last span starting at or before off, or -1.
func searchSpans(ss []span, off uint16) int {
	lo, hi := 0, len(ss)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if ss[m].lo <= off {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo - 1
}

// lookup returns the group and profile of job id.
func (c *catalog) lookup(id uint64) (group, profile uint32, ok bool) {
	b, found := c.findBlock(id >> blockBits)
	if !found {
		return 0, 0, false
	}
	ss := c.spans[b]
	off := uint16(id & blockMask)
	i := searchSpans(ss, off)
	if i < 0 || ss[i].hi < off {
		return 0, 0, false
	}
	return ss[i].group, ss[i].profile, true
}

// insert records job id, which must not be in the catalog yet, merging it into a neighbouring
// span when it extends one.
func (c *catalog) insert(id uint64, group, profile uint32) {
	key, off := id>>blockBits, uint16(id&blockMask)
	b, found := c.findBlock(key)
	if !found {
		if b == len(c.keys) && b > 0 {
			c.trim(b - 1) // the frontier moved on: the old last block rarely grows again
		}
		c.keys = slices.Insert(c.keys, b, key)
		c.spans = slices.Insert(c.spans, b, []span{{off, off, group, profile}})
		c.n++
		return
	}
	ss := c.spans[b]
	var i int // insertion position: ss[i-1].hi < off < ss[i].lo
	if last := len(ss) - 1; ss[last].hi < off {
		i = last + 1 // appending at the frontier
	} else {
		i = searchSpans(ss, off) + 1
	}
	same := func(s span) bool { return s.group == group && s.profile == profile }
	left := i > 0 && int(ss[i-1].hi)+1 == int(off) && same(ss[i-1])
	right := i < len(ss) && int(off)+1 == int(ss[i].lo) && same(ss[i])
	switch {
	case left && right:
		ss[i-1].hi = ss[i].hi
		ss = slices.Delete(ss, i, i+1)
		c.n--
	case left:
		ss[i-1].hi = off
	case right:
		ss[i].lo = off
	default:
		ss = slices.Insert(ss, i, span{off, off, group, profile})
		c.n++
	}
	c.spans[b] = ss
}

// removeGroup deletes every span of group between the IDs first and last, calling fn with the
// absolute ID range and profile of each. Only the spans between first and last are read, and a
// block's spans after last are moved once, so forgetting a small group among many costs its own
// spans, not its blocks'.
func (c *catalog) removeGroup(group uint32, first, last uint64, fn func(lo, hi uint64, profile uint32)) {
	start, _ := c.findBlock(first >> blockBits)
	lastKey := last >> blockBits
	end := start
	for ; end < len(c.keys) && c.keys[end] <= lastKey; end++ {
		base := c.keys[end] << blockBits
		ss := c.spans[end]
		lo, hi := c.within(end, first, last)
		w := lo
		for _, s := range ss[lo:hi] {
			if s.group != group {
				ss[w] = s
				w++
				continue
			}
			fn(base|uint64(s.lo), base|uint64(s.hi), s.profile)
			c.n--
		}
		c.spans[end] = slices.Delete(ss, w, hi)
		c.trim(end)
	}
	w := start
	for r := start; r < end; r++ {
		if len(c.spans[r]) > 0 {
			c.keys[w], c.spans[w] = c.keys[r], c.spans[r]
			w++
		}
	}
	c.keys = slices.Delete(c.keys, w, end)
	c.spans = slices.Delete(c.spans, w, end)
}

// within returns the positions [lo, hi) of block b's spans that may hold IDs from first to last.
func (c *catalog) within(b int, first, last uint64) (lo, hi int) {
	ss := c.spans[b]
	lo, hi = 0, len(ss)
	if c.keys[b] == first>>blockBits {
		lo = max(searchSpans(ss, uint16(first&blockMask)), 0)
	}
	if c.keys[b] == last>>blockBits {
		hi = searchSpans(ss, uint16(last&blockMask)) + 1
	}
	return lo, max(lo, hi)
}

// remove deletes job id, which must be in the catalog, from its span: the span shrinks, splits
// in two, or goes.
func (c *catalog) remove(id uint64) {
	b, _ := c.findBlock(id >> blockBits)
	ss := c.spans[b]
	off := uint16(id & blockMask)
	i := searchSpans(ss, off)
	switch s := ss[i]; {
	case s.lo == s.hi:
		ss = slices.Delete(ss, i, i+1)
		c.n--
	case off == s.lo:
		ss[i].lo++
	case off == s.hi:
		ss[i].hi--
	default:
		ss = slices.Insert(ss, i+1, span{off + 1, s.hi, s.group, s.profile})
		ss[i].hi = off - 1
		c.n++
	}
	if len(ss) == 0 {
		c.keys = slices.Delete(c.keys, b, b+1)
		c.spans = slices.Delete(c.spans, b, b+1)
		return
	}
	c.spans[b] = ss
	c.trim(b)
}

// scan calls fn, in ascending order, for the spans of group that end at or after from and start
// at or before last, until fn returns false. Only the spans in that ID range are read.
func (c *catalog) scan(group uint32, from, last uint64, fn func(lo, hi uint64) bool) {
	b, _ := c.findBlock(from >> blockBits)
	for ; b < len(c.keys) && c.keys[b] <= last>>blockBits; b++ {
		base := c.keys[b] << blockBits
		lo, hi := c.within(b, from, last)
		for _, s := range c.spans[b][lo:hi] {
			lo, hi := base|uint64(s.lo), base|uint64(s.hi)
			if s.group == group && hi >= from && !fn(lo, hi) {
				return
			}
		}
	}
}

// trim gives back the spare capacity of block b's spans once it is mostly unused, so
// appends and removals do not leave the catalog holding up to twice what it needs.
func (c *catalog) trim(b int) {
	if ss := c.spans[b]; len(ss) > 0 && cap(ss) > len(ss)+len(ss)/4+4 {
		c.spans[b] = slices.Clone(ss)
	}
}
