package jobindex

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"runtime"
	"testing"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
)

// seal appends the checksum, turning any body into input the decoder will parse.
func seal(body []byte) []byte {
	return binary.LittleEndian.AppendUint32(bytes.Clone(body), crc32.Checksum(body, castagnoli))
}

func TestSnapshotRoundTrip(t *testing.T) {
	t.Parallel()
	w := defaultWorkload(300)
	x := w.build()
	// Exercise freed slots: forget a few finished groups, so dictionaries have holes.
	for _, g := range []string{"group-3", "group-10", "group-11"} {
		if _, err := x.Forget(g); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	n, err := x.WriteTo(&buf)
	if err != nil || n != int64(buf.Len()) {
		t.Fatalf("WriteTo=%d,%v (buffer %d)", n, err, buf.Len())
	}
	y, err := Restore(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if err := y.checkInvariants(); err != nil {
		t.Fatal(err)
	}
	if x.Counts() != y.Counts() {
		t.Fatalf("counts %+v, restored %+v", x.Counts(), y.Counts())
	}
	w.each(func(j *genJob) {
		xs, xok := x.State(j.id)
		ys, yok := y.State(j.id)
		if xs != ys || xok != yok {
			t.Fatalf("job %d: %s,%v restored as %s,%v", j.id, xs, xok, ys, yok)
		}
	})
	for g, c := range x.Groups() {
		if rc, ok := y.GroupCounts(g); !ok || rc != c {
			t.Fatalf("group %s: %+v restored as %+v", g, c, rc)
		}
	}
	for r, c := range x.Resources() {
		if rc := y.ResourceCounts(r); rc != c {
			t.Fatalf("resource %s: %+v restored as %+v", r, c, rc)
		}
	}
	held := x.Compile([]string{"res-1", "res-2", "res-3"})
	for _, idx := range []*Index{x, y} {
		id, m, ok := idx.SelectAny(held)
		t.Logf("SelectAny=%d,%s,%v", id, m, ok)
	}
	xa, xm, _ := x.SelectAny(held)
	ya, ym, _ := y.SelectAny(held)
	if xa != ya || xm != ym {
		t.Fatalf("SelectAny %d,%s restored as %d,%s", xa, xm, ya, ym)
	}
	again, err := y.MarshalBinary()
	if err != nil || !bytes.Equal(again, buf.Bytes()) {
		t.Fatalf("restored index snapshots differently (%v)", err)
	}
}

// TestRestoreCorrupt feeds damaged snapshots; each must fail with ErrCorruptSnapshot.
func TestRestoreCorrupt(t *testing.T) {
	t.Parallel()
	x := indexOf(t, testJob{id: 1, require: []string{"gpu"}}, testJob{id: 2, prefer: []string{"ssd"}, state: Done})
	good, err := x.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	body := good[:len(good)-crc32.Size]
	header := []byte(snapshotMagic + "\x01")
	flipped := bytes.Clone(good)
	flipped[len(flipped)/2] ^= 0x10
	tests := []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"magic only", []byte(snapshotMagic)},
		{"wrong magic", append([]byte("WVJY"), good[4:]...)},
		{"unknown version", seal(append([]byte(snapshotMagic+"\x02"), body[5:]...))},
		{"bit flip", flipped},
		{"truncated", good[:len(good)-1]},
		{"truncated body", seal(body[:len(body)-3])},
		{"trailing bytes", seal(append(bytes.Clone(body), 0))},
		{"huge resource count", seal(binary.AppendUvarint(bytes.Clone(header), 1<<62))},
		{"huge name length", seal(binary.AppendUvarint(append(bytes.Clone(header), 1), 1<<40))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := Restore(bytes.NewReader(tt.data)); !errors.Is(err, ErrCorruptSnapshot) {
				t.Fatalf("Restore err=%v, want ErrCorruptSnapshot", err)
			}
		})
	}
}

// rawSnapshot writes snapshot bodies field by field, to build inconsistent ones.
type rawSnapshot struct {
	resources []string
	profiles  [][2][]uint64 // required, preferred resource indexes
	groups    []string
	states    [numStates][]uint64
	spans     [][4]uint64 // gap, length-1, group, profile
	extra     []byte      // appended to the pending bitmap's bytes
}

func (r rawSnapshot) encode() []byte {
	b := []byte(snapshotMagic + "\x01")
	b = binary.AppendUvarint(b, uint64(len(r.resources)))
	for _, n := range r.resources {
		b = appendString(b, n)
	}
	b = binary.AppendUvarint(b, uint64(len(r.profiles)))
	for _, p := range r.profiles {
		for _, list := range p {
			b = binary.AppendUvarint(b, uint64(len(list)))
			for _, v := range list {
				b = binary.AppendUvarint(b, v)
			}
		}
	}
	b = binary.AppendUvarint(b, uint64(len(r.groups)))
	for _, n := range r.groups {
		b = appendString(b, n)
	}
	for s, ids := range r.states {
		raw, err := roaring64.BitmapOf(ids...).ToBytes()
		if err != nil {
			panic(err)
		}
		if s == int(Pending) {
			raw = append(raw, r.extra...)
		}
		b = binary.AppendUvarint(b, uint64(len(raw)))
		b = append(b, raw...)
	}
	b = binary.AppendUvarint(b, uint64(len(r.spans)))
	for _, sp := range r.spans {
		for _, v := range sp {
			b = binary.AppendUvarint(b, v)
		}
	}
	return seal(b)
}

// TestRestoreInconsistent feeds well-formed snapshots whose parts disagree.
func TestRestoreInconsistent(t *testing.T) {
	t.Parallel()
	one := func(r rawSnapshot) rawSnapshot { // a valid base: job 1 pending in group g
		if r.groups == nil {
			r.groups = []string{"g"}
		}
		if r.spans == nil {
			r.spans = [][4]uint64{{1, 0, 0, 0}}
		}
		if r.states[Pending] == nil && r.states[Done] == nil {
			r.states[Pending] = []uint64{1}
		}
		return r
	}
	if _, err := Restore(bytes.NewReader(one(rawSnapshot{}).encode())); err != nil {
		t.Fatalf("base snapshot: %v", err)
	}
	tests := []struct {
		name string
		snap rawSnapshot
	}{
		{"job outside catalog", one(rawSnapshot{spans: [][4]uint64{{2, 0, 0, 0}}})},
		{"catalog larger than states", one(rawSnapshot{spans: [][4]uint64{{1, 1, 0, 0}}})},
		{"states overlap", one(rawSnapshot{
			states: [numStates][]uint64{Pending: {1}, Done: {1}},
			spans:  [][4]uint64{{1, 1, 0, 0}},
		})},
		{"group without jobs", one(rawSnapshot{groups: []string{"g", "h"}})},
		{"duplicate group", one(rawSnapshot{groups: []string{"g", "g"}})},
		{"empty group name", one(rawSnapshot{groups: []string{""}})},
		{"span names unknown group", one(rawSnapshot{spans: [][4]uint64{{1, 0, 1, 0}}})},
		{"span names unknown profile", one(rawSnapshot{spans: [][4]uint64{{1, 0, 0, 1}}})},
		{"unused resource", one(rawSnapshot{resources: []string{"gpu"}})},
		{"duplicate resource", one(rawSnapshot{resources: []string{"gpu", "gpu"}, profiles: [][2][]uint64{{{0, 1}}}})},
		{"unused profile", one(rawSnapshot{resources: []string{"gpu"}, profiles: [][2][]uint64{{{0}}}})},
		{"empty profile", one(rawSnapshot{profiles: [][2][]uint64{{}}})},
		{"duplicate profile", one(rawSnapshot{
			resources: []string{"gpu"},
			profiles:  [][2][]uint64{{{0}}, {{0}}},
			spans:     [][4]uint64{{1, 0, 0, 1}},
		})},
		{"unknown resource index", one(rawSnapshot{resources: []string{"gpu"}, profiles: [][2][]uint64{{{1}}}})},
		{"unsorted resource indexes", one(rawSnapshot{resources: []string{"a", "b"}, profiles: [][2][]uint64{{{1, 0}}}})},
		{"span beyond MaxID", one(rawSnapshot{spans: [][4]uint64{{1, 0, 0, 0}, {MaxID, 0, 0, 0}}})},
		{"job ID above MaxID", one(rawSnapshot{states: [numStates][]uint64{Pending: {noJob}}})},
		{"bitmap with trailing bytes", one(rawSnapshot{extra: []byte{0}})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := Restore(bytes.NewReader(tt.snap.encode())); !errors.Is(err, ErrCorruptSnapshot) {
				t.Fatalf("Restore err=%v, want ErrCorruptSnapshot", err)
			}
		})
	}
}

func mustSnapshot(t testing.TB, x *Index) []byte {
	t.Helper()
	b, err := x.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRestoreForgedLengthsAllocateLittle checks that lengths declared by the input do not drive
// allocation: a few bytes claiming billions of entries must fail cheaply.
func TestRestoreForgedLengthsAllocateLittle(t *testing.T) {
	header := []byte(snapshotMagic + "\x01")
	forged := [][]byte{
		seal(binary.AppendUvarint(bytes.Clone(header), 1<<62)),                            // resources
		seal(binary.AppendUvarint(append(bytes.Clone(header), 0), 1<<40)),                 // profiles
		seal(binary.AppendUvarint(append(bytes.Clone(header), 0, 0), 1<<40)),              // groups
		seal(binary.AppendUvarint(append(bytes.Clone(header), 0, 0, 0), 1<<40)),           // bitmap length
		seal(append(bytes.Clone(header), 0, 0, 0, 8, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0)), // bitmap buckets
	}
	for i, data := range forged {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := Restore(bytes.NewReader(data))
		runtime.ReadMemStats(&after)
		if !errors.Is(err, ErrCorruptSnapshot) {
			t.Fatalf("forged %d: err=%v", i, err)
		}
		if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
			t.Fatalf("forged %d: %d bytes allocated for %d bytes of input", i, n, len(data))
		}
	}
}
