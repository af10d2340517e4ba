package engine

import (
	"hash/maphash"
	"iter"
	"math"
	"strings"
	"time"
	"unsafe"

	"github.com/weavejobs/weave/internal/wire"
)

// retention is the engine's part that owns what keeps the streams bounded: the complete groups
// whose outcomes are retained, and the positions the EVENTS low-water mark is computed from.
// Owned by the loop.
type retention struct {
	retained retainedLog // complete groups, in completion order, whose outcomes are kept
	// latest is, by a hash of the group ID, the position of the latest retained incarnation (the
	// last to complete) of the IDs with that hash; each links to the one before (retained.prev).
	// Questions about a finished group (dependencies, inspection, redrive) follow the links, not
	// a scan of every retained group, which cost milliseconds per question with a day of single
	// jobs retained. Keyed by a hash, not the ID: a map without pointers, which the garbage
	// collector need not scan.
	latest        map[uint64]int
	seed          maphash.Seed
	bigSums       map[uint64]wire.GroupSummary // by incarnation: summaries whose counts overflow retained.counts
	eventsApplied uint64                       // the last EVENTS sequence applied
	jobsApplied   uint64                       // the last JOBS sequence applied
	unstored      map[uint64]int               // EVENTS sequences of reports whose outcomes are not stored yet
	// openEnded counts, per group token, the retained incarnations that keep their job messages
	// and whose last JOBS sequence is not known yet: retain scans the retained groups only for a
	// token it counts (one in a thousand groups fails; scanning for every group cost O(n) each).
	openEnded map[string]int
	// keeping counts, per group token, the retained incarnations that keep their job messages:
	// while one does, a later incarnation's messages are kept too (see keepsJobs).
	keeping map[string]int
}

// Bounded growth. Every stream shrinks back once its contents are no longer needed:
//
//   - NS_JOBS: a complete group's messages are purged when its summary is stored, or, if some
//     of its jobs failed (their payloads are kept for inspection), ResultRetention later;
//   - NS_RESULTS: a complete group's outcomes are retained, then purged when its retention
//     expires, ResultRetention after it completed;
//   - NS_EVENTS: reports and journal records are purged below the low-water mark, the oldest
//     sequence the state still depends on (see lowWater);
//   - NS_WORK is a work queue: acked batches are gone. NS_REJECTED is bounded by age and count.

// retained is a complete group whose outcomes (and perhaps job messages) are still kept.
// Owned by the loop, through retention.
type retained struct {
	openSeq    uint64 // its incarnation
	summarySeq uint64 // the summary's sequence in RESULTS: outcomes are purged up to it
	jobsSeq    uint64 // its last sequence in JOBS: job messages are purged up to it; 0 = not known yet
	prev       int    // the position of the previous retained incarnation of its ID's hash, -1 if none
	at         int64  // when it completed, in Unix nanoseconds
	// counts are how it ended (groups that run after it bind to it): its summary's jobs, done,
	// failed and canceled, a third of its size; one that does not fit is in retention.bigSums.
	counts    [4]uint32
	idOff     uint32 // its ID: idLen bytes from idOff in its chunk's IDs (retainedLog.ids)
	idLen     uint16
	abandoned bool
	bigSum    bool
	keepJobs  bool // its job messages are still in JOBS (some failed)
	expires   bool // its outcome messages carry a TTL: the server deletes them
}

// summary returns how r ended.
func (rt *retention) summary(r *retained) wire.GroupSummary {
	if r.bigSum {
		return rt.bigSums[r.openSeq]
	}
	return wire.GroupSummary{Jobs: uint64(r.counts[0]), Done: uint64(r.counts[1]), Failed: uint64(r.counts[2]), Canceled: uint64(r.counts[3]), Abandoned: r.abandoned}
}

// setSummary records how r ended.
func (rt *retention) setSummary(r *retained, sum wire.GroupSummary) {
	r.abandoned = sum.Abandoned
	if max(sum.Jobs, sum.Done, sum.Failed, sum.Canceled) > math.MaxUint32 {
		if rt.bigSums == nil {
			rt.bigSums = map[uint64]wire.GroupSummary{}
		}
		r.bigSum, rt.bigSums[r.openSeq] = true, sum
		return
	}
	r.counts = [4]uint32{uint32(sum.Jobs), uint32(sum.Done), uint32(sum.Failed), uint32(sum.Canceled)}
}

// completedAt is when r completed.
func (r *retained) completedAt() time.Time { return fromUnixNano(r.at) }

// ofID returns the retained incarnations of the group ID, the last to complete first.
func (rt *retention) ofID(id string) iter.Seq[*retained] {
	return func(yield func(*retained) bool) {
		pos, ok := rt.latest[rt.hash(id)]
		for ok && pos >= rt.retained.first {
			r := rt.retained.at(pos)
			if rt.retained.id(pos) == id && !yield(r) {
				return
			}
			pos, ok = r.prev, r.prev >= 0
		}
	}
}

// hash is the key of the group ID in latest.
func (rt *retention) hash(id string) uint64 {
	if rt.latest == nil {
		rt.latest, rt.seed = map[uint64]int{}, maphash.MakeSeed()
	}
	return maphash.String(rt.seed, id)
}

// Purge is an effect: delete a retained group's outcomes up to SummarySeq (if above 0) and, if JobsSeq > 0,
// the messages of its subjects in JOBS up to JobsSeq. Packed, if not 0, is the incarnation of a
// single pack's job kept for its failure: its share of the pack's message is done.
type Purge struct {
	Tok                 string
	SummarySeq, JobsSeq uint64
	Packed              uint64
}

// retain records that a complete incarnation's summary is stored, at RESULTS sequence
// summarySeq. keepJobs says its job messages are still in JOBS (some failed), up to jobsSeq (0
// when not known: after a restart, the next incarnation's open, or the feed's end, bounds it).
func (e *Engine) retain(id string, openSeq, summarySeq uint64, keepJobs bool, jobsSeq uint64, at time.Time, sum wire.GroupSummary, expires bool) {
	tok := wire.GroupToken(id)
	rt := &e.retention
	if rt.openEnded[tok] > 0 {
		for r := range rt.ofID(id) {
			if r.keepJobs && r.jobsSeq == 0 && arrivedBefore(r.openSeq, openSeq) {
				r.jobsSeq = wire.JobSeq(openSeq) - 1 // an earlier incarnation ends before this one's open
				rt.closed(tok)
			}
		}
	}
	h := rt.hash(id)
	prev, ok := rt.latest[h]
	if !ok {
		prev = -1
	}
	r := retained{openSeq: openSeq, summarySeq: summarySeq, keepJobs: keepJobs, jobsSeq: jobsSeq, prev: prev, at: unixNano(at), expires: expires}
	rt.setSummary(&r, sum)
	rt.latest[h] = rt.retained.append(r, id)
	if keepJobs {
		if rt.keeping == nil {
			rt.keeping = map[string]int{}
		}
		rt.keeping[tok]++
	}
	if keepJobs && jobsSeq == 0 {
		if rt.openEnded == nil {
			rt.openEnded = map[string]int{}
		}
		rt.openEnded[tok]++
	}
}

// keepsJobs reports whether complete incarnation g keeps its job messages in JOBS until its
// retention passes: some of its jobs failed (their payloads are kept to run them again), or an
// earlier retained incarnation of its group ID keeps its own, which a purge of g's (all of the
// group's subjects up to g's last sequence) would delete.
func (e *Engine) keepsJobs(g *group) bool {
	return g.failed > 0 || e.retention.keeping[g.tok] > 0
}

// closed records that a retained incarnation of tok no longer has an open end.
func (rt *retention) closed(tok string) {
	if rt.openEnded[tok]--; rt.openEnded[tok] <= 0 {
		delete(rt.openEnded, tok)
	}
}

// boundRetained gives the retained incarnations whose last JOBS sequence is still unknown after
// replay a bound: the open of the current incarnation of their ID, or the end of the feed.
func (e *Engine) boundRetained() {
	for id, r := range e.retention.retained.oldestFirst() {
		if !r.keepJobs || r.jobsSeq != 0 {
			continue
		}
		e.retention.closed(wire.GroupToken(id))
		r.jobsSeq = e.retention.jobsApplied
		if g := e.groups.table.latest(id); g != nil && arrivedBefore(r.openSeq, g.openSeq) {
			r.jobsSeq = wire.JobSeq(g.openSeq) - 1
		}
	}
}

// ExpireRetained emits the purges of the groups whose retention expired: complete more than
// ResultRetention ago. Groups are appended roughly in completion order; a group complete out of
// order waits for the ones before it, a delay of at most the spread of completion times.
func (e *Engine) ExpireRetained(now time.Time) {
	rt := &e.retention
	for rt.retained.len() > 0 && now.Sub(rt.retained.at(rt.retained.first).completedAt()) >= e.cfg.ResultRetention {
		r, id := *rt.retained.at(rt.retained.first), rt.retained.id(rt.retained.first)
		if h := rt.hash(id); rt.latest[h] == rt.retained.first {
			delete(rt.latest, h) // the incarnations linked before it completed before it: dropped already
		}
		if r.bigSum {
			delete(rt.bigSums, r.openSeq)
		}
		tok := strings.Clone(wire.GroupToken(id)) // not the ID's bytes, dropped below
		p := Purge{Tok: tok, SummarySeq: r.summarySeq}
		if r.expires {
			p.SummarySeq = 0 // the server expires its outcomes
		}
		if r.keepJobs {
			p.JobsSeq = r.jobsSeq
			if wire.IsPacked(r.openSeq) {
				p.Packed = r.openSeq
			}
			if wire.IsPacked(p.JobsSeq) {
				p.JobsSeq = 0 // nothing stored on its subjects after its pack
			}
			if r.jobsSeq == 0 {
				rt.closed(tok)
			}
			if rt.keeping[tok]--; rt.keeping[tok] <= 0 {
				delete(rt.keeping, tok)
			}
		}
		if p.SummarySeq > 0 || p.JobsSeq > 0 || p.Packed != 0 {
			e.out.retentionPurges = append(e.out.retentionPurges, p)
		}
		rt.retained.dropOldest()
	}
}

// retainedChunk is how many retained groups a chunk of retainedLog holds.
const retainedChunk = 4096

// retainedLog holds the retained groups in completion order, each at a position that does not
// change from its append to its drop, oldest first. It grows and shrinks by chunks, never
// copying what it holds: a day of single jobs is tens of millions of groups, and growing one
// slice copied all of them (and held two copies) each time it filled.
//
// Its groups hold no pointers, so the garbage collector does not scan them: each one's ID is in
// its chunk's ids, back to back, not a string of its own (an allocation, and a pointer to follow
// on every collection, for each of tens of millions of groups).
type retainedLog struct {
	chunks [][]retained // chunks[k] holds the positions from (base+k)·retainedChunk on
	ids    [][]byte     // ids[k] the IDs of chunks[k]'s groups
	spans  []jobSpan    // spans[k] bounds the jobs of the groups at positions from (base·retainedChunk + k·retainedSpan) on
	base   int
	first  int // the position of the oldest group held
	end    int // the position the next group appended takes
}

// retainedSpan is how many retained groups a jobSpan bounds.
const retainedSpan = 256

// jobSpan bounds, by arrival (wire.Arrival), the jobs of retainedSpan groups retained one after
// the other: from the earliest open to the latest last sequence (unbounded while one is not
// known). The search for the group of a finished job skips the spans that miss it: groups are
// retained about in the order they arrived, so few are read however many groups are retained.
type jobSpan struct{ from, to uint64 }

func (s *jobSpan) add(openSeq, jobsSeq uint64) {
	s.from = min(s.from, wire.Arrival(openSeq))
	if jobsSeq == 0 {
		s.to = math.MaxUint64 // set later (boundRetained, retain): the span stays wide
	} else {
		s.to = max(s.to, wire.Arrival(jobsSeq))
	}
}

// holds reports whether a job that arrived at a (wire.Arrival) may be in one of the span's groups.
func (s *jobSpan) holds(a uint64) bool { return s.from <= a && a <= s.to }

func (l *retainedLog) len() int { return l.end - l.first }

// at returns the group at pos, which must be held (first ≤ pos < end).
func (l *retainedLog) at(pos int) *retained {
	return &l.chunks[pos/retainedChunk-l.base][pos%retainedChunk]
}

// id returns the ID of the group at pos, which must be held. The string shares the bytes of
// the log's IDs, which are never written again once appended.
func (l *retainedLog) id(pos int) string {
	r, ids := l.at(pos), l.ids[pos/retainedChunk-l.base]
	if r.idLen == 0 {
		return ""
	}
	return unsafe.String(&ids[r.idOff], r.idLen)
}

// append adds r, of group ID id, after the others and returns its position.
func (l *retainedLog) append(r retained, id string) int {
	if l.end%retainedChunk == 0 {
		l.chunks = append(l.chunks, make([]retained, retainedChunk))
		l.ids = append(l.ids, nil)
	}
	ids := &l.ids[len(l.ids)-1]
	r.idOff, r.idLen = uint32(len(*ids)), uint16(len(id)) // group IDs are at most wire.MaxGroupIDLen bytes
	*ids = append(*ids, id...)
	if l.end%retainedSpan == 0 {
		l.spans = append(l.spans, jobSpan{from: math.MaxUint64})
	}
	pos := l.end
	*l.at(pos) = r
	l.spans[len(l.spans)-1].add(r.openSeq, r.jobsSeq)
	l.end++
	return pos
}

// dropOldest drops the oldest group held, and its chunk once it holds no other.
func (l *retainedLog) dropOldest() {
	*l.at(l.first) = retained{}
	l.first++
	if l.first%retainedChunk == 0 || l.first == l.end {
		if l.first == l.end {
			l.chunks, l.ids, l.spans, l.base, l.first, l.end = nil, nil, nil, 0, 0, 0 // positions start again: nothing links to them
			return
		}
		l.chunks[0], l.ids[0] = nil, nil
		l.chunks, l.ids, l.spans = l.chunks[1:], l.ids[1:], l.spans[retainedChunk/retainedSpan:]
		l.base++
	}
}

// oldestFirst and newestFirst iterate over the groups held, with their IDs.
func (l *retainedLog) oldestFirst() iter.Seq2[string, *retained] {
	return func(yield func(string, *retained) bool) {
		for pos := l.first; pos < l.end; pos++ {
			if !yield(l.id(pos), l.at(pos)) {
				return
			}
		}
	}
}

// spanning iterates, newest first, over the groups held in the spans that hold job id.
func (l *retainedLog) spanning(id uint64) iter.Seq2[string, *retained] {
	return func(yield func(string, *retained) bool) {
		a := wire.Arrival(id)
		for k := len(l.spans) - 1; k >= 0; k-- {
			if !l.spans[k].holds(a) {
				continue
			}
			start := l.base*retainedChunk + k*retainedSpan
			for pos := min(l.end, start+retainedSpan) - 1; pos >= max(l.first, start); pos-- {
				if !yield(l.id(pos), l.at(pos)) {
					return
				}
			}
		}
	}
}

func (l *retainedLog) newestFirst() iter.Seq2[string, *retained] {
	return func(yield func(string, *retained) bool) {
		for pos := l.end - 1; pos >= l.first; pos-- {
			if !yield(l.id(pos), l.at(pos)) {
				return
			}
		}
	}
}

// noteEvent records that the EVENTS message at seq has been applied.
func (rt *retention) noteEvent(seq uint64) {
	rt.eventsApplied = max(rt.eventsApplied, seq)
}

// outcomeStored is told that the outcomes decided from the reports at these EVENTS sequences
// are stored in RESULTS: those reports are no longer needed.
func (rt *retention) outcomeStored(seqs []uint64) {
	for _, s := range seqs {
		if rt.unstored[s]--; rt.unstored[s] <= 0 {
			delete(rt.unstored, s)
		}
	}
}

// LowWater is the lowest EVENTS sequence the state still depends on: the report behind a job
// waiting to be released again (its attempt count and retry time live there and in the retry
// record after it), and the reports whose outcomes are not stored yet. Everything below can go:
// a job whose latest attempt is in WORK needs no report, and a terminal job's outcome is in
// RESULTS. 0 means nothing has been applied yet.
func (e *Engine) LowWater() uint64 {
	low := e.retention.eventsApplied + 1
	for _, j := range e.jobs {
		if j.evSeq > 0 && j.evSeq < low {
			low = j.evSeq
		}
	}
	for s := range e.retention.unstored {
		if s < low {
			low = s
		}
	}
	if e.retention.eventsApplied == 0 {
		return 0
	}
	return low
}
