package coordinator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/weavejobs/weave/internal/directget"
	"github.com/weavejobs/weave/internal/wire"
)

// payloads holds the jobs about to be released (their payloads and what else their stored message
// says), in a cache bounded by the memory its entries hold (payload, metadata and bookkeeping;
// oldest out first), so memory is bounded by the cache, never by the backlog. Jobs arrive from the
// JOBS feed. A miss (evicted, or after a restart) reads the job's message and those of the next
// jobs of its group, whose IDs the scheduler knows, with one direct get by sequence per message:
// jobs stored in one pack (wire.HdrPack) are read together, so a group published in packs costs
// a read per pack, not per job.
//
// Not one batch direct get by subject: for a batch the server counts the messages left on the
// subject after the start, which on a large stream scans a whole message block per request.
// Reading 5,000 jobs from a backlog of 1,000,000 spent 47% of the process's CPU there (95 µs per
// job in all); a get by sequence is a lookup.
type payloads struct {
	get      *directget.Client
	maxBytes int

	mu    sync.Mutex
	m     map[uint64]*wire.StoredJob
	order []uint64 // insertion order, for eviction
	bytes int
}

func newPayloads(get *directget.Client, maxBytes int) *payloads {
	return &payloads{get: get, maxBytes: maxBytes, m: map[uint64]*wire.StoredJob{}}
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
	return p.m[id] != nil
}

// errNotAJob reports a stored message that is not a valid job message (it was never admitted, or
// its bytes changed): no read will ever give the job.
var errNotAJob = errors.New("not a valid job message")

// fetch returns each job, in order. A nil entry is a job that could not be read: errs says
// whether it is gone (wrapping directget.ErrNotFound), its stored message is not a valid job
// message (wrapping errNotAJob), or the read failed (the job is to be released again later).
func (p *payloads) fetch(ctx context.Context, reqs []fetchReq) (out []*wire.StoredJob, errs []error) {
	out = make([]*wire.StoredJob, len(reqs))
	errs = make([]error, len(reqs))
	var (
		seqs   []uint64            // the messages to read: the missing jobs', then the read-ahead's
		wanted = map[uint64]bool{} // the jobs to keep from them: missing ones and read-ahead
		read   = map[uint64]bool{} // seqs, as a set
	)
	want := func(id uint64) {
		wanted[id] = true
		if s := wire.JobSeq(id); !read[s] {
			read[s] = true
			seqs = append(seqs, s)
		}
	}
	p.mu.Lock()
	missing := false
	for i, r := range reqs {
		if j := p.m[r.id]; j != nil {
			out[i] = j
			p.dropLocked(r.id)
			continue
		}
		missing = true
		want(r.id)
	}
	if missing {
		for i, r := range reqs {
			if out[i] != nil {
				continue
			}
			for _, id := range r.ahead {
				if p.m[id] == nil {
					want(id)
				}
			}
		}
	}
	p.mu.Unlock()
	if !missing {
		return out, errs
	}

	msgs, getErrs := p.get.GetEach(ctx, seqs)
	found := make(map[uint64]*wire.StoredJob, len(wanted))
	msgErr := make(map[uint64]error, len(seqs)) // by sequence: why a message gave no job
	for k, m := range msgs {
		if m == nil {
			msgErr[seqs[k]] = getErrs[k]
			continue
		}
		jobs, err := wire.ParseStoredJobs(m.Seq, m.Header, m.Data)
		if err != nil {
			msgErr[seqs[k]] = fmt.Errorf("%w: %w", errNotAJob, err)
			continue
		}
		for i := range jobs {
			if wanted[jobs[i].ID] {
				found[jobs[i].ID] = &jobs[i]
			}
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	asked := make(map[uint64]bool, len(reqs))
	for i, r := range reqs {
		if out[i] != nil {
			continue
		}
		asked[r.id] = true
		switch j, err := found[r.id], msgErr[wire.JobSeq(r.id)]; {
		case j != nil:
			out[i] = j
		case err != nil:
			errs[i] = err
		default: // the message is there, the job is not in it
			errs[i] = fmt.Errorf("job %d: %w", r.id, directget.ErrNotFound)
		}
	}
	for id, j := range found {
		if !asked[id] {
			p.addLocked(j)
		}
	}
	return out, errs
}

// cached returns all the jobs if every one is cached, else nil. They stay cached until take.
func (p *payloads) cached(ids []uint64) []*wire.StoredJob {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*wire.StoredJob, len(ids))
	for i, id := range ids {
		if out[i] = p.m[id]; out[i] == nil {
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

// add keeps jobs read from the JOBS feed for their release.
func (p *payloads) add(jobs []wire.StoredJob) {
	p.mu.Lock()
	for i := range jobs {
		p.addLocked(&jobs[i])
	}
	p.mu.Unlock()
}

func (p *payloads) addLocked(j *wire.StoredJob) {
	if _, ok := p.m[j.ID]; ok {
		return
	}
	if wire.IsPacked(j.ID) {
		// A packed job's payload aliases its whole pack: kept alone, it would hold the others'
		// bytes too, which its cost does not count.
		j.Payload = slices.Clone(j.Payload)
	}
	p.m[j.ID] = j
	p.order = append(p.order, j.ID)
	p.bytes += cost(j)
	for p.bytes > p.maxBytes && len(p.order) > 0 {
		p.dropLocked(p.order[0])
	}
	if len(p.order) > 2*len(p.m)+64 {
		p.order = slices.DeleteFunc(p.order, func(id uint64) bool { return p.m[id] == nil })
	}
}

func (p *payloads) dropLocked(id uint64) {
	if j := p.m[id]; j != nil {
		p.bytes -= cost(j)
		delete(p.m, id)
	}
	for len(p.order) > 0 && p.m[p.order[0]] == nil {
		p.order = p.order[1:]
	}
}

// entryOverhead approximates what a cached job costs besides its payload and the strings of its
// metadata: the StoredJob, its slices' headers, the cache's map entry and order slot.
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
