package coordinator

import (
	"context"
	"math"
	"slices"
	"time"

	"github.com/weavejobs/weave/internal/jobindex"
	"github.com/weavejobs/weave/internal/wire"
)

// limits is the engine's part that owns the limits per resource and per group ID (stored in the
// LIMITS stream, one message per limit) and what each has in use. A job is under the limit of
// its group ID and those of every resource it requires or prefers; it is released only when all
// of them allow it, and only to a free slot, never to a prefetch place (so it starts when it is
// released). A job that a limit holds back is set aside in that limit's line, outside the
// scheduler, so it holds no feeder slot and blocks neither its group's other jobs nor other
// groups; when the limit has room again (a job under it ends, or its rate gives a token) the
// first in its line are offered again, ahead of new work. Owned by the loop.
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
	running int            // jobs under it released and not reported
	tat     time.Time      // the rate's theoretical arrival time (see limits)
	waiting []*job         // jobs it holds back, first come first; ended ones are skipped
	held    int            // of them, those not ended: what status and metrics count (see dropEnded)
	byGroup map[*group]int // held, per group: what weave group says holds it back
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
	}
}

// setLimit applies a limit read from the LIMITS stream: a new or changed limit, or a removal.
func (e *engine) setLimit(l wire.Limit, now time.Time) {
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
			e.offerAgain(ls, len(ls.waiting)) // each is held back again if another limit says so
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
func (e *engine) countRunning(ls *limitState) {
	ls.running = 0
	var buf []*limitState
	for _, j := range e.jobs {
		if j.pool == nil {
			continue
		}
		buf = e.limitsOf(buf[:0], j.id, j.g)
		if slices.Contains(buf, ls) {
			ls.running++
		}
	}
}

// limitsOf appends to dst the limits job id of g is under.
func (e *engine) limitsOf(dst []*limitState, id uint64, g *group) []*limitState {
	if len(e.limits.byKey) == 0 {
		return dst
	}
	if ls := e.limits.byKey[limitKey{wire.LimitGroup, g.id}]; ls != nil {
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

// useLimits counts a job released at now under its limits.
func useLimits(ls []*limitState, now time.Time) {
	for _, l := range ls {
		l.running++
		if l.Rate > 0 {
			l.takeToken(now)
		}
	}
}

// freeLimits counts a job whose attempt ended out of its limits, and offers the jobs they held
// back again as far as they now have room.
func (e *engine) freeLimits(j *job) {
	if len(e.limits.byKey) == 0 {
		return
	}
	now := e.cfg.now()
	for _, ls := range e.limitsOf(nil, j.id, j.g) {
		ls.running = max(ls.running-1, 0)
		e.wakeLimit(ls, now)
	}
}

// holdBack sets candidate c aside in the line of the limit that holds it back, and reports
// whether it did.
func (e *engine) holdBack(c candidate, ls *limitState) bool {
	j := c.retry
	if j == nil {
		if _, ok := e.sched.Drop(c.g); !ok {
			return false
		}
		j = &job{id: c.id, g: c.g, heapIdx: -1}
		e.jobs[j.id] = j
	} else {
		e.retries.ready = slices.DeleteFunc(e.retries.ready, func(r *job) bool { return r == j })
	}
	ls.waiting = append(ls.waiting, j)
	ls.hold(j)
	return true
}

// dropEnded counts out of its limit's line a job that ended while the line held it (canceled, or
// its message vanished). The line drops it when it next offers its jobs; a line that does not
// offer for long (a pause) is compacted once more than half of it has ended, so its ended jobs
// are not kept for the pause's length.
func dropEnded(j *job) {
	ls := j.heldBy
	if ls == nil {
		return
	}
	ls.letGo(j)
	if len(ls.waiting) > 2*ls.held+64 {
		ls.waiting = slices.DeleteFunc(ls.waiting, func(w *job) bool { return w.heldBy != ls })
	}
}

// wakeLimit offers again as many of the jobs ls holds back as it has room for.
func (e *engine) wakeLimit(ls *limitState, now time.Time) {
	if len(ls.waiting) > 0 {
		e.offerAgain(ls, ls.room(now))
	}
}

// offerAgain moves up to n of the jobs ls holds back to the front of new work, first come first;
// jobs canceled meanwhile are dropped from its line.
func (e *engine) offerAgain(ls *limitState, n int) {
	i := 0
	for ; i < len(ls.waiting) && n > 0; i++ {
		j := ls.waiting[i]
		if j.heldBy != ls {
			continue // ended since (dropEnded counted it out)
		}
		ls.letGo(j)
		if st, _ := e.idx.State(j.id); st != jobindex.Pending || e.jobs[j.id] != j {
			continue
		}
		e.retries.ready = append(e.retries.ready, j)
		n--
	}
	ls.waiting = ls.waiting[i:]
}

// refillLimits offers again the jobs held back by a rate that has tokens again.
func (e *engine) refillLimits(now time.Time) {
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
		if ls.Rate == 0 || len(ls.waiting) == 0 || ls.Paused { // a token lets none of them go
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
func (e *engine) recountLimits() {
	for _, ls := range e.limits.byKey {
		e.countRunning(ls)
	}
}

// followLimits reads the namespace's limits into the engine, then follows the LIMITS stream:
// later changes reach the loop on limitsCh. Replay calls it first, so the limits hold from the
// first release of the term.
func (r *run) followLimits(ctx context.Context) error {
	var (
		last uint64
		err  error
	)
	r.limits, last, err = r.follow(ctx, r.names.LimitsStream(), r.limitsCh)
	if err != nil {
		return err
	}
	return drainUntil(ctx, r.limitsCh, last, r.applyLimit)
}

func (r *run) applyLimit(m streamMsg) {
	s := seq(m)
	if !r.limits.fresh(m, s) {
		return
	}
	r.e.limits.applied = max(r.e.limits.applied, s)
	l, err := r.names.ParseLimit(m.Subject(), m.Data())
	if err != nil {
		r.e.reject(m.Subject(), s, err.Error())
		return
	}
	r.e.setLimit(l, r.cfg.now())
}
