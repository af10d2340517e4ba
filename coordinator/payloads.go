package coordinator

import (
	"cmp"
	"context"
	"slices"
	"sync"

	"github.com/weavejobs/weave/internal/directget"
)

// payloads holds the stored messages of jobs about to be released, in a cache bounded by the
// memory its entries hold (payload, headers and bookkeeping; oldest out first), so memory is bounded by the cache, never by the backlog. Jobs arrive from
// the JOBS feed; a miss (evicted, or after a restart) reads the job's group ahead: one batch
// direct get returns the job and the next jobs of its group, since the scheduler releases a
// group's jobs in order.
type payloads struct {
	get       *directget.Client
	readAhead int
	maxBytes  int

	mu    sync.Mutex
	m     map[uint64]*directget.Msg
	order []uint64 // insertion order, for eviction
	bytes int
}

func newPayloads(get *directget.Client, readAhead, maxBytes int) *payloads {
	return &payloads{get: get, readAhead: readAhead, maxBytes: maxBytes, m: map[uint64]*directget.Msg{}}
}

// fetchReq is one job whose stored message is wanted.
type fetchReq struct {
	id      uint64
	subject string // the job's subject in the JOBS stream (its group's)
}

// fetch returns the stored message of each job (nil if it is gone), in order.
func (p *payloads) fetch(ctx context.Context, reqs []fetchReq) []*directget.Msg {
	out := make([]*directget.Msg, len(reqs))
	missing := map[string][]int{} // subject → indexes into reqs
	p.mu.Lock()
	for i, r := range reqs {
		if m := p.m[r.id]; m != nil {
			out[i] = m
			p.dropLocked(r.id)
			continue
		}
		missing[r.subject] = append(missing[r.subject], i)
	}
	p.mu.Unlock()

	var wg sync.WaitGroup
	for subject, idx := range missing {
		wg.Go(func() { p.readGroup(ctx, subject, reqs, idx, out) })
	}
	wg.Wait()
	return out
}

// readGroup fills out[idx] for jobs of one group and caches what it read ahead.
func (p *payloads) readGroup(ctx context.Context, subject string, reqs []fetchReq, idx []int, out []*directget.Msg) {
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(reqs[a].id, reqs[b].id) })
	want := map[uint64]int{}
	for _, i := range idx {
		want[reqs[i].id] = i
	}
	msgs, _ := p.get.Next(ctx, subject, reqs[idx[0]].id, len(idx)+p.readAhead)
	var extra []*directget.Msg
	for _, m := range msgs {
		if i, ok := want[m.Seq]; ok {
			out[i] = m
			delete(want, m.Seq)
		} else {
			extra = append(extra, m)
		}
	}
	// Jobs far apart in the stream (or retries of old jobs) are fetched one by one.
	var rest []uint64
	var restIdx []int
	for id, i := range want {
		rest = append(rest, id)
		restIdx = append(restIdx, i)
	}
	if len(rest) > 0 {
		got, _ := p.get.Get(ctx, rest)
		for k, m := range got {
			out[restIdx[k]] = m
		}
	}
	p.mu.Lock()
	for _, m := range extra {
		p.addLocked(m)
	}
	p.mu.Unlock()
}

// add keeps a job's stored message, read from the JOBS feed, for its release.
func (p *payloads) add(m *directget.Msg) {
	p.mu.Lock()
	p.addLocked(m)
	p.mu.Unlock()
}

func (p *payloads) addLocked(m *directget.Msg) {
	if _, ok := p.m[m.Seq]; ok {
		return
	}
	p.m[m.Seq] = m
	p.order = append(p.order, m.Seq)
	p.bytes += cost(m)
	for p.bytes > p.maxBytes && len(p.order) > 0 {
		p.dropLocked(p.order[0])
	}
	if len(p.order) > 2*len(p.m)+64 {
		p.order = slices.DeleteFunc(p.order, func(id uint64) bool { return p.m[id] == nil })
	}
}

func (p *payloads) dropLocked(id uint64) {
	if m := p.m[id]; m != nil {
		p.bytes -= cost(m)
		delete(p.m, id)
	}
	for len(p.order) > 0 && p.m[p.order[0]] == nil {
		p.order = p.order[1:]
	}
}

// entryOverhead approximates what a cached message costs besides its payload and headers: the
// Msg struct, the header map's buckets, the cache's map entry and order slot.
const entryOverhead = 256

// cost is the memory a cached message holds, so the cache's bound counts everything: with small
// payloads, the headers and bookkeeping are most of it.
func cost(m *directget.Msg) int {
	n := len(m.Data) + len(m.Subject) + entryOverhead
	for k, vs := range m.Header {
		n += len(k)
		for _, v := range vs {
			n += len(v) + 16
		}
	}
	return n
}
