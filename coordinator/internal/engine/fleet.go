package engine

import (
	"fmt"
	"slices"
	"time"

	"github.com/weavejobs/weave/internal/jobindex"
	"github.com/weavejobs/weave/internal/wire"
)

// fleet is the engine's part that owns the workers and their pools, as heartbeats tell them,
// and the fleet's busy share, which sizes the prefetch window. Owned by the loop.
type fleet struct {
	pools     map[string]*pool
	poolOrder []*pool // stable iteration order; rotated for fairness between pools
	workers   map[string]*workerInfo
	slots     int              // total slots of live workers
	busy      float64          // the fleet's busy share without waiting (see learnBusy); sizes the prefetch window
	learnedBy map[string]*pool // the pool that learned each resource
}

// pool is the set of live workers holding the same resources. They share one work subject and
// one durable consumer, so the coordinator releases to the pool and any of its workers takes it.
// Owned by the loop, through fleet.pools; running jobs point at their pool.
type pool struct {
	key         string
	resources   []string
	held        *jobindex.ResourceSet // its resources and those it learned, compiled
	learned     map[string]time.Time  // resources it learned, until when
	slots       int                   // total concurrency of the pool's live workers
	busy        float64               // its busy share without waiting, as the fleet's (see learnBusy)
	outstanding int                   // jobs released to the pool and not yet reported
	workers     int
	// orphanSince is when the pool was last left without live workers (or first seen, during
	// replay, before any heartbeat). Jobs released to an orphaned pool are rescued once it has
	// stayed so for Config.RescueAfter (see orphans).
	orphanSince time.Time
	// lastRelease is when jobs were last released to the pool (see lost).
	lastRelease time.Time
}

// workerInfo is what the coordinator knows of one worker, from its heartbeats. Owned by the
// loop, through fleet.workers.
type workerInfo struct {
	hb       wire.Heartbeat
	pool     *pool
	slots    int // slots it contributes: its concurrency, or 0 while it drains
	lastSeen time.Time
	// quietSince is since when its heartbeats say it runs nothing and holds no batch (zero
	// otherwise, and for a worker whose heartbeats do not say what it holds): see lost.
	quietSince time.Time
	// inbox is where its heartbeats ask for answers: its run listens there while it lives (see
	// run.probe).
	inbox string
}

// Heartbeat applies a worker heartbeat received on subject, after checkHeartbeat. It returns a
// refusal, empty if the heartbeat was applied (see checkHeartbeat).
func (e *Engine) Heartbeat(subject string, hb wire.Heartbeat, now time.Time) Refusal {
	if ref := e.CheckHeartbeat(subject, hb, now); ref.Reason != "" {
		return ref
	}
	w := e.fleet.workers[hb.Worker]
	if hb.Stopped {
		if w != nil {
			e.dropWorker(w, now)
		}
		return Refusal{}
	}
	if w == nil {
		p := e.poolFor(hb.Pool, hb.Resources)
		w = &workerInfo{pool: p}
		e.fleet.workers[hb.Worker] = w
		p.workers++
		if p.workers == 1 {
			p.orphanSince = time.Time{}
			e.retries.unpark() // the pool may hold what parked jobs require
		}
		e.log.Info().Str("worker", hb.Worker).Str("pool", p.key).Strs("resources", hb.Resources).Int("concurrency", hb.Concurrency).Msg("worker joined")
	} else {
		w.pool.slots -= w.slots
		e.fleet.slots -= w.slots
	}
	w.hb, w.lastSeen, w.slots = hb, now, hb.Concurrency
	if hb.Busy == 0 && hb.Held != nil && *hb.Held == 0 && !hb.Draining {
		if w.quietSince.IsZero() {
			w.quietSince = now
		}
	} else {
		w.quietSince = time.Time{}
	}
	if hb.Draining {
		w.slots = 0 // it takes no more work: release nothing more to it
	}
	w.pool.slots += w.slots
	e.fleet.slots += w.slots
	e.resizeFeeders()
	return Refusal{}
}

// Refusal is why a heartbeat or a join was refused, and for a worker ID held by another live
// run, how long that run may stay silent before it is forgotten (wire.HeartbeatReply.RetryMS).
type Refusal struct {
	Reason string
	Retry  time.Duration
}

// CheckHeartbeat decides whether a heartbeat (or a join, which is a heartbeat asking for an
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
func (e *Engine) CheckHeartbeat(subject string, hb wire.Heartbeat, now time.Time) Refusal {
	ref := e.heartbeatRefusal(subject, hb, now)
	if ref.Reason != "" {
		e.RefuseHeartbeat(subject, ref.Reason)
	}
	return ref
}

// RefuseHeartbeat records a refused heartbeat (core NATS: no stream sequence) and counts it.
func (e *Engine) RefuseHeartbeat(subject, reason string) Refusal {
	e.stats.RejectedHeartbeats++
	e.Reject(subject, 0, reason)
	return Refusal{Reason: reason}
}

func (e *Engine) heartbeatRefusal(subject string, hb wire.Heartbeat, now time.Time) Refusal {
	pool, worker, ok := e.names.ParseHeartbeatSubject(subject)
	if !ok {
		pool, worker, ok = e.names.ParseJoinSubject(subject)
	}
	switch {
	case !ok:
		return Refusal{Reason: fmt.Sprintf("heartbeat on %s, not a worker's heartbeat or join subject", subject)}
	case worker != hb.Worker || pool != hb.Pool:
		return Refusal{Reason: fmt.Sprintf("heartbeat of worker %q of pool %s on the subject of worker %q of pool %s", hb.Worker, hb.Pool, worker, pool)}
	}
	if p := e.fleet.pools[hb.Pool]; p != nil && p.resources != nil && !slices.Equal(p.resources, wire.NormalizeResources(hb.Resources)) {
		return Refusal{Reason: fmt.Sprintf("heartbeat of worker %q claims resources %v for pool %s, which holds %v", hb.Worker, hb.Resources, hb.Pool, p.resources)}
	}
	if w := e.fleet.workers[hb.Worker]; w != nil && w.hb.Run != hb.Run {
		silent := time.Duration(e.cfg.HeartbeatMisses) * w.hb.Interval()
		return Refusal{
			Reason: fmt.Sprintf("worker ID %q is in use by another running worker (pool %s, last heartbeat %v ago); give each worker its own ID",
				hb.Worker, w.pool.key, now.Sub(w.lastSeen).Round(time.Millisecond)),
			Retry: max(w.lastSeen.Add(silent).Sub(now), time.Millisecond),
		}
	}
	if w := e.fleet.workers[hb.Worker]; w != nil && w.pool.key != hb.Pool {
		return Refusal{Reason: fmt.Sprintf("heartbeat of worker %q for pool %s, but this run of it is in pool %s", hb.Worker, hb.Pool, w.pool.key)}
	}
	return Refusal{}
}

func (e *Engine) dropWorker(w *workerInfo, now time.Time) {
	delete(e.fleet.workers, w.hb.Worker)
	w.pool.workers--
	if w.pool.workers == 0 {
		w.pool.orphanSince = now
	}
	w.pool.slots -= w.slots
	e.fleet.slots -= w.slots
	e.log.Info().Str("worker", w.hb.Worker).Str("pool", w.pool.key).Msg("worker left")
	e.resizeFeeders()
}

// HeardFrom notes where the run of an applied heartbeat listens (the heartbeat's reply subject).
func (e *Engine) HeardFrom(hb wire.Heartbeat, inbox string) {
	if w := e.fleet.workers[hb.Worker]; w != nil && w.hb.Run == hb.Run {
		w.inbox = inbox
	}
}

// OtherRun returns the run holding hb's worker ID if it is not hb's, and where it listens ("" if
// its heartbeats named no inbox, or no other run holds the ID).
func (e *Engine) OtherRun(hb wire.Heartbeat) (inbox, run string) {
	if w := e.fleet.workers[hb.Worker]; w != nil && w.hb.Run != hb.Run {
		return w.inbox, w.hb.Run
	}
	return "", ""
}

// ForgetRun forgets worker id if run still holds it: nobody listens on its inbox any more.
func (e *Engine) ForgetRun(id, run string, now time.Time) {
	if w := e.fleet.workers[id]; w != nil && w.hb.Run == run {
		e.mx.workerLost(id)
		e.dropWorker(w, now)
	}
}

// expireWorkers forgets workers silent for HeartbeatMisses periods.
func (e *Engine) expireWorkers(now time.Time) {
	for _, w := range e.fleet.workers {
		if now.Sub(w.lastSeen) > time.Duration(e.cfg.HeartbeatMisses)*w.hb.Interval() {
			e.mx.workerLost(w.hb.Worker)
			e.dropWorker(w, now)
		}
	}
}

// orphans returns the keys of the pools whose jobs the coordinator must take back: pools that
// have had no live worker for at least Config.RescueAfter and still hold released jobs. Nobody
// consumes their work subject, so without a rescue those jobs would wait for a worker with the
// very same resources. The rescue returns each job with a returned report, as a draining
// worker does (or a lapsed one, if a dead worker had taken it), and the job goes to another pool
// (or is parked until a holder of what it requires joins).
func (f *fleet) orphans(now time.Time, rescueAfter time.Duration) []string {
	var keys []string
	for _, p := range f.poolOrder {
		if p.workers == 0 && p.outstanding > 0 && now.Sub(p.orphanSince) >= rescueAfter {
			keys = append(keys, p.key)
		}
	}
	return keys
}

// lost returns the pools whose released jobs are in batches lost in delivery: every live worker
// of the pool has said, in every heartbeat since lostAfter after the last release to the pool
// (and in one received after half that), that it runs nothing and holds no batch, while jobs
// released to the pool are still unreported. A batch the server delivered to a connection that
// was cut (a node lost with it, a network path gone) never arrives; JetStream counts it
// delivered and sends it again only when its lease runs out. Workers that hold nothing and pull
// for every slot would have taken any batch still waiting, so what the pool owes is in such
// batches.
func (f *fleet) lost(now time.Time, lostAfter time.Duration) []string {
	var owing map[*pool]bool // pools that owe jobs and released none for lostAfter: usually none
	for _, p := range f.poolOrder {
		if p.outstanding > 0 && p.workers > 0 && now.Sub(p.lastRelease) >= lostAfter {
			if owing == nil {
				owing = map[*pool]bool{}
			}
			owing[p] = true
		}
	}
	if owing == nil {
		return nil
	}
	for _, w := range f.workers { // one pass: a worker not quiet long enough clears its pool
		p := w.pool
		if owing[p] && (w.quietSince.IsZero() || now.Sub(w.quietSince) < lostAfter || w.lastSeen.Sub(p.lastRelease) < lostAfter/2) {
			owing[p] = false
		}
	}
	var keys []string
	for _, p := range f.poolOrder {
		if owing[p] {
			keys = append(keys, p.key)
		}
	}
	return keys
}

// poolFor returns the pool of key, created with resources if it is new.
func (e *Engine) poolFor(key string, resources []string) *pool {
	if p := e.fleet.pools[key]; p != nil {
		if p.resources == nil && len(resources) > 0 {
			// First seen in the journal during replay, before any heartbeat told its resources.
			p.resources = wire.NormalizeResources(resources)
			p.held = e.idx.Compile(p.resources)
		}
		return p
	}
	rs := wire.NormalizeResources(resources)
	p := &pool{key: key, resources: rs, held: e.idx.Compile(rs), orphanSince: e.cfg.now(), busy: 1}
	e.fleet.pools[key] = p
	e.fleet.poolOrder = append(e.fleet.poolOrder, p)
	return p
}

// resizeFeeders sets the scheduler's feeder slots to the fleet's, unless configured.
func (e *Engine) resizeFeeders() {
	if e.cfg.Feeders == 0 {
		if f := e.fleet.feeders(&e.cfg); f != e.sched.Feeders() {
			e.sched.SetFeeders(f)
		}
	}
}

// maxPrefetchPerSlot caps the adaptive prefetch window at this many places per slot. With
// very short jobs on few slots the window is the throughput (released jobs ÷ the release round
// trip), so a low cap limits it; above 16 the process is CPU-bound and a larger cap gains nothing.
const maxPrefetchPerSlot = 16

// prefetch is how many released jobs the fleet may hold beyond its slots. Fixed when configured;
// by default it adapts to the jobs: a slot is busy a share b of the time between a release and
// the report (the rest is round trips), so keeping it fed needs about slots·(1/b − 1) jobs
// waiting. Short jobs get a deep window, long ones about one. With Feeders set, the window stays
// within Feeders − slots, so groups stay spread.
func (f *fleet) prefetch(cfg *Config) int {
	switch {
	case cfg.Prefetch > 0:
		return cfg.Prefetch
	case cfg.Prefetch < 0:
		return 0
	}
	limit := max(1, maxPrefetchPerSlot*f.slots)
	p := 1
	if f.busy < 1 {
		// Computed in floats and capped before the conversion: busy may be tiny.
		p = int(min(float64(f.slots)*(1/max(f.busy, 1e-9)-1)+0.5, float64(limit)))
	}
	p = min(max(p, 1), limit)
	if cfg.Feeders > 0 {
		p = min(p, max(cfg.Feeders-f.slots, 0))
	}
	return p
}

// maxAheadBusy is the highest busy share of a pool at which, by default, its work batches may
// carry jobs beyond the slots of the worker that takes them (see aheadPerSlot).
const maxAheadBusy = 0.5

// aheadPerSlot is how many prefetched jobs per slot a work batch for p may carry beyond one
// worker's share of its slots (Config.QueueAhead). They wait in that worker's queue and start
// as its slots free, without a pull, and report with the jobs ahead of them: a worker of one or
// two slots otherwise costs a stored work message, a pull and a report message per one or two
// jobs. By default a batch may then hold about aheadBatch jobs: one per slot beyond the share for
// workers of aheadBatch/2 slots or more, 15 per slot for workers of one. A job waiting there is
// not taken by another worker that falls idle, so by default it is done only while the pool's
// handlers run at most half of a release's round trip (short jobs, where the messages are most
// of the cost and the wait behind the jobs ahead is short). The pool's share, not the fleet's: a
// pool of long jobs beside one of many short ones keeps its jobs where any of its workers takes
// them.
func aheadPerSlot(cfg *Config, p *pool) int {
	switch {
	case cfg.QueueAhead != 0:
		return max(cfg.QueueAhead, 0)
	case p.busy <= maxAheadBusy && p.workers > 0:
		share := max(1, (p.slots+p.workers-1)/p.workers) // no slots: its workers drain
		return max(1, aheadBatch/share-1)
	}
	return 0
}

// aheadBatch is the work batch that queue-ahead fills by default: about where a batch's work
// message, pull and report stop being a large share of its jobs' cost (BENCHMARKS.md, fleet).
const aheadBatch = 16

// feeders is the number of feeder slots: configured, or the live slots plus the prefetch window
// (at least one), so released jobs fit in F and groups stay spread.
func (f *fleet) feeders(cfg *Config) int {
	if cfg.Feeders == 0 {
		return max(f.slots+max(f.prefetch(cfg), 1), 1)
	}
	return cfg.Feeders
}

// lostAfter is how long a pool must stay quiet while owing jobs before they are taken back:
// three heartbeats at the default interval, so a batch on its way to a worker that was quiet
// shows in a heartbeat (busy or held) first.
const lostAfter = 3 * time.Second
