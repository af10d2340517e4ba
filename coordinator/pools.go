package coordinator

import (
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weavejobs/weave/spreader"

	"github.com/weavejobs/weave/internal/jobindex"
	"github.com/weavejobs/weave/internal/wire"
)

// pool is the set of live workers holding the same resources. They share one work subject and
// one durable consumer, so the coordinator releases to the pool and any of its workers takes it.
type pool struct {
	key         string
	resources   []string
	held        *jobindex.ResourceSet
	slots       int // total concurrency of the pool's live workers
	outstanding int // jobs released to the pool and not yet reported
	workers     int
	// orphanSince is when the pool was last left without live workers (or first seen, during
	// replay, before any heartbeat). Jobs released to an orphaned pool are rescued once it has
	// stayed so for Config.RescueAfter (see orphans).
	orphanSince time.Time
}

// free is how many more jobs the pool may be given, counting prefetch places or not.
func (p *pool) free(prefetch int) int {
	if p.workers == 0 {
		return 0
	}
	return p.slots + prefetch - p.outstanding
}

// batchCap is the most jobs one batch for the pool may hold: MaxBatch, and no more than one
// worker's share of the pool's slots, since one worker takes the whole batch.
func (p *pool) batchCap(maxBatch int) int {
	if p.workers == 0 {
		return 1
	}
	return max(1, min(maxBatch, (p.slots+p.workers-1)/p.workers))
}

// releasePass is one round of release decisions over all pools.
type releasePass struct {
	affinityOnly bool // only jobs requiring or preferring something the pool holds
	prefetch     bool // fill prefetch places too, not only free slots
}

// releasePasses: affinity first, so a job preferring r goes to a free holder of r when there
// is one; then any job a pool may run (fallback); then the prefetch places, last, so a job never
// queues behind a busy pool while another has a free slot.
var releasePasses = [...]releasePass{{affinityOnly: true}, {}, {prefetch: true}}

// workerInfo is what the coordinator knows of one worker, from its heartbeats.
type workerInfo struct {
	hb       wire.Heartbeat
	pool     *pool
	slots    int // slots it contributes: its concurrency, or 0 while it drains
	lastSeen time.Time
}

// heartbeatIn is a heartbeat or a join as the loop receives it, with the subjects it came on.
type heartbeatIn struct {
	subject, reply string
	hb             wire.Heartbeat
	join           bool   // a join: answer whether the worker may start, apply nothing
	err            string // the message is not a heartbeat: record the rejection
}

// subscribeHeartbeats hands heartbeats and joins to the loop (hbCh). Called by replay.
func (r *run) subscribeHeartbeats() error {
	for _, subject := range []string{r.names.AllHeartbeats(), r.names.AllJoins()} {
		sub, err := r.c.nc.Subscribe(subject, func(m *nats.Msg) {
			in := heartbeatIn{subject: m.Subject, reply: m.Reply}
			hb, err := wire.ParseHeartbeat(m.Data)
			if err != nil {
				in.err = err.Error()
			}
			// The subject, not the body, says whether it is a join.
			_, _, join := r.names.ParseJoinSubject(m.Subject)
			in.hb, in.join = hb, join
			select {
			case r.hbCh <- in:
			case <-r.done:
			default: // the loop is behind; the next heartbeat carries the same news
			}
		})
		if err != nil {
			return err
		}
		r.stop = append(r.stop, func() { _ = sub.Unsubscribe() })
	}
	return nil
}

// heartbeat applies a heartbeat, or answers a join, and answers a refusal on the message's reply
// subject. Workers send heartbeats with a reply subject to learn of a refusal (a coordinator
// that started after them found another run of their ID). Called by the loop.
func (r *run) heartbeat(in heartbeatIn) {
	now := r.cfg.now()
	var ref refusal
	switch {
	case in.err != "":
		ref = r.e.refuseHeartbeat(in.subject, in.err)
	case in.join:
		ref = r.e.checkHeartbeat(in.subject, in.hb, now)
	default:
		ref = r.e.heartbeat(in.subject, in.hb, now)
	}
	if in.reply == "" || ref.reason == "" && !in.join {
		return
	}
	reply := wire.HeartbeatReply{Refused: ref.reason}
	if ref.reason != "" {
		reply.RetryMS = ref.retry.Milliseconds()
	}
	if err := r.c.nc.Publish(in.reply, reply.Marshal()); err != nil {
		r.log.Warn().Err(err).Str("subject", in.subject).Msg("answering a heartbeat failed")
	}
}

// heartbeat applies a worker heartbeat received on subject, after checkHeartbeat. It returns a
// refusal, empty if the heartbeat was applied (see checkHeartbeat).
func (e *engine) heartbeat(subject string, hb wire.Heartbeat, now time.Time) refusal {
	if ref := e.checkHeartbeat(subject, hb, now); ref.reason != "" {
		return ref
	}
	w := e.workers[hb.Worker]
	if hb.Stopped {
		if w != nil {
			e.dropWorker(w, now)
		}
		return refusal{}
	}
	if w == nil {
		p := e.poolFor(hb.Pool, hb.Resources)
		w = &workerInfo{pool: p}
		e.workers[hb.Worker] = w
		p.workers++
		if p.workers == 1 {
			p.orphanSince = time.Time{}
			e.unpark() // the pool may hold what parked jobs require
		}
		e.log.Info().Str("worker", hb.Worker).Str("pool", p.key).Strs("resources", hb.Resources).Int("concurrency", hb.Concurrency).Msg("worker joined")
	} else {
		w.pool.slots -= w.slots
		e.slots -= w.slots
	}
	w.hb, w.lastSeen, w.slots = hb, now, hb.Concurrency
	if hb.Draining {
		w.slots = 0 // it takes no more work: release nothing more to it
	}
	w.pool.slots += w.slots
	e.slots += w.slots
	e.resizeFeeders()
	return refusal{}
}

// refusal is why a heartbeat or a join was refused, and for a worker ID held by another live
// run, how long that run may stay silent before it is forgotten (wire.HeartbeatReply.RetryMS).
type refusal struct {
	reason string
	retry  time.Duration
}

// checkHeartbeat decides whether a heartbeat (or a join, which is a heartbeat asking for an
// answer) may be applied. A worker's NATS permissions allow it to publish only on its own
// subjects, NS.hb.<pool>.<worker> and NS.api.join.<pool>.<worker> (see internal/auth), so the
// coordinator trusts a heartbeat only as far as its subject goes:
//
//   - the subject's pool and worker must be the body's, and the pool the key of the resources
//     the body claims (wire.ParseHeartbeat checked that): a worker cannot claim resources, nor
//     slots in a pool, that its permissions do not let it pull;
//   - a known pool keeps the resources it was first seen with: another set with the same key
//     (a crafted hash collision) is refused;
//   - a worker ID has one live run at a time: a heartbeat of another run (a second process
//     with the same ID) is refused, and tells how long the live run may stay silent before it
//     is forgotten (a worker restarted after a crash asks again after that).
//
// A refused heartbeat changes nothing; it is recorded in NS_REJECTED and counted.
func (e *engine) checkHeartbeat(subject string, hb wire.Heartbeat, now time.Time) refusal {
	ref := e.heartbeatRefusal(subject, hb, now)
	if ref.reason != "" {
		e.refuseHeartbeat(subject, ref.reason)
	}
	return ref
}

// refuseHeartbeat records a refused heartbeat (core NATS: no stream sequence) and counts it.
func (e *engine) refuseHeartbeat(subject, reason string) refusal {
	e.stats.RejectedHeartbeats++
	e.reject(subject, 0, reason)
	return refusal{reason: reason}
}

func (e *engine) heartbeatRefusal(subject string, hb wire.Heartbeat, now time.Time) refusal {
	pool, worker, ok := e.names.ParseHeartbeatSubject(subject)
	if !ok {
		pool, worker, ok = e.names.ParseJoinSubject(subject)
	}
	switch {
	case !ok:
		return refusal{reason: fmt.Sprintf("heartbeat on %s, not a worker's heartbeat or join subject", subject)}
	case worker != hb.Worker || pool != hb.Pool:
		return refusal{reason: fmt.Sprintf("heartbeat of worker %q of pool %s on the subject of worker %q of pool %s", hb.Worker, hb.Pool, worker, pool)}
	}
	if p := e.pools[hb.Pool]; p != nil && p.resources != nil && !slices.Equal(p.resources, wire.NormalizeResources(hb.Resources)) {
		return refusal{reason: fmt.Sprintf("heartbeat of worker %q claims resources %v for pool %s, which holds %v", hb.Worker, hb.Resources, hb.Pool, p.resources)}
	}
	if w := e.workers[hb.Worker]; w != nil && w.hb.Run != hb.Run {
		silent := time.Duration(e.cfg.HeartbeatMisses) * w.hb.Interval()
		return refusal{
			reason: fmt.Sprintf("worker ID %q is in use by another running worker (pool %s, last heartbeat %v ago); give each worker its own ID",
				hb.Worker, w.pool.key, now.Sub(w.lastSeen).Round(time.Millisecond)),
			retry: max(w.lastSeen.Add(silent).Sub(now), time.Millisecond),
		}
	}
	if w := e.workers[hb.Worker]; w != nil && w.pool.key != hb.Pool {
		return refusal{reason: fmt.Sprintf("heartbeat of worker %q for pool %s, but this run of it is in pool %s", hb.Worker, hb.Pool, w.pool.key)}
	}
	return refusal{}
}

func (e *engine) dropWorker(w *workerInfo, now time.Time) {
	delete(e.workers, w.hb.Worker)
	w.pool.workers--
	if w.pool.workers == 0 {
		w.pool.orphanSince = now
	}
	w.pool.slots -= w.slots
	e.slots -= w.slots
	e.log.Info().Str("worker", w.hb.Worker).Str("pool", w.pool.key).Msg("worker left")
	e.resizeFeeders()
}

// expireWorkers forgets workers silent for HeartbeatMisses periods.
func (e *engine) expireWorkers(now time.Time) {
	for _, w := range e.workers {
		if now.Sub(w.lastSeen) > time.Duration(e.cfg.HeartbeatMisses)*w.hb.Interval() {
			e.mx.workerLost(w.hb.Worker)
			e.dropWorker(w, now)
		}
	}
}

// orphans returns the keys of the pools whose jobs the coordinator must take back: pools that
// have had no live worker for at least Config.RescueAfter and still hold released jobs. Nobody
// consumes their work subject, so without a rescue those jobs would wait for a worker with the
// very same resources. The rescuer hands each job back with a released report, as a draining
// worker does (or a lost one, if a dead worker had taken it), and the job goes to another pool
// (or is parked until a holder of what it requires joins). See rescue.go.
func (e *engine) orphans(now time.Time) []string {
	var keys []string
	for _, p := range e.poolOrder {
		if p.workers == 0 && p.outstanding > 0 && now.Sub(p.orphanSince) >= e.cfg.RescueAfter {
			keys = append(keys, p.key)
		}
	}
	return keys
}

func (e *engine) poolFor(key string, resources []string) *pool {
	if p := e.pools[key]; p != nil {
		if p.resources == nil && len(resources) > 0 {
			// First seen in the journal during replay, before any heartbeat told its resources.
			p.resources = wire.NormalizeResources(resources)
			p.held = e.idx.Compile(p.resources)
		}
		return p
	}
	rs := wire.NormalizeResources(resources)
	p := &pool{key: key, resources: rs, held: e.idx.Compile(rs), orphanSince: e.cfg.now()}
	e.pools[key] = p
	e.poolOrder = append(e.poolOrder, p)
	return p
}

func (e *engine) resizeFeeders() {
	if e.cfg.Feeders == 0 {
		if f := e.feeders(); f != e.sched.Feeders() {
			e.sched.SetFeeders(f)
		}
	}
}

// maxPrefetchPerSlot caps the adaptive prefetch window at this many places per slot.
const maxPrefetchPerSlot = 4

// prefetch is how many released jobs the fleet may hold beyond its slots. Fixed when configured;
// by default it adapts to the jobs: a slot is busy a share b of the time between a release and
// the report (the rest is round trips), so keeping it fed needs about slots·(1/b − 1) jobs
// waiting. Short jobs get a deep window, long ones about one. With Feeders set, the window stays
// within Feeders − slots, so groups stay spread.
func (e *engine) prefetch() int {
	switch {
	case e.cfg.Prefetch > 0:
		return e.cfg.Prefetch
	case e.cfg.Prefetch < 0:
		return 0
	}
	limit := max(1, maxPrefetchPerSlot*e.slots)
	p := 1
	if e.busy < 1 {
		// Computed in floats and capped before the conversion: busy may be tiny.
		p = int(min(float64(e.slots)*(1/max(e.busy, 1e-9)-1)+0.5, float64(limit)))
	}
	p = min(max(p, 1), limit)
	if e.cfg.Feeders > 0 {
		p = min(p, max(e.cfg.Feeders-e.slots, 0))
	}
	return p
}

// feeders is the current number of feeder slots.
// feeders is the number of feeder slots: configured, or the live slots plus the prefetch window
// (at least one), so released jobs fit in F and groups stay spread.
func (e *engine) feeders() int {
	if e.cfg.Feeders == 0 {
		return max(e.slots+max(e.prefetch(), 1), 1)
	}
	return e.cfg.Feeders
}

// maxCandidates bounds how many offers one selection looks at.
const maxCandidates = 64

// candidate is a job offered for release: a retry, or the head of an active group.
type candidate struct {
	g     *group
	id    uint64
	retry *job // non-nil for a retry
}

// releaseAll releases jobs to every pool with free capacity, in the passes of releasePasses.
func (e *engine) releaseAll() {
	if e.replaying || len(e.poolOrder) == 0 {
		return
	}
	// Rotate the pool order so no pool always gets first pick.
	e.poolOrder = append(e.poolOrder[1:], e.poolOrder[0])
	batches := make(map[*pool][]*job)
	var cands []candidate
	var ids []uint64
	outstanding := 0
	for _, p := range e.poolOrder {
		outstanding += p.outstanding
	}
	e.resizeFeeders()
	window := e.prefetch()
	for _, pass := range releasePasses {
		prefetch := 0
		if pass.prefetch {
			prefetch = window
		}
		affinityOnly := pass.affinityOnly
		for _, p := range e.poolOrder {
			// Prefetch places are a budget for the whole fleet, not per pool: released jobs stay
			// within slots + Prefetch, which is F by default, so groups stay spread.
			for p.free(prefetch) > 0 && len(batches[p]) < p.batchCap(e.cfg.MaxBatch) && (!pass.prefetch || outstanding < e.slots+window) {
				cands, ids = e.candidates(cands[:0], ids[:0])
				if len(cands) == 0 {
					break
				}
				// Preference only breaks ties: it chooses among the least loaded groups, so a
				// group preferring what a pool holds cannot take all of its slots.
				id, m, ok := e.idx.Select(p.held, e.leastLoaded(cands, ids))
				if !ok && !affinityOnly {
					id, m, ok = e.idx.Select(p.held, ids) // nothing in the tier fits this pool
				}
				if !ok && !affinityOnly && e.parkUnplaceable(cands) {
					continue // the heads that blocked their groups are set aside: look again
				}
				if !ok || (affinityOnly && m == jobindex.MatchFallback) {
					break
				}
				c := cands[slices.Index(ids, id)]
				batches[p] = append(batches[p], e.take(c, p))
				outstanding++
				if len(batches[p]) == p.batchCap(e.cfg.MaxBatch) {
					e.flushBatch(p, batches)
				}
			}
		}
	}
	for _, p := range e.poolOrder {
		e.flushBatch(p, batches)
	}
}

func (e *engine) flushBatch(p *pool, batches map[*pool][]*job) {
	if b := batches[p]; len(b) > 0 {
		e.out.releases = append(e.out.releases, release{pool: p, jobs: b})
		batches[p] = nil
	}
}

// leastLoaded returns the IDs of the candidates whose group has the fewest jobs running as the
// handlers see them (in flight × busy share), in offer order, under LeastInFlight; under
// RoundRobin, whose order is the rotation, all of them. Groups with nothing in flight tie at
// zero, so with more groups than slots they are all in the tier. It reuses e.tierBuf.
func (e *engine) leastLoaded(cands []candidate, ids []uint64) []uint64 {
	if e.cfg.Policy != spreader.LeastInFlight {
		return ids
	}
	least := -1.0
	for _, c := range cands {
		if l := e.load(c.g); least < 0 || l < least {
			least = l
		}
	}
	e.tierBuf = e.tierBuf[:0]
	for _, c := range cands {
		if e.load(c.g) == least {
			e.tierBuf = append(e.tierBuf, c.id)
		}
	}
	return e.tierBuf
}

// load is a group's running jobs as the handlers see them: in flight × busy share. A group with
// nothing in flight is at 0 whatever its share, so it always comes first: a low share can never
// let a group with jobs in flight overtake one without (that would break the spread).
func (e *engine) load(g *group) float64 {
	n := e.sched.InFlight(g)
	if n == 0 {
		return 0
	}
	// At least a small floor per job, so any job in flight weighs more than none.
	return float64(n) * max(g.busy, minBusy)
}

// minBusy is the least busy share load counts a job in flight for.
const minBusy = 1e-3

// candidates lists the jobs on offer: retries first (oldest first), then the scheduler's offers
// in policy order.
func (e *engine) candidates(cands []candidate, ids []uint64) ([]candidate, []uint64) {
	for _, j := range e.retryReady {
		if len(cands) == maxCandidates {
			return cands, ids
		}
		if e.sched.Capped(j.g) {
			continue
		}
		cands = append(cands, candidate{g: j.g, id: j.id, retry: j})
		ids = append(ids, j.id)
	}
	first := len(cands)
	for g, id := range e.sched.Offers() {
		if len(cands) == maxCandidates {
			break
		}
		cands = append(cands, candidate{g: g, id: id})
		ids = append(ids, id)
	}
	if e.cfg.Policy == spreader.LeastInFlight {
		e.preferLeastRunning(cands[first:], ids[first:])
	}
	return cands, ids
}

// preferLeastRunning moves to the front the offer whose group has the fewest jobs running as the
// handlers see them (released × busy share). The scheduler counts released jobs; between a
// completion and the next release a slot is not running anything, which costs short jobs a larger
// share of their slots than long ones, so raw counts favour groups with long jobs.
func (e *engine) preferLeastRunning(cands []candidate, ids []uint64) {
	best, bestLoad := -1, 0.0
	for i, c := range cands {
		load := e.load(c.g)
		if best < 0 || load < bestLoad {
			best, bestLoad = i, load
		}
	}
	if best > 0 {
		c, id := cands[best], ids[best]
		copy(cands[1:best+1], cands[:best])
		copy(ids[1:best+1], ids[:best])
		cands[0], ids[0] = c, id
	}
}

// take moves a chosen candidate to running in pool p.
func (e *engine) take(c candidate, p *pool) *job {
	j := c.retry
	if j != nil {
		e.retryReady = slices.DeleteFunc(e.retryReady, func(r *job) bool { return r == j })
		j.counted = e.sched.Begin(j.g)
	} else {
		got, _ := e.sched.Take(c.g)
		if got != c.id {
			e.log.Error().Uint64("want", c.id).Uint64("got", got).Msg("scheduler head changed under selection")
		}
		j = &job{id: c.id, g: c.g, counted: true}
		e.mx.released(c.id, e.cfg.now())
		e.jobs[j.id] = j
	}
	if !j.reuse {
		j.attempt++
	}
	j.reuse = false
	j.pool, j.since = p, e.cfg.now()
	j.evSeq = 0 // its latest attempt is in WORK from now on: no report is needed
	p.outstanding++
	e.mustMove(j.id, jobindex.Running)
	e.stats.Released++
	return j
}

// parkUnplaceable sets aside the candidates that no live pool can run, so a job requiring a
// resource nobody holds waits (pending, counted per resource in status) without blocking the
// rest of its group. It reports whether it parked any.
func (e *engine) parkUnplaceable(cands []candidate) bool {
	parked := false
	for _, c := range cands {
		if e.placeable(c.id) {
			continue
		}
		j := c.retry
		if j == nil {
			if _, ok := e.sched.Drop(c.g); !ok {
				continue
			}
			j = &job{id: c.id, g: c.g, heapIdx: -1}
			e.jobs[j.id] = j
		} else {
			e.retryReady = slices.DeleteFunc(e.retryReady, func(r *job) bool { return r == j })
		}
		e.parked = append(e.parked, j)
		parked = true
	}
	return parked
}

// placeable reports whether some live pool holds every resource the job requires.
func (e *engine) placeable(id uint64) bool {
	one := []uint64{id}
	for _, p := range e.poolOrder {
		if p.workers > 0 {
			if _, _, ok := e.idx.Select(p.held, one); ok {
				return true
			}
		}
	}
	return false
}

// unpark offers the parked jobs again, ahead of new work; those still unplaceable are parked
// again by the next release decision.
func (e *engine) unpark() {
	e.retryReady = append(e.retryReady, e.parked...)
	e.parked = nil
}
