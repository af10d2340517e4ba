package jobindex

import (
	"encoding/binary"
	"hash/crc32"
	"io"
)

// Snapshot format, version 1. All integers are unsigned varints unless noted. Dictionaries are
// renumbered densely, in ID order, so the format does not depend on freed slots.
//
//	magic        "WVJX"
//	version      1 byte (1)
//	resources    count, then per resource: name length, name bytes
//	profiles     count (excluding the implicit empty profile 0), then per profile:
//	             required count, resource indexes ascending, preferred count, resource indexes
//	groups       count, then per group: name length, name bytes
//	states       per state in State order: length, bitmap in the portable 64-bit roaring format
//	catalog      count, then per span in ascending ID order: gap from the previous span's end
//	             (from 0 for the first), length-1, group index, profile index
//	checksum     CRC-32C of everything above, 4 bytes little-endian
//
// Counters and the per-profile pending bitmaps are not stored: Restore derives them, which
// also proves the stored parts consistent.
const (
	snapshotMagic   = "WVJX"
	snapshotVersion = 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// MarshalBinary returns a snapshot of the index (see [Restore]). It holds the read lock while
// it encodes, so writers wait for it but readers do not.
func (x *Index) MarshalBinary() ([]byte, error) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.appendSnapshot(nil)
}

// WriteTo writes a snapshot of the index to w. The snapshot is encoded in memory first, so
// the read lock is not held while w blocks.
func (x *Index) WriteTo(w io.Writer) (int64, error) {
	b, err := x.MarshalBinary()
	if err != nil {
		return 0, err
	}
	n, err := w.Write(b)
	return int64(n), err
}

func (x *Index) appendSnapshot(b []byte) ([]byte, error) {
	b = append(b, snapshotMagic...)
	b = append(b, snapshotVersion)

	rmap, n := denseResources(x.resources)
	b = binary.AppendUvarint(b, uint64(n))
	for _, r := range x.resources {
		if r.name != "" {
			b = appendString(b, r.name)
		}
	}

	pmap := make([]uint64, len(x.profiles))
	live := uint64(0)
	for pid := 1; pid < len(x.profiles); pid++ {
		if x.profiles[pid].key != "" {
			live++
			pmap[pid] = live
		}
	}
	b = binary.AppendUvarint(b, live)
	for pid := 1; pid < len(x.profiles); pid++ {
		if p := &x.profiles[pid]; p.key != "" {
			for _, list := range [2][]uint32{p.require, p.prefer} {
				b = binary.AppendUvarint(b, uint64(len(list)))
				for _, rid := range list {
					b = binary.AppendUvarint(b, rmap[rid])
				}
			}
		}
	}

	gmap := make([]uint64, len(x.groups))
	b = binary.AppendUvarint(b, uint64(len(x.groupIDs)))
	next := uint64(0)
	for gid, g := range x.groups {
		if g.name != "" {
			gmap[gid] = next
			next++
			b = appendString(b, g.name)
		}
	}

	var scratch []byte
	for _, bm := range x.states {
		// In memory the index avoids run containers (see Restore); at rest they shrink long
		// stretches of done jobs to a few bytes, for the price of a copy.
		c := bm.Clone()
		c.RunOptimize()
		raw, err := appendBitmap(scratch[:0], c)
		if err != nil {
			return nil, err
		}
		b = binary.AppendUvarint(b, uint64(len(raw)))
		b = append(b, raw...)
		scratch = raw
	}

	b = appendSpans(b, &x.catalog, gmap, pmap)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli)), nil
}

func denseResources(rs []resource) (rmap []uint64, n int) {
	rmap = make([]uint64, len(rs))
	for rid, r := range rs {
		if r.name != "" {
			rmap[rid] = uint64(n)
			n++
		}
	}
	return rmap, n
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// sliceWriter lets a roaring bitmap write itself straight onto a byte slice.
type sliceWriter struct{ b []byte }

func (w *sliceWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

type portableBitmap interface {
	WritePortableTo(io.Writer) (int64, error)
}

func appendBitmap(b []byte, bm portableBitmap) ([]byte, error) {
	w := sliceWriter{b}
	_, err := bm.WritePortableTo(&w)
	return w.b, err
}

// appendSpans writes the catalog, joining spans that continue across a block boundary.
func appendSpans(b []byte, c *catalog, gmap, pmap []uint64) []byte {
	var body []byte
	var n, end uint64 // end: one past the previous span written
	var cur struct {
		lo, hi         uint64
		group, profile uint32
		ok             bool
	}
	flush := func() {
		if !cur.ok {
			return
		}
		body = binary.AppendUvarint(body, cur.lo-end)
		body = binary.AppendUvarint(body, cur.hi-cur.lo)
		body = binary.AppendUvarint(body, gmap[cur.group])
		body = binary.AppendUvarint(body, pmap[cur.profile])
		end = cur.hi + 1
		n++
	}
	c.each(func(lo, hi uint64, group, profile uint32) bool {
		if cur.ok && lo == cur.hi+1 && group == cur.group && profile == cur.profile {
			cur.hi = hi
			return true
		}
		flush()
		cur.lo, cur.hi, cur.group, cur.profile, cur.ok = lo, hi, group, profile, true
		return true
	})
	flush()
	b = binary.AppendUvarint(b, n)
	return append(b, body...)
}
