package coordinator

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/weavejobs/weave/internal/directget"
	"github.com/weavejobs/weave/internal/wire"
)

// TestPacksReadOnce: a release that misses the payload cache reads a pack once for the job and
// the jobs of its group it reads ahead, and keeps the rest of the pack; a job its message does not hold is not found, and a
// message that is not a valid job message fails the job rather than the read.
func TestPacksReadOnce(t *testing.T) {
	t.Parallel()
	_, nc, js, ctx := onServer(t, "packs")
	names, _ := wire.NewNames("packs")
	subject := names.JobSubject("g")
	var packSeq, badSeq uint64
	for i, m := range []*nats.Msg{
		{Subject: subject, Header: wire.PackHeader("g", 3, 0), Data: wire.AppendPack(nil, []wire.PackJob{{Payload: []byte("0")}, {Payload: []byte("1")}, {Payload: []byte("2")}})},
		{Subject: subject, Header: wire.PackHeader("g", 2, 0), Data: []byte("not a pack")},
	} {
		ack, err := js.PublishMsg(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			packSeq = ack.Sequence
		} else {
			badSeq = ack.Sequence
		}
	}
	get := directget.New(nc, names.JobsStream())
	t.Cleanup(get.Close)
	p := newPayloads(get, 1<<20)
	a, b, c := wire.PackedJobID(packSeq, 0), wire.PackedJobID(packSeq, 1), wire.PackedJobID(packSeq, 2)
	jobs, errs := p.fetch(ctx, []fetchReq{{id: a, ahead: []uint64{b, c}}})
	if errs[0] != nil || string(jobs[0].Payload) != "0" || jobs[0].ID != a {
		t.Fatalf("fetch of job 0: %+v, %v", jobs[0], errs[0])
	}
	if !p.has(b) || !p.has(c) || p.has(a) {
		t.Fatalf("after the read: cached 0 %v, 1 %v, 2 %v; want the read-ahead only", p.has(a), p.has(b), p.has(c))
	}

	// A pack read for a group's next jobs is kept from the first job wanted on, even past the
	// read-ahead, so a backlog's packs are read once; one read for a job alone keeps nothing else.
	ack, err := js.PublishMsg(ctx, &nats.Msg{Subject: subject, Header: wire.PackHeader("g", 4, 0), Data: wire.AppendPack(nil, make([]wire.PackJob, 4))})
	if err != nil {
		t.Fatal(err)
	}
	four := func(i int) uint64 { return wire.PackedJobID(ack.Sequence, i) }
	if _, errs := p.fetch(ctx, []fetchReq{{id: four(1), ahead: []uint64{four(2)}}}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if p.has(four(0)) || p.has(four(1)) || !p.has(four(2)) || !p.has(four(3)) {
		t.Fatalf("after a read of job 1 with job 2 ahead: cached %v %v %v %v, want jobs 2 and 3", p.has(four(0)), p.has(four(1)), p.has(four(2)), p.has(four(3)))
	}
	if _, errs := p.fetch(ctx, []fetchReq{{id: four(0)}}); errs[0] != nil || p.has(four(0)) {
		t.Fatalf("a read of job 0 alone: %v, cached %v", errs[0], p.has(four(0)))
	}
	// The rest come from the cache: a stream without the pack still serves them.
	stream, err := js.Stream(ctx, names.JobsStream())
	if err == nil {
		err = stream.DeleteMsg(ctx, packSeq)
	}
	if err != nil {
		t.Fatal(err)
	}
	jobs, errs = p.fetch(ctx, []fetchReq{{id: b}, {id: c}})
	if errs[0] != nil || errs[1] != nil || string(jobs[0].Payload) != "1" || string(jobs[1].Payload) != "2" {
		t.Fatalf("cached jobs: %+v %v", jobs, errs)
	}
	jobs, errs = p.fetch(ctx, []fetchReq{{id: wire.PackedJobID(packSeq, 0)}, {id: wire.PackedJobID(badSeq, 1)}, {id: badSeq + 1}})
	if jobs[0] != nil || !errors.Is(errs[0], directget.ErrNotFound) {
		t.Errorf("a job of a deleted pack: %+v, %v", jobs[0], errs[0])
	}
	if jobs[1] != nil || !errors.Is(errs[1], errNotAJob) {
		t.Errorf("a job of a malformed pack: %+v, %v", jobs[1], errs[1])
	}
	if jobs[2] != nil || !errors.Is(errs[2], directget.ErrNotFound) {
		t.Errorf("a job past the stream's end: %+v, %v", jobs[2], errs[2])
	}
}

// TestPayloadCacheAccounts: under random adds, hits, takes and evictions of packed and lone
// jobs, the cache (keyed by message) counts exactly the bytes of the jobs it holds, stays within
// its bound, returns a job as added, and forgets every job of a message it evicts.
func TestPayloadCacheAccounts(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	one := cost(&wire.StoredJob{Payload: make([]byte, 8)})
	p := newPayloads(nil, 12*one)
	added := map[uint64]*wire.StoredJob{} // what was added, by ID
	randomID := func() uint64 {
		seq := uint64(1 + rng.IntN(20))
		if seq%3 == 0 {
			return seq // a job stored alone
		}
		return wire.PackedJobID(seq, rng.IntN(wire.MaxPack))
	}
	for step := range 20000 {
		id := randomID()
		switch rng.IntN(3) {
		case 0:
			j := &wire.StoredJob{ID: id, Payload: make([]byte, 8)}
			had := p.has(id)
			p.add([]wire.StoredJob{*j}, uint64(rng.IntN(100)))
			if !had {
				p.mu.Lock()
				added[id] = p.lookupLocked(id)
				p.mu.Unlock()
			}
		case 1:
			if got := p.cached([]uint64{id}); got != nil && got[0] != added[id] {
				t.Fatalf("step %d: job %d cached as %p, added as %p", step, id, got[0], added[id])
			}
		default:
			p.take([]uint64{id})
		}
		p.mu.Lock()
		sum, jobs := 0, 0
		for seq, e := range p.m {
			n := 0
			for i, j := range e.jobs {
				if j == nil {
					continue
				}
				if wire.JobSeq(j.ID) != seq || wire.JobIndex(j.ID) != i {
					t.Fatalf("step %d: job %d kept under message %d place %d", step, j.ID, seq, i)
				}
				sum += cost(j)
				n++
			}
			if n == 0 || n != e.n {
				t.Fatalf("step %d: message %d holds %d jobs, counts %d", step, seq, n, e.n)
			}
			jobs += n
		}
		listed := 0
		for _, q := range p.order {
			listed += len(q)
		}
		if sum != p.bytes || p.bytes > p.maxBytes || listed != p.listed || listed > 2*len(p.m)+64 {
			t.Fatalf("step %d: %d jobs cost %d, counted %d, bound %d; order %d (counted %d) for %d messages", step, jobs, sum, p.bytes, p.maxBytes, listed, p.listed, len(p.m))
		}
		for seq, e := range p.m {
			if !slices.Contains(p.order[e.bucket], seq) || e.bucket > p.top {
				t.Fatalf("step %d: message %d cached but not in the eviction order (bucket %d, top %d)", step, seq, e.bucket, p.top)
			}
		}
		p.mu.Unlock()
	}
}

// TestPayloadCacheKeepsFirstSingles: single jobs are all at rank 0, released in the order they
// came: a backlog of them larger than the cache keeps its first ones, not its last.
func TestPayloadCacheKeepsFirstSingles(t *testing.T) {
	t.Parallel()
	one := cost(&wire.StoredJob{Payload: make([]byte, 8)})
	const room = 100
	p := newPayloads(nil, room*one)
	for seq := uint64(1); seq <= 3*room; seq++ {
		p.add([]wire.StoredJob{{ID: seq, Payload: make([]byte, 8)}}, 0)
	}
	for seq := uint64(1); seq <= 3*room; seq++ {
		if want := seq <= room; p.has(seq) != want {
			t.Fatalf("single job %d of %d cached %v, want the first %d cached", seq, 3*room, p.has(seq), room)
		}
	}
}

// TestPayloadCacheKeepsNearest: a full cache evicts the messages farthest from release (most
// jobs of their group ahead of them) first, and keeps a newcomer only if it is nearer than
// something it holds: a backlog larger than the cache, admitted group after group, leaves every
// group's first jobs cached, not the last groups admitted.
func TestPayloadCacheKeepsNearest(t *testing.T) {
	one := cost(&wire.StoredJob{Payload: make([]byte, 8)})
	const groups, perGroup, room = 10, 100, 200
	p := newPayloads(nil, room*one)
	seq := uint64(0)
	for range groups { // group after group, each job its own message, ahead = its place
		for i := range perGroup {
			seq++
			p.add([]wire.StoredJob{{ID: seq, Payload: make([]byte, 8)}}, uint64(i))
		}
	}
	// Every group's first 16 jobs (ranks 0-15: buckets 0-4) are kept; the 200 kept are the
	// nearest buckets.
	kept := map[int]int{} // jobs kept by place in the group
	for s := uint64(1); s <= seq; s++ {
		if p.has(s) {
			kept[int((s-1)%perGroup)]++
		}
	}
	for i := range 16 {
		if kept[i] != groups {
			t.Fatalf("place %d: %d of %d groups' jobs cached; kept by place: %v", i, kept[i], groups, kept)
		}
	}
	for i := 64; i < perGroup; i++ {
		if kept[i] != 0 {
			t.Fatalf("place %d (bucket 7) cached while nearer places were evicted: %v", i, kept)
		}
	}
	// A newcomer farther than all it holds is not kept; a nearer one is, at a farther one's cost.
	seq++
	p.add([]wire.StoredJob{{ID: seq, Payload: make([]byte, 8)}}, 1000)
	if p.has(seq) {
		t.Fatal("a job 1,000 places from release was cached in a cache full of nearer ones")
	}
	seq++
	p.add([]wire.StoredJob{{ID: seq, Payload: make([]byte, 8)}}, 0)
	if !p.has(seq) {
		t.Fatal("a group's first job was not cached")
	}
}
