package engine

import (
	"cmp"
	"encoding/binary"
	"hash/maphash"
	"iter"
	"slices"
	"strings"
	"time"

	"github.com/weavejobs/weave/internal/wire"
)

// groupRec is an incarnation as the coordinator tracks it from its open until it is forgotten:
// a fixed-size record, with its group ID the only pointer in it. A group whose jobs wait for a
// feeder slot is nothing more (its pending jobs are in the job index alone); what a group needs
// once it has work released (outcomes, jobs in flight, busy share, a scheduler entry) is a
// *group, made from the record when the group takes a slot or ends a job (engine.live), and kept
// until the group is forgotten. While a *group exists it is the group's state: the record's
// other fields are left as they were.
type groupRec struct {
	id       string // the group ID (a copy: a header's text would keep the whole header alive)
	openSeq  uint64 // its incarnation: the open's JOBS sequence (a single job's own)
	lastSeq  uint64 // the sequence of its last message in JOBS
	openedAt int64  // when its open was stored, Unix nanoseconds (0: not known)
	reply    uint32 // its producer's reply token, interned (groupSet.replies); 0 for none
	weight   uint16 // 1–1000
	flags    recFlags
}

// recFlags are a groupRec's booleans.
type recFlags uint16

const (
	recSealed         recFlags = 1 << iota
	recSealedByCancel          // a cancel of the whole group sealed it before its producer did
	recAbandoned               // sealed by the coordinator: its producer went silent
	recRedriven                // a redrive opened it (see group.redriven)
	recComplete                // replay found its summary stored
	recSingle                  // a single job: its one message is its open, job and seal; its job is alone in the index
	recInLine                  // it waits in a line of groupSet.lines for a feeder slot
	recLive                    // it has a *group (groupSet.live), which holds its state
	recDead                    // forgotten: left in its page until the page is compacted
)

// A record's priority (0–wire.MaxPriority) is kept in the top bits of its flags, which keeps the
// record at its size.
const (
	recPriorityShift          = 12
	recPriorityBits  recFlags = 0xf << recPriorityShift
)

// priority is r's group priority (the open's).
func (r *groupRec) priority() int { return int(r.flags&recPriorityBits) >> recPriorityShift }

// setPriority sets r's group priority, p in 0–wire.MaxPriority (wire checks it).
func (r *groupRec) setPriority(p int) {
	r.flags = r.flags&^recPriorityBits | recFlags(min(max(p, 0), 0xf))<<recPriorityShift
}

// recPageSize is how many records a page of the table holds when filled by appends: forgetting
// a record compacts or drops its page alone, so no step copies the whole table.
const recPageSize = 1024

// recPage is a run of records in arrival order.
type recPage struct {
	recs []groupRec
	dead int // records forgotten and not compacted away yet
}

// groupTable holds every tracked incarnation's record in arrival order, which is the order of
// their open sequences: the feed applies JOBS in sequence order, live and at replay. It finds a
// record by open sequence (a binary search over pages, then within one) and the latest
// incarnation of a group ID (ids). A pointer to a record is valid until the next open or forget.
type groupTable struct {
	pages []*recPage
	n     int // live records
	ids   idIndex
	// last is the record latest found last: a group's jobs come one message after another.
	// Dropped when a record is removed or inserted out of order (which moves records), or its
	// ID gets a later incarnation.
	last *groupRec
}

// idIndex maps a group ID to the open sequence of its latest tracked incarnation. It keys a map by
// a hash of the ID, checked against the record's ID, so an entry holds two numbers and no
// pointer, not the ID again; an ID whose hash another ID holds already (a collision, about one in
// 2^64 pairs) goes to a map keyed by the ID.
type idIndex struct {
	seed   maphash.Seed
	byHash map[uint64]uint64
	clash  map[string]uint64
	hashOf func(string) uint64 // a test's, to make collisions; nil: maphash
}

func (x *idIndex) hash(id string) uint64 {
	if x.byHash == nil {
		x.seed, x.byHash = maphash.MakeSeed(), map[uint64]uint64{}
	}
	if x.hashOf != nil {
		return x.hashOf(id)
	}
	return maphash.String(x.seed, id)
}

// get returns the open sequence id maps to; idOf gives a mapped sequence's ID.
func (x *idIndex) get(id string, idOf func(uint64) string) (uint64, bool) {
	if seq, ok := x.byHash[x.hash(id)]; ok && idOf(seq) == id {
		return seq, true
	}
	seq, ok := x.clash[id]
	return seq, ok
}

// set maps id to seq.
func (x *idIndex) set(id string, seq uint64, idOf func(uint64) string) {
	h := x.hash(id)
	if old, ok := x.byHash[h]; ok && idOf(old) != id {
		if x.clash == nil {
			x.clash = map[string]uint64{}
		}
		x.clash[id] = seq
		return
	}
	x.byHash[h] = seq
}

// remove unmaps id if it maps to seq.
func (x *idIndex) remove(id string, seq uint64) {
	h := x.hash(id)
	if x.clash[id] == seq {
		delete(x.clash, id)
		return
	}
	if x.byHash[h] != seq {
		return
	}
	delete(x.byHash, h)
	for other, s := range x.clash { // one with the same hash takes its place
		if x.hash(other) == h {
			x.byHash[h] = s
			delete(x.clash, other)
			return
		}
	}
}

// idOf is the ID of the record opened at seq ("" if none).
func (t *groupTable) idOf(seq uint64) string {
	if r := t.get(seq); r != nil {
		return r.id
	}
	return ""
}

// add appends r, which opens after every record in the table, and makes it its ID's latest
// incarnation.
func (t *groupTable) add(r groupRec) {
	defer t.ids.set(r.id, r.openSeq, t.idOf)
	if t.last != nil && t.last.id == r.id {
		t.last = nil
	}
	t.n++
	if k := len(t.pages); k > 0 {
		p := t.pages[k-1]
		switch {
		case arrivedBefore(r.openSeq, p.recs[len(p.recs)-1].openSeq):
			t.insert(r) // never expected: the feed is in sequence order
			return
		case len(p.recs) < recPageSize:
			p.recs = append(p.recs, r)
			return
		}
	}
	p := &recPage{recs: make([]groupRec, 1, recPageSize)}
	p.recs[0] = r
	t.pages = append(t.pages, p)
}

// insert puts r in its place by open sequence.
func (t *groupTable) insert(r groupRec) {
	t.last = nil
	i := t.pageOf(r.openSeq)
	p := t.pages[max(i, 0)]
	j, _ := slices.BinarySearchFunc(p.recs, r.openSeq, func(x groupRec, seq uint64) int { return cmpSeq(x.openSeq, seq) })
	p.recs = slices.Insert(p.recs, j, r)
}

// cmpSeq orders incarnations by arrival (wire.Arrival).
func cmpSeq(a, b uint64) int { return cmp.Compare(wire.Arrival(a), wire.Arrival(b)) }

// pageOf returns the index of the last page whose first record opened at or before seq, or -1.
func (t *groupTable) pageOf(seq uint64) int {
	i, _ := slices.BinarySearchFunc(t.pages, seq, func(p *recPage, seq uint64) int {
		if !arrivedBefore(seq, p.recs[0].openSeq) {
			return -1
		}
		return 1
	})
	return i - 1
}

// get returns the record of the incarnation opened at seq, or nil if none is tracked.
func (t *groupTable) get(seq uint64) *groupRec {
	i := t.pageOf(seq)
	if i < 0 {
		return nil
	}
	p := t.pages[i]
	j, ok := slices.BinarySearchFunc(p.recs, seq, func(x groupRec, seq uint64) int { return cmpSeq(x.openSeq, seq) })
	if !ok || p.recs[j].flags&recDead != 0 {
		return nil
	}
	return &p.recs[j]
}

// latest returns the record of the latest tracked incarnation of group ID id, or nil.
func (t *groupTable) latest(id string) *groupRec {
	if r := t.last; r != nil && r.id == id {
		return r
	}
	seq, ok := t.ids.get(id, t.idOf)
	if !ok {
		return nil
	}
	t.last = t.get(seq)
	return t.last
}

// setLatest makes r its ID's latest incarnation again: the one after it was forgotten.
func (t *groupTable) setLatest(r *groupRec) {
	t.ids.set(r.id, r.openSeq, t.idOf)
	t.last = nil
}

// remove forgets the incarnation opened at seq.
func (t *groupTable) remove(seq uint64) {
	i := t.pageOf(seq)
	if i < 0 {
		return
	}
	p := t.pages[i]
	j, ok := slices.BinarySearchFunc(p.recs, seq, func(x groupRec, seq uint64) int { return cmpSeq(x.openSeq, seq) })
	if !ok || p.recs[j].flags&recDead != 0 {
		return
	}
	r := &p.recs[j]
	t.ids.remove(r.id, seq)
	t.last = nil
	*r = groupRec{openSeq: seq, flags: recDead}
	t.n--
	p.dead++
	switch {
	case p.dead == len(p.recs):
		t.pages = slices.Delete(t.pages, i, i+1)
	case p.dead > len(p.recs)/2:
		p.recs = slices.DeleteFunc(p.recs, func(r groupRec) bool { return r.flags&recDead != 0 })
		p.dead = 0
	}
}

// all yields every tracked record in arrival order. The body must not add or remove records.
func (t *groupTable) all() iter.Seq[*groupRec] {
	return func(yield func(*groupRec) bool) {
		for _, p := range t.pages {
			for i := range p.recs {
				if r := &p.recs[i]; r.flags&recDead == 0 && !yield(r) {
					return
				}
			}
		}
	}
}

// len is the number of tracked incarnations.
func (t *groupTable) len() int { return t.n }

// idxName is the job index's name for the jobs of the incarnation opened at seq (a single job's
// is alone, with no name): its open sequence, 8 bytes, unique per incarnation.
func idxName(seq uint64) string { return string(binary.BigEndian.AppendUint64(nil, seq)) }

// idxSeq inverts idxName.
func idxSeq(name string) (uint64, bool) {
	if len(name) != 8 {
		return 0, false
	}
	return binary.BigEndian.Uint64([]byte(name)), true
}

// unixNano and fromUnixNano keep a time in a record, the zero time as 0.
func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromUnixNano(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// tokenTable interns the reply tokens of the groups kept as records: one producer's groups
// share its token, so a record holds a small number instead of a string each.
type tokenTable struct {
	ids  map[string]uint32
	toks []string // by ID - 1
	refs []int
	free []uint32
}

// intern returns tok's ID, counting one more holder; 0 for "".
func (t *tokenTable) intern(tok string) uint32 {
	if tok == "" {
		return 0
	}
	if id, ok := t.ids[tok]; ok {
		t.refs[id-1]++
		return id
	}
	if t.ids == nil {
		t.ids = map[string]uint32{}
	}
	var id uint32
	if k := len(t.free); k > 0 {
		id, t.free = t.free[k-1], t.free[:k-1]
	} else {
		t.toks, t.refs = append(t.toks, ""), append(t.refs, 0)
		id = uint32(len(t.toks))
	}
	tok = strings.Clone(tok)
	t.toks[id-1], t.refs[id-1] = tok, 1
	t.ids[tok] = id
	return id
}

// get returns the token of ID id ("" for 0).
func (t *tokenTable) get(id uint32) string {
	if id == 0 {
		return ""
	}
	return t.toks[id-1]
}

// release counts one holder of ID id less, forgetting the token with its last.
func (t *tokenTable) release(id uint32) {
	if id == 0 {
		return
	}
	if t.refs[id-1]--; t.refs[id-1] == 0 {
		delete(t.ids, t.toks[id-1])
		t.toks[id-1] = ""
		t.free = append(t.free, id)
	}
}
