package jobindex

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
)

// Restore reads a snapshot written by [Index.WriteTo] or [Index.MarshalBinary] and returns the
// index it describes.
//
// Damaged, truncated or inconsistent input returns an error wrapping [ErrCorruptSnapshot], and
// Restore never panics on bad input or sizes an allocation by a length the input declares.
// Memory does grow with the number of jobs the snapshot describes, like the index it rebuilds,
// and run-length encoding lets a few bytes describe millions of jobs. The checksum catches
// accidental damage, it is not a signature: restore snapshots from a store you trust.
func Restore(r io.Reader) (*Index, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("jobindex: reading snapshot: %w", err)
	}
	return restore(data)
}

func restore(data []byte) (*Index, error) {
	const header = len(snapshotMagic) + 1
	if len(data) < header+crc32.Size || string(data[:len(snapshotMagic)]) != snapshotMagic {
		return nil, corrupt("not a job index snapshot")
	}
	if v := data[len(snapshotMagic)]; v != snapshotVersion {
		return nil, corrupt("unsupported version %d", v)
	}
	body, sum := data[:len(data)-crc32.Size], data[len(data)-crc32.Size:]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(sum) {
		return nil, corrupt("checksum mismatch")
	}
	d := &decoder{b: body[header:]}
	x, err := decode(d)
	if err != nil {
		return nil, err
	}
	return x, nil
}

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorruptSnapshot, fmt.Sprintf(format, args...))
}

// decoder reads the snapshot body. Every read is bounds-checked; the first failure sticks.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = corrupt(format, args...)
	}
}

func (d *decoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad %s", what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads the length of a list whose items take at least minSize bytes each, and refuses
// lengths the remaining input cannot hold.
func (d *decoder) count(what string, minSize int) int {
	n := d.uvarint(what)
	if d.err == nil && n > uint64(len(d.b)/minSize) {
		d.fail("%s: %d entries in %d bytes", what, n, len(d.b))
		return 0
	}
	return int(n)
}

func (d *decoder) bytes(what string) []byte {
	n := d.uvarint(what)
	if d.err == nil && n > uint64(len(d.b)) {
		d.fail("%s: length %d beyond end", what, n)
	}
	if d.err != nil {
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

// sizeHint caps a declared count before it sizes an allocation. count already bounds it by the
// input length, but a bound is not a promise that the entries follow.
func sizeHint(n int) int { return min(n, 1<<16) }

// name reads a non-empty string that must not be in seen.
func (d *decoder) name(what string, seen map[string]uint32) string {
	s := string(d.bytes(what))
	if d.err != nil {
		return ""
	}
	if s == "" {
		d.fail("empty %s", what)
	}
	if _, dup := seen[s]; dup {
		d.fail("duplicate %s %q", what, s)
	}
	return s
}

// ids reads an ascending list of resource indexes below n.
func (d *decoder) ids(n int) []uint32 {
	k := d.count("resource list", 1)
	if k == 0 {
		return nil
	}
	var ids []uint32
	for range k {
		v := d.uvarint("resource index")
		if d.err != nil {
			return nil
		}
		if v >= uint64(n) || (len(ids) > 0 && v <= uint64(ids[len(ids)-1])) {
			d.fail("bad resource index %d", v)
			return nil
		}
		ids = append(ids, uint32(v))
	}
	return ids
}

// absSpan is a catalog span with absolute IDs, as stored in a snapshot.
type absSpan struct {
	lo, hi         uint64
	group, profile uint32
}

func decode(d *decoder) (*Index, error) {
	x := New()
	n := d.count("resource count", 2)
	x.resourceIDs = make(map[string]uint32, sizeHint(n))
	for range n {
		name := d.name("resource", x.resourceIDs)
		if d.err != nil {
			break
		}
		x.resourceIDs[name] = x.resourcePool.get()
		x.resources = append(x.resources, resource{name: name})
	}
	for range d.count("profile count", 2) {
		req, pref := d.ids(len(x.resources)), d.ids(len(x.resources))
		if d.err != nil {
			break
		}
		key := string(profileKey(nil, req, pref))
		if len(req)+len(pref) == 0 {
			d.fail("empty profile")
		} else if _, dup := x.profileIDs[key]; dup {
			d.fail("duplicate profile")
		} else {
			x.newProfile(key, req, pref)
		}
	}
	n = d.count("group count", 2)
	x.groupIDs = make(map[string]uint32, sizeHint(n))
	x.groups = make([]group, 0, sizeHint(n))
	for range n {
		name := d.name("group", x.groupIDs)
		if d.err != nil {
			break
		}
		x.groupIDs[name] = x.groupPool.get()
		x.groups = append(x.groups, group{name: name, first: noJob})
	}
	for s := range x.states {
		raw := d.bytes("state bitmap")
		if d.err != nil {
			break
		}
		bm, err := readBitmap(raw)
		if err != nil {
			d.fail("%s bitmap: %v", State(s), err)
			break
		}
		x.states[s] = bm
	}
	spans := decodeSpans(d, len(x.groups), len(x.profiles))
	if d.err == nil && len(d.b) > 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return nil, d.err
	}
	if err := x.rebuild(spans); err != nil {
		return nil, err
	}
	return x, nil
}

// readBitmap decodes one portable roaring bitmap that must fill raw exactly.
func readBitmap(raw []byte) (bm *roaring64.Bitmap, err error) {
	// roaring validates what it reads, but it is third-party code parsing hostile bytes: turn
	// a panic into an error rather than take the process down.
	defer func() {
		if r := recover(); r != nil {
			bm, err = nil, fmt.Errorf("malformed: %v", r)
		}
	}()
	bm = roaring64.New()
	n, err := bm.ReadPortableFrom(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	if n != int64(len(raw)) {
		return nil, fmt.Errorf("%d of %d bytes used", n, len(raw))
	}
	if err := bm.Validate(); err != nil {
		return nil, err
	}
	if !bm.IsEmpty() && bm.Maximum() > MaxID {
		return nil, fmt.Errorf("job ID above MaxID")
	}
	return bm, nil
}

func decodeSpans(d *decoder, groups, profiles int) []absSpan {
	n := d.count("span count", 4)
	if d.err != nil {
		return nil
	}
	spans := make([]absSpan, 0, sizeHint(n))
	end := uint64(0) // one past the previous span
	for i := range n {
		gap, length := d.uvarint("span gap"), d.uvarint("span length")
		g, p := d.uvarint("span group"), d.uvarint("span profile")
		if d.err != nil {
			return nil
		}
		// end is at most MaxID+1; after the first span it must leave room for another.
		if (i > 0 && end > MaxID) || gap > MaxID-end || length > MaxID-(end+gap) {
			d.fail("span %d beyond MaxID", i)
			return nil
		}
		if g >= uint64(groups) || p >= uint64(profiles) {
			d.fail("span %d: bad group %d or profile %d", i, g, p)
			return nil
		}
		lo := end + gap
		spans = append(spans, absSpan{lo, lo + length, uint32(g), uint32(p)})
		end = lo + length + 1
	}
	return spans
}

// rebuild checks that the decoded states and spans describe one consistent index and derives
// everything a snapshot leaves out: the catalog, counters, pending bitmaps per profile.
//
// The states must be disjoint and every job in them must lie in a span; since the spans hold
// exactly as many IDs as the states, every span ID then has exactly one state.
func (x *Index) rebuild(spans []absSpan) error {
	var jobs uint64
	for s, bm := range x.states {
		x.counts[s] = bm.GetCardinality()
		jobs += x.counts[s]
	}
	for a := range x.states {
		for b := a + 1; b < len(x.states); b++ {
			if x.states[a].Intersects(x.states[b]) {
				return corrupt("a job is both %s and %s", State(a), State(b))
			}
		}
	}
	var spanned uint64
	for _, sp := range spans {
		spanned += sp.hi - sp.lo + 1 // cannot wrap: spans are disjoint IDs below MaxID
		if spanned > jobs {
			break // do not build a catalog larger than the states justify
		}
	}
	if spanned != jobs {
		return corrupt("catalog holds %d jobs, states %d", spanned, jobs)
	}
	for _, sp := range spans {
		x.catalog.appendRange(sp.lo, sp.hi, sp.group, sp.profile)
		g := &x.groups[sp.group]
		g.first, g.last = min(g.first, sp.lo), max(g.last, sp.hi)
		x.profiles[sp.profile].jobs += sp.hi - sp.lo + 1
	}
	for s, bm := range x.states {
		if err := x.attribute(State(s), bm, spans); err != nil {
			return err
		}
	}
	for gid := range x.groups {
		if x.groups[gid].counts.total() == 0 {
			return corrupt("group %q has no jobs", x.groups[gid].name)
		}
	}
	for pid := 1; pid < len(x.profiles); pid++ {
		if x.profiles[pid].jobs == 0 {
			return corrupt("profile %d has no jobs", pid)
		}
	}
	for rid := range x.resources {
		if r := &x.resources[rid]; len(r.requiredBy)+len(r.preferredBy) == 0 {
			return corrupt("resource %q is unused", r.name)
		}
	}
	return nil
}

// attribute walks the jobs in state s alongside the spans, counting them per group and profile
// and collecting pending jobs per profile. It also replaces the decoded bitmap with a copy
// built by plain adds: snapshots store run containers, which are compact but make roaring's
// Add and Remove cost O(runs) instead of O(1), and every state change adds and removes.
func (x *Index) attribute(s State, bm *roaring64.Bitmap, spans []absSpan) error {
	fresh := roaring64.New()
	buf := make([]uint64, 4096)
	it := bm.ManyIterator()
	j := 0
	var run uint64 // jobs counted in spans[j] and not yet added to its counters
	flush := func() {
		if run > 0 {
			sp := &spans[j]
			x.groups[sp.group].counts[s] += run
			x.profiles[sp.profile].counts[s] += run
			run = 0
		}
	}
	for n := it.NextMany(buf); n > 0; n = it.NextMany(buf) {
		for _, id := range buf[:n] {
			for j < len(spans) && spans[j].hi < id {
				flush()
				j++
			}
			if j == len(spans) || id < spans[j].lo {
				return corrupt("%s job %d is not in the catalog", s, id)
			}
			run++
			if s == Pending {
				x.addPending(spans[j].profile, id)
			}
		}
		fresh.AddMany(buf[:n])
	}
	flush()
	x.states[s] = fresh
	return nil
}
