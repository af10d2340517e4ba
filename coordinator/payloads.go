package coordinator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"sync"

	"github.com/weavejobs/weave/internal/directget"
	"github.com/weavejobs/weave/internal/wire"
)

// payloads holds the jobs about to be released (their payloads and what else their stored message
// says), in a cache bounded by the memory its entries hold (payload, metadata and bookkeeping;
// those farthest from release out first: see rankBucket), so memory is bounded by the cache,
// never by the backlog. Jobs arrive from the JOBS feed. A miss (evicted, or after a restart) reads the job's message and those of the next
// jobs of its group, whose IDs the scheduler knows, with one direct get by sequence per message:
// jobs stored in one pack (wire.HdrPack) are read together, so a group published in packs costs
// a read per pack, not per job.
//
// The cache is keyed by message, not by job: a backlog's jobs come in packs of up to
// wire.MaxPack, so the map holds up to 32 times fewer entries. At a large backlog the cache is
// full of jobs far from release, and a map of one entry per job would spill out of the
// processor's caches and make every lookup, insert and eviction a cache miss.
//
// Not one batch direct get by subject: for a batch the server counts the messages left on the
// subject after the start, which on a large stream scans a whole message block per request and
// would dominate a drain from a large backlog; a get by sequence is a lookup.
type payloads struct {
	get      *directget.Client
	maxBytes int

	mu sync.Mutex
	m  map[uint64]*cachedMsg // by stream sequence (wire.JobSeq)
	// order lists the messages' sequences for eviction by rank bucket (rankBucket of how many
	// jobs of their group were ahead of them when they were added), each bucket in insertion
	// order. Eviction takes the newest of the highest bucket: a message far from release goes
	// before one near it, and of equals the one that came last, whose group came last to the
	// line (single jobs are all at rank 0: the cache keeps the first of a backlog of them).
	// Entries of messages no longer cached (or cached again under another bucket) are skipped
	// when met, and swept when they outnumber the live ones.
	order  [rankBuckets][]uint64
	listed int // entries in order, live or not
	top    int // no bucket above it holds an entry
	bytes  int
}

// cachedMsg is what the cache holds of one stored message: its jobs by their place in it
// (wire.JobIndex; nil where not held).
type cachedMsg struct {
	jobs   []*wire.StoredJob
	n      int                // jobs held
	bucket int                // its bucket in payloads.order
	one    [1]*wire.StoredJob // jobs' array for a job stored alone: one allocation per entry
}

// rankBuckets bounds the rank buckets: ranks from 2^31 up share the last.
const rankBuckets = 33

// rankBucket is the eviction bucket of a message that had ahead jobs of its group before it:
// 0 for none, then one per power of two (1, 2-3, 4-7, ...).
//
// Why by rank, not by age: with a backlog larger than the cache, the feed admits jobs far
// faster than they are released, and a cache that kept the latest admitted (oldest out) held
// the backlog's tail, the last jobs to be released, while every release from the groups' heads
// missed it and read the stream again. Ranked, the cache keeps the first jobs of every group,
// the ones least in-flight releases next, so a drain from a backlog far larger than the cache
// is served from the cache as one from a small backlog is.
func rankBucket(ahead uint64) int { return min(bits.Len64(ahead), rankBuckets-1) }

func newPayloads(get *directget.Client, maxBytes int) *payloads {
	return &payloads{get: get, maxBytes: maxBytes, m: map[uint64]*cachedMsg{}}
}

// lookupLocked returns job id if cached.
func (p *payloads) lookupLocked(id uint64) *wire.StoredJob {
	e := p.m[wire.JobSeq(id)]
	if e == nil {
		return nil
	}
	if i := wire.JobIndex(id); i < len(e.jobs) {
		return e.jobs[i]
	}
	return nil
}

// fetchReq is one job that is wanted.
type fetchReq struct {
	id    uint64
	ahead []uint64 // the next jobs of its group, read along if the job is not cached
}

// has reports whether the job is cached.
func (p *payloads) has(id uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lookupLocked(id) != nil
}

// errNotAJob reports a stored message that is not a valid job message (it was never admitted, or
// its bytes changed): no read will ever give the job.
var errNotAJob = errors.New("not a valid job message")

// fetch returns each job, in order. A nil entry is a job that could not be read: errs says
// whether it is gone (wrapping directget.ErrNotFound), its stored message is not a valid job
// message (wrapping errNotAJob), or the read failed (the job is to be released again later).
//
// A job not cached is read with the jobs its request reads ahead, each message once. A message
// read for a group's next jobs (one holding a job read ahead) is kept whole from the first job
// wanted of it: a pack holds consecutive jobs of one group, so the rest of it are the group's
// next jobs too, and keeping them means each pack of a backlog is read once, not once per
// ReadAhead jobs.
func (p *payloads) fetch(ctx context.Context, reqs []fetchReq) (out []*wire.StoredJob, errs []error) {
	out = make([]*wire.StoredJob, len(reqs))
	errs = make([]error, len(reqs))
	var missing []uint64 // the jobs asked for and not cached
	p.mu.Lock()
	for i, r := range reqs {
		if j := p.lookupLocked(r.id); j != nil {
			out[i] = j
			p.dropLocked(r.id)
			continue
		}
		missing = append(missing, r.id)
	}
	if len(missing) == 0 {
		p.mu.Unlock()
		return out, errs
	}
	// The messages to read, each once, in sequence order.
	reads := make([]msgRead, 0, len(missing))
	for _, id := range missing {
		reads = addRead(reads, id, false)
	}
	for i, r := range reqs {
		if out[i] == nil {
			for _, id := range r.ahead {
				if p.lookupLocked(id) == nil {
					reads = addRead(reads, id, true)
				}
			}
		}
	}
	p.mu.Unlock()

	seqs := make([]uint64, len(reads))
	for k := range reads {
		seqs[k] = reads[k].seq
	}
	msgs, getErrs := p.get.GetEach(ctx, seqs)
	for k, m := range msgs {
		if m == nil {
			reads[k].err = getErrs[k]
			continue
		}
		jobs, err := wire.ParseStoredJobs(m.Seq, m.Header, m.Data)
		if err != nil {
			reads[k].err = fmt.Errorf("%w: %w", errNotAJob, err)
			continue
		}
		reads[k].jobs = jobs
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	for i, r := range reqs {
		if out[i] != nil {
			continue
		}
		k, _ := slices.BinarySearchFunc(reads, wire.JobSeq(r.id), func(rd msgRead, seq uint64) int { return cmp.Compare(rd.seq, seq) })
		if err := reads[k].err; err != nil {
			errs[i] = err
		} else if out[i] = wire.JobIn(reads[k].jobs, r.id); out[i] == nil {
			errs[i] = fmt.Errorf("job %d: %w", r.id, directget.ErrNotFound) // the message is there, the job is not in it
		}
	}
	for _, rd := range reads {
		if !rd.ahead {
			continue // read only for jobs asked for, which are released now
		}
		for i := range rd.jobs {
			if j := &rd.jobs[i]; j.ID >= rd.low && !slices.Contains(missing, j.ID) {
				p.addLocked(j, 0) // its group's next jobs
			}
		}
	}
	return out, errs
}

// msgRead is one message fetch reads.
type msgRead struct {
	seq   uint64
	low   uint64 // the lowest job wanted of it
	ahead bool   // it holds a job read ahead
	jobs  []wire.StoredJob
	err   error // why it gave no jobs
}

// addRead adds job id's message to reads, kept in sequence order, or notes id in it.
func addRead(reads []msgRead, id uint64, ahead bool) []msgRead {
	seq := wire.JobSeq(id)
	k, found := slices.BinarySearchFunc(reads, seq, func(rd msgRead, seq uint64) int { return cmp.Compare(rd.seq, seq) })
	if !found {
		reads = slices.Insert(reads, k, msgRead{seq: seq, low: id})
	}
	reads[k].low = min(reads[k].low, id)
	reads[k].ahead = reads[k].ahead || ahead
	return reads
}

// cached returns all the jobs if every one is cached, else nil. They stay cached until take.
func (p *payloads) cached(ids []uint64) []*wire.StoredJob {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*wire.StoredJob, len(ids))
	for i, id := range ids {
		if out[i] = p.lookupLocked(id); out[i] == nil {
			return nil
		}
	}
	return out
}

// take drops the jobs from the cache: they are released.
func (p *payloads) take(ids []uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, id := range ids {
		p.dropLocked(id)
	}
}

// add keeps jobs read from the JOBS feed for their release; ahead is how many jobs of their
// group were ahead of them (not yet terminal) when they were admitted.
func (p *payloads) add(jobs []wire.StoredJob, ahead uint64) {
	p.mu.Lock()
	for i := range jobs {
		p.addLocked(&jobs[i], rankBucket(ahead))
	}
	p.mu.Unlock()
}

func (p *payloads) addLocked(j *wire.StoredJob, bucket int) {
	seq, i := wire.JobSeq(j.ID), wire.JobIndex(j.ID)
	e := p.m[seq]
	if e == nil {
		e = &cachedMsg{bucket: bucket}
		if wire.IsPacked(j.ID) {
			e.jobs = make([]*wire.StoredJob, 0, wire.MaxPack)
		} else {
			e.jobs = e.one[:0]
		}
		p.m[seq] = e
		p.order[bucket] = append(p.order[bucket], seq)
		p.listed++
		p.top = max(p.top, bucket)
	}
	if i < len(e.jobs) && e.jobs[i] != nil {
		return
	}
	if i >= len(e.jobs) {
		e.jobs = e.jobs[:i+1] // within its capacity: a job's index is below MaxPack
	}
	if wire.IsPacked(j.ID) {
		// A packed job's payload aliases its whole pack: kept alone, it would hold the others'
		// bytes too, which its cost does not count.
		j.Payload = slices.Clone(j.Payload)
	}
	e.jobs[i] = j
	e.n++
	p.bytes += cost(j)
	for p.bytes > p.maxBytes {
		seq, ok := p.victimLocked()
		if !ok {
			break
		}
		p.evictLocked(seq)
	}
	if p.listed > 2*len(p.m)+64 {
		p.listed = 0
		for b := range p.order {
			p.order[b] = slices.DeleteFunc(p.order[b], func(seq uint64) bool { return !p.listedLocked(seq, b) })
			p.listed += len(p.order[b])
		}
	}
}

// listedLocked reports whether an entry seq of bucket b of the order is the message's.
func (p *payloads) listedLocked(seq uint64, b int) bool {
	e := p.m[seq]
	return e != nil && e.bucket == b
}

// victimLocked returns the message to evict first: the newest of the highest bucket. It drops
// the stale entries it meets on the way.
func (p *payloads) victimLocked() (uint64, bool) {
	for ; p.top >= 0; p.top-- {
		q := p.order[p.top]
		for len(q) > 0 && !p.listedLocked(q[len(q)-1], p.top) {
			q = q[:len(q)-1]
			p.listed--
		}
		p.order[p.top] = q
		if len(q) > 0 {
			return q[len(q)-1], true
		}
	}
	p.top = 0
	return 0, false
}

// dropLocked forgets job id, if cached.
func (p *payloads) dropLocked(id uint64) {
	seq, i := wire.JobSeq(id), wire.JobIndex(id)
	e := p.m[seq]
	if e == nil || i >= len(e.jobs) || e.jobs[i] == nil {
		return
	}
	p.bytes -= cost(e.jobs[i])
	e.jobs[i] = nil
	if e.n--; e.n == 0 {
		delete(p.m, seq) // its order entry goes when met (victimLocked) or swept (addLocked)
	}
}

// evictLocked forgets every job cached of the message at seq.
func (p *payloads) evictLocked(seq uint64) {
	if e := p.m[seq]; e != nil {
		for _, j := range e.jobs {
			if j != nil {
				p.bytes -= cost(j)
			}
		}
		delete(p.m, seq)
	}
}

// entryOverhead approximates what a cached job costs besides its payload and the strings of its
// metadata: the StoredJob, its slices' headers, its share of its message's entry and order slot.
const entryOverhead = 256

// cost is the memory a cached job holds, so the cache's bound counts everything: with small
// payloads, the metadata and bookkeeping are most of it. (A packed job's payload is copied out
// of its pack when cached, so it holds no more than its own bytes.)
func cost(j *wire.StoredJob) int {
	n := len(j.Payload) + len(j.Meta.Group) + len(j.Meta.Key) + len(j.Trace) + entryOverhead
	for _, r := range j.Meta.Require {
		n += len(r) + 16
	}
	for _, r := range j.Meta.Prefer {
		n += len(r) + 16
	}
	return n
}
