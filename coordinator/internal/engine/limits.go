package engine

import (
	"math"
	"slices"
	"time"

	"github.com/weavejobs/weave/internal/jobindex"
	"github.com/weavejobs/weave/internal/wire"
	"github.com/weavejobs/weave/spreader"
)

// limits is the engine's part that owns the limits per resource and per group ID (stored in the
// LIMITS stream, one message per limit) and what each has in use. A job is under the limit of
// its group ID and those of every resource it requires or prefers; it is released only when all
// of them allow it, and only to a free slot, never to a prefetch place (so it starts when it is
// released). A job that a limit holds back is set aside in that limit's line, outside the
// scheduler, so it holds no feeder slot and blocks neither its group's other jobs nor other
// groups; when the limit has room again (a job under it ends, or its rate gives a token) its
// line offers jobs again, ahead of new work: each the first of the group in line that has the
// fewest jobs under the limit for its weight, so groups share a limit as they share the fleet.
// Owned by the loop.
//
//   - Concurrency: the jobs under the limit released and not yet reported (running, or in a
//     worker's hands) never exceed it. A coordinator that takes over counts them from the jobs
//     replay found in flight.
//   - Rate: a token bucket of Burst tokens (default 1) refilled at Rate per Per, kept as the
//     generic cell rate algorithm's theoretical arrival time (tat): the bucket holds
//     burst − (tat − now)/interval tokens, and each release takes one by moving tat an interval
//     on. A coordinator that takes over starts with an empty bucket, so the starts of the two
//     terms together stay within the bucket's bound.
//   - Paused: no room at all (room is 0) until the limit is set again without it; the jobs it
//     holds back wait in its line, and the resume offers them again like any change of a limit.
type limits struct {
	byKey     map[limitKey]*limitState
	resources int    // resource limits in byKey: none means no job's resources need looking up
	applied   uint64 // the LIMITS stream's sequence read up to (status: LimitsSeq)
}

type limitKey struct {
	kind wire.LimitKind
	name string
}

// limitState is one limit and its use.
type limitState struct {
	wire.Limit
	running   int               // jobs under it released and not reported
	runningBy map[*group]int    // running, per group: its line offers the least loaded group first
	tat       time.Time         // the rate's theoretical arrival time (see limits)
	line      map[*group][]*job // jobs it holds back, per group, first come first; ended ones are skipped
	order     []*group          // the groups in line, in the order they came: ties between them rotate
	next      int               // where in order the next tie goes
	entries   int               // jobs in line, ended ones included (see dropEnded)
	held      int               // of them, those not ended: what status and metrics count
	byGroup   map[*group]int    // held, per group: what weave group says holds it back
	offered   int               // jobs its line offered again that are neither released nor held again yet
	offeredBy map[*group]int    // offered, per group
}

// hold and letGo count job j into and out of ls's held jobs (letGo, not release: a release is
// what sends a job to a pool).
func (ls *limitState) hold(j *job) {
	j.heldBy = ls
	ls.held++
	if ls.byGroup == nil {
		ls.byGroup = map[*group]int{}
	}
	ls.byGroup[j.g]++
}

func (ls *limitState) letGo(j *job) {
	j.heldBy = nil
	ls.held--
	if ls.byGroup[j.g]--; ls.byGroup[j.g] <= 0 {
		delete(ls.byGroup, j.g)
		ls.leave(j.g)
	}
}

// leave takes g, which has no job held any more, out of ls's line with its ended entries.
func (ls *limitState) leave(g *group) {
	ls.entries -= len(ls.line[g])
	delete(ls.line, g)
	if i := slices.Index(ls.order, g); i >= 0 {
		ls.order = slices.Delete(ls.order, i, i+1)
		if i < ls.next {
			ls.next--
		}
	}
	if ls.next >= len(ls.order) {
		ls.next = 0
	}
}

// enqueue puts j in its group's queue of ls's line: at the front for a job the line offered and
// got back (it was its group's first), else behind the jobs of its priority or higher.
func (ls *limitState) enqueue(j *job, front bool) {
	if ls.line == nil {
		ls.line = map[*group][]*job{}
	}
	q, ok := ls.line[j.g]
	if !ok {
		ls.order = append(ls.order, j.g)
	}
	switch {
	case front:
		q = slices.Insert(q, 0, j)
	case j.prio > 0:
		i := len(q)
		for i > 0 && q[i-1].prio < j.prio {
			i--
		}
		q = slices.Insert(q, i, j)
	default:
		q = append(q, j)
	}
	ls.line[j.g] = q
	ls.entries++
	ls.hold(j)
}

// countOffered counts j, offered again by ls's line, until it is released, held again or ends.
func (ls *limitState) countOffered(j *job) {
	j.offeredBy = ls
	ls.offered++
	if ls.offeredBy == nil {
		ls.offeredBy = map[*group]int{}
	}
	ls.offeredBy[j.g]++
}

// unoffer counts j out of the jobs its limit's line offered: it was released, held again or ended.
func unoffer(j *job) {
	ls := j.offeredBy
	if ls == nil {
		return
	}
	j.offeredBy = nil
	ls.offered--
	if ls.offeredBy[j.g]--; ls.offeredBy[j.g] <= 0 {
		delete(ls.offeredBy, j.g)
	}
}

// SetLimit applies a limit read from the LIMITS stream: a new or changed limit, or a removal.
func (e *Engine) SetLimit(l wire.Limit, now time.Time) {
	if e.limits.byKey == nil {
		e.limits.byKey = map[limitKey]*limitState{}
	}
	k := limitKey{l.Kind, l.Name}
	ls := e.limits.byKey[k]
	if l.Removes() {
		if ls != nil {
			delete(e.limits.byKey, k)
			if k.kind == wire.LimitResource {
				e.limits.resources--
			}
			e.offerAgain(ls, ls.held) // each is held back again if another limit says so
			e.log.Info().Str("kind", string(l.Kind)).Str("name", l.Name).Msg("limit removed")
		}
		return
	}
	if ls == nil {
		ls = &limitState{}
		e.limits.byKey[k] = ls
		if k.kind == wire.LimitResource {
			e.limits.resources++
		}
	}
	if ls.Rate == 0 && l.Rate > 0 {
		ls.tat = now.Add(time.Duration(max(l.Burst, 1)) * time.Duration(float64(l.Per)/float64(l.Rate))) // empty
	}
	ls.Limit = l
	e.countRunning(ls)
	e.log.Info().Str("kind", string(l.Kind)).Str("name", l.Name).Stringer("limit", l).Int("running", ls.running).Msg("limit set")
	e.wakeLimit(ls, now)
}

// countRunning counts the jobs under ls in flight now: for a limit just set, or at takeover.
func (e *Engine) countRunning(ls *limitState) {
	ls.running = 0
	clear(ls.runningBy)
	var buf []*limitState
	for _, j := range e.jobs {
		if j.pool == nil {
			continue
		}
		buf = e.limitsOf(buf[:0], j.id, j.g.id)
		if slices.Contains(buf, ls) {
			ls.use(j.g)
		}
	}
}

// limitsOf appends to dst the limits job id of group ID group is under.
func (e *Engine) limitsOf(dst []*limitState, id uint64, group string) []*limitState {
	if len(e.limits.byKey) == 0 {
		return dst
	}
	if ls := e.limits.byKey[limitKey{wire.LimitGroup, group}]; ls != nil {
		dst = append(dst, ls)
	}
	if e.limits.resources > 0 {
		for name := range e.idx.JobResources(id) {
			if ls := e.limits.byKey[limitKey{wire.LimitResource, name}]; ls != nil && !slices.Contains(dst, ls) {
				dst = append(dst, ls)
			}
		}
	}
	return dst
}

// burst is the bucket's size.
func (ls *limitState) burst() int { return max(ls.Burst, 1) }

// interval is the time one token of the rate takes to come.
func (ls *limitState) interval() time.Duration {
	return time.Duration(float64(ls.Per) / float64(ls.Rate))
}

// tokens is how many tokens the rate's bucket holds at now.
func (ls *limitState) tokens(now time.Time) float64 {
	return min(float64(ls.burst())-float64(ls.tat.Sub(now))/float64(ls.interval()), float64(ls.burst()))
}

// takeToken takes a token of the rate at now. A release up to one interval after its token
// came keeps the schedule (tat moves one interval on from where it was): the release of a job
// waiting for a token comes a little after it (the loop's timer, other work), and counting the
// next token from the release instead would lose that time on every token, so a backlog would
// run below its rate (174 of 200/s with a burst of 1, weave bench limits). The price: in a
// window the starts may exceed burst + rate × window by a fraction of one. After a longer
// pause the bucket is full and counts from now.
func (ls *limitState) takeToken(now time.Time) {
	iv := ls.interval()
	if now.Sub(ls.tat) >= iv {
		ls.tat = now
	}
	ls.tat = ls.tat.Add(iv)
}

// room is how many more jobs the limit lets start now: none while it is paused.
func (ls *limitState) room(now time.Time) int {
	if ls.Paused {
		return 0
	}
	n := math.MaxInt
	if ls.Concurrency > 0 {
		n = max(ls.Concurrency-ls.running, 0)
	}
	if ls.Rate > 0 {
		n = min(n, max(int(math.Floor(ls.tokens(now))), 0))
	}
	return n
}

// holdingBack returns the first of the limits that does not let one more job start now, or nil.
func holdingBack(ls []*limitState, now time.Time) *limitState {
	for _, l := range ls {
		if l.room(now) < 1 {
			return l
		}
	}
	return nil
}

// use counts a job of g released under ls.
func (ls *limitState) use(g *group) {
	ls.running++
	if ls.runningBy == nil {
		ls.runningBy = map[*group]int{}
	}
	ls.runningBy[g]++
}

// useLimits counts a job of g released at now under its limits.
func useLimits(ls []*limitState, g *group, now time.Time) {
	for _, l := range ls {
		l.use(g)
		if l.Rate > 0 {
			l.takeToken(now)
		}
	}
}

// freeLimits counts a job whose attempt ended out of its limits, and offers the jobs they held
// back again as far as they now have room.
func (e *Engine) freeLimits(j *job) {
	if len(e.limits.byKey) == 0 {
		return
	}
	now := e.cfg.now()
	for _, ls := range e.limitsOf(nil, j.id, j.g.id) {
		ls.running = max(ls.running-1, 0)
		if ls.runningBy[j.g]--; ls.runningBy[j.g] <= 0 {
			delete(ls.runningBy, j.g)
		}
		e.wakeLimit(ls, now)
	}
}

// holdBack sets candidate c aside in the line of the limit that holds it back, and reports
// whether it did.
func (e *Engine) holdBack(c candidate, ls *limitState) bool {
	j := c.retry
	front := false
	if j == nil {
		if _, ok := e.sched.Drop(c.g); !ok {
			return false
		}
		j = &job{id: c.id, g: c.g, heapIdx: -1}
		e.jobs[j.id] = j
	} else {
		e.retries.ready = slices.DeleteFunc(e.retries.ready, func(r *job) bool { return r == j })
		front = j.offeredBy == ls
		unoffer(j)
	}
	j.prio = uint8(e.prio.of(j.id))
	ls.enqueue(j, front)
	return true
}

// dropEnded counts out of its limit's line a job that ended while the line held it (canceled, or
// its message vanished), or while it was offered again. The line drops it when it next comes to
// its group; a line that does not offer for long (a pause) is compacted once more than half of
// it has ended, so its ended jobs are not kept for the pause's length.
func dropEnded(j *job) {
	unoffer(j)
	ls := j.heldBy
	if ls == nil {
		return
	}
	ls.letGo(j)
	if ls.entries > 2*ls.held+64 {
		ls.entries = 0
		for g, q := range ls.line {
			ls.line[g] = slices.DeleteFunc(q, func(w *job) bool { return w.heldBy != ls })
			ls.entries += len(ls.line[g])
		}
	}
}

// wakeLimit offers again as many of the jobs ls holds back as it has room for, beyond those it
// offered already.
func (e *Engine) wakeLimit(ls *limitState, now time.Time) {
	if ls.held > 0 {
		e.offerAgain(ls, ls.room(now)-ls.offered)
	}
}

// offerAgain moves up to n of the jobs ls holds back to the front of new work: each the first
// of the group in line with the least load under ls (its jobs under ls running or offered, per
// unit of weight, as load counts in flight) and, among equals or under round robin, the groups
// in turn. So groups sharing a limit share it as they share the fleet, whatever order their
// jobs came to the line in. Jobs ended meanwhile are dropped from the line.
func (e *Engine) offerAgain(ls *limitState, n int) {
	for n > 0 && ls.held > 0 {
		j := ls.pop(e.nextInLine(ls))
		if st, _ := e.idx.State(j.id); st != jobindex.Pending || e.jobs[j.id] != j {
			continue
		}
		e.retries.ready = append(e.retries.ready, j)
		ls.countOffered(j)
		n--
	}
}

// nextInLine is the group whose job ls offers next (see offerAgain); ls holds some back.
func (e *Engine) nextInLine(ls *limitState) *group {
	lif := e.cfg.Policy == spreader.LeastInFlight
	best, bestLoad := 0, 0.0
	for i := range ls.order {
		k := (ls.next + i) % len(ls.order)
		if !lif {
			best = k
			break
		}
		g := ls.order[k]
		load := shareLoad(ls.runningBy[g]+ls.offeredBy[g], g)
		if i == 0 || load < bestLoad {
			best, bestLoad = k, load
		}
		if load == 0 {
			break // none is lower: with more groups in line than jobs under the limit, the scan stops early
		}
	}
	ls.next = best + 1
	return ls.order[best]
}

// pop takes the first job of g's queue that has not ended out of ls's line.
func (ls *limitState) pop(g *group) *job {
	q := ls.line[g]
	for {
		j := q[0]
		q[0] = nil
		q = q[1:]
		ls.entries--
		if j.heldBy == ls {
			ls.line[g] = q
			ls.letGo(j)
			return j
		}
	}
}

// refillLimits offers again the jobs held back by a rate that has tokens again.
func (e *Engine) refillLimits(now time.Time) {
	for _, ls := range e.limits.byKey {
		if ls.Rate > 0 {
			e.wakeLimit(ls, now)
		}
	}
}

// nextToken is when the next rate limit holding jobs back for want of a token has one again,
// or zero. A limit whose rate has a token holds them back for its concurrency: a job's end wakes
// those (freeLimits).
func (l *limits) nextToken(now time.Time) time.Time {
	var next time.Time
	for _, ls := range l.byKey {
		if ls.Rate == 0 || ls.held == 0 || ls.Paused { // a token lets none of them go
			continue
		}
		at := ls.tat.Add(-time.Duration(ls.burst()-1) * ls.interval()) // one token then
		if at.After(now) && (next.IsZero() || at.Before(next)) {
			next = at
		}
	}
	return next
}

// recountLimits counts every limit's running jobs again: after replay rebuilt the jobs in flight.
func (e *Engine) recountLimits() {
	for _, ls := range e.limits.byKey {
		e.countRunning(ls)
	}
}
