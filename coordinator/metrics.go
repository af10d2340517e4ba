package coordinator

import (
	"slices"
	"sort"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/weavejobs/weave/internal/jobindex"
	"github.com/weavejobs/weave/internal/wire"
)

// Metrics (see docs/operating.md, "Metrics").
//
// Ownership: the engine's state belongs to the loop goroutine, so a scrape never reads it.
// The loop counts on its own (loopMetrics: plain integers, no atomics on the per-job path) and,
// every tick (250ms), publishes an immutable metricsSnapshot through an atomic pointer on the
// Coordinator; Collect reads only that snapshot.

// maxGroupMetrics bounds the groups with their own series in weave_group_jobs: the first
// open groups in arrival order. Groups beyond it have no series of their own (they are in the
// per-state totals, and weave_groups_unlisted counts them), so a flood of groups cannot blow up
// the scrape or Prometheus.
const maxGroupMetrics = 50

// maxResourceMetrics bounds the resources with series in weave_resource_jobs, as groups.
const maxResourceMetrics = 100

// numStates is the number of job states (jobindex.AllStates).
var numStates = len(jobindex.AllStates())

// secondsBuckets are the histograms' buckets: 1ms to 1h.
var secondsBuckets = []float64{.001, .005, .01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

// hist is a histogram owned by one goroutine: observing costs a short search and two adds.
type hist struct {
	counts []uint64 // per bucket of secondsBuckets, not cumulative; one more for +Inf
	sum    float64
	n      uint64
}

func (h *hist) observe(d time.Duration) {
	if h.counts == nil {
		h.counts = make([]uint64, len(secondsBuckets)+1)
	}
	s := d.Seconds()
	h.counts[sort.SearchFloat64s(secondsBuckets, s)]++
	h.sum += s
	h.n++
}

func (h hist) clone() hist {
	h.counts = slices.Clone(h.counts)
	return h
}

func (h hist) metric(d *prometheus.Desc) prometheus.Metric {
	cum := make(map[float64]uint64, len(secondsBuckets))
	var c uint64
	for i, b := range secondsBuckets {
		if h.counts != nil {
			c += h.counts[i]
		}
		cum[b] = c
	}
	return prometheus.MustNewConstHistogram(d, h.n, h.sum, cum)
}

// seqAt is a JOBS sequence and the time the server stored it.
type seqAt struct {
	seq uint64
	at  time.Time
}

// loopMetrics are the counts the loop keeps for metrics and alarms. Owned by the loop (a
// field of the engine).
type loopMetrics struct {
	// moves[from][to] counts state transitions; admissions count as entering pending (admitted).
	moves    [8][8]uint64
	wait     hist // stored → first release
	run      hist // handler run time, from reports
	arrivals []seqAt
	// lastReport is each worker's latest report (for worker_stuck), pruned each tick.
	lastReport map[string]time.Time
	lost       []string // workers whose heartbeats lapsed since the last tick
	alarms     *alarms
	// oldestPending is when the oldest pending job was stored, as of the latest tick (zero
	// when none is pending): status shows it.
	oldestPending time.Time
}

// arrivalResolution spaces the samples of arrivals: queue wait and the oldest pending job's
// age are known to about this much.
const arrivalResolution = 10 * time.Millisecond

// maxArrivals bounds arrivals; past it every other sample is dropped (coarser, same span).
const maxArrivals = 1 << 14

// stored notes that JOBS sequence seq was stored at t (called for each admitted job).
func (m *loopMetrics) stored(seq uint64, t time.Time) {
	if n := len(m.arrivals); n > 0 && t.Sub(m.arrivals[n-1].at) < arrivalResolution {
		return
	}
	if len(m.arrivals) >= maxArrivals {
		half := m.arrivals[:0]
		for i := 0; i < len(m.arrivals); i += 2 {
			half = append(half, m.arrivals[i])
		}
		m.arrivals = half
	}
	m.arrivals = append(m.arrivals, seqAt{seq, t})
}

// storedTime is about when job id was stored (no later than it), or zero if unknown.
func (m *loopMetrics) storedTime(id uint64) time.Time {
	seq := wire.JobSeq(id)
	i := sort.Search(len(m.arrivals), func(i int) bool { return m.arrivals[i].seq > seq })
	if i == 0 {
		return time.Time{}
	}
	return m.arrivals[i-1].at
}

// moved counts a state transition.
func (m *loopMetrics) moved(from, to jobindex.State) { m.moves[from][to]++ }

// released observes the queue wait of a job released for the first time, pending since at.
func (m *loopMetrics) released(at, now time.Time) {
	if !at.IsZero() {
		m.wait.observe(now.Sub(at))
	}
}

// reported observes an attempt's run time and the worker's latest report.
func (m *loopMetrics) reported(worker string, ran time.Duration, now time.Time) {
	if ran > 0 {
		m.run.observe(ran)
	}
	if m.lastReport == nil {
		m.lastReport = map[string]time.Time{}
	}
	m.lastReport[worker] = now
}

// workerLost notes a worker whose heartbeats lapsed.
func (m *loopMetrics) workerLost(id string) { m.lost = append(m.lost, id) }

// metricsSnapshot is what a scrape reads: immutable once published.
type metricsSnapshot struct {
	epoch         uint64
	states        []uint64 // per jobindex state
	entered       []uint64 // per state: jobs that entered it (admissions into pending included)
	left          []uint64 // per state
	totals        Totals
	wait, run     hist
	groups        []groupSnap
	groupsActive  int
	groupsWaiting int
	resources     []ResourceStatus
	limits        []LimitStatus
	pools         []PoolStatus
	workers       []WorkerStatus
	oldestAge     time.Duration // of the oldest pending job; 0 if none
	slots         int
	alarms        []Alarm
}

type groupSnap struct {
	id       string
	jobs     jobindex.Counts
	inFlight int
}

// coordMetrics is the Coordinator's side: the latest snapshot and the lease figures, which
// outlive a term. Written by Run and the loop, read by Collect.
type coordMetrics struct {
	snap      atomic.Pointer[metricsSnapshot] // nil while not leading
	held      atomic.Bool
	epoch     atomic.Uint64
	acquired  atomic.Uint64 // lease acquisitions: terms started
	lostLease atomic.Uint64 // terms that ended with an error (lease lost, stall)
}

// termStarted and termEnded bracket a term (see Run).
func (m *coordMetrics) termStarted(epoch uint64) {
	m.held.Store(true)
	m.epoch.Store(epoch)
	m.acquired.Add(1)
}

func (m *coordMetrics) termEnded(err error) {
	m.held.Store(false)
	m.snap.Store(nil)
	if err != nil {
		m.lostLease.Add(1)
	}
}

// observe runs on the loop each tick: it feeds the alarms, publishes their events and a new
// metrics snapshot.
func (r *run) observe() {
	e := r.e
	now := r.cfg.now()
	m := &e.mx
	if m.alarms == nil {
		m.alarms = newAlarms(r.cfg.Alarms)
	}
	s := &metricsSnapshot{
		epoch:   e.epoch,
		states:  make([]uint64, numStates),
		entered: make([]uint64, numStates),
		left:    make([]uint64, numStates),
		totals:  Totals(e.stats),
		wait:    m.wait.clone(),
		run:     m.run.clone(),
		slots:   e.fleet.slots,
	}
	for _, st := range jobindex.AllStates() {
		s.states[st] = e.idx.Count(st)
	}
	s.entered[jobindex.Pending] = e.stats.Admitted
	for from := range numStates {
		for to := range numStates {
			s.entered[to] += m.moves[from][to]
			s.left[from] += m.moves[from][to]
		}
	}
	// The oldest pending job: the one pending longest among the first pending jobs of each run of
	// IDs (most groups wait for a slot, their jobs in the index alone), the next jobs of the groups
	// in the scheduler, and those set aside. oldest is the lowest of their messages' sequences:
	// arrival samples before it are no longer needed.
	oldest, since := uint64(0), time.Time{}
	note := func(id uint64) {
		if seq := wire.JobSeq(id); oldest == 0 || seq < oldest {
			oldest = seq
		}
		if at := e.pendingSince(id); !at.IsZero() && (since.IsZero() || at.Before(since)) {
			since = at
		}
	}
	for _, from := range [...]uint64{0, jobindex.PackedIDs} {
		if id, ok := e.idx.FirstPending(from); ok {
			note(id)
		}
	}
	var buf []uint64
	for _, g := range e.groups.live {
		if g.inSched {
			if buf = e.sched.Upcoming(buf[:0], g, 1); len(buf) > 0 {
				note(buf[0])
			}
		}
	}
	for r := range e.groups.table.all() {
		if len(s.groups) == maxGroupMetrics {
			break
		}
		v := e.view(r, nil)
		s.groups = append(s.groups, groupSnap{id: v.id, jobs: v.jobs, inFlight: v.inFlight})
	}
	s.groupsActive = e.groups.table.len()
	s.groupsWaiting = len(e.deps.waiting)
	for _, j := range e.retries.ready {
		note(j.id)
	}
	for _, j := range e.retries.parked {
		note(j.id)
	}
	for _, ls := range e.limits.byKey {
		for _, q := range ls.line {
			if i := slices.IndexFunc(q, func(j *job) bool { return j.heldBy == ls }); i >= 0 {
				note(q[i].id) // the first of a group's queue is its oldest
			}
		}
	}
	m.oldestPending = time.Time{}
	if s.states[jobindex.Pending] > 0 && oldest > 0 {
		if !since.IsZero() {
			s.oldestAge = now.Sub(since)
			m.oldestPending = since
		}
		// Samples older than the oldest pending job are no longer needed (one is kept: it
		// dates the jobs stored after it).
		if i := sort.Search(len(m.arrivals), func(i int) bool { return m.arrivals[i].seq > oldest }); i > 1 {
			m.arrivals = slices.Delete(m.arrivals, 0, i-1)
		}
	}
	st := e.status()
	s.pools, s.workers, s.limits = st.Pools, st.Workers, st.Limits
	if len(st.Resources) > maxResourceMetrics {
		st.Resources = st.Resources[:maxResourceMetrics]
	}
	s.resources = st.Resources

	in := alarmInput{
		now: now, failed: e.stats.Failed, pending: s.states[jobindex.Pending],
		enteredPending: s.entered[jobindex.Pending], leftPending: s.left[jobindex.Pending],
		slots: e.fleet.slots, lost: m.lost,
	}
	for _, ls := range e.limits.byKey {
		in.held += uint64(ls.held)
	}
	in.missing = e.missingDeps()
	m.lost = nil
	for id, w := range e.fleet.workers {
		in.busy += w.hb.Busy
		in.workers = append(in.workers, workerSample{id: id, busy: w.hb.Busy, lastReport: m.lastReport[id]})
	}
	for id := range m.lastReport {
		if e.fleet.workers[id] == nil {
			delete(m.lastReport, id)
		}
	}
	events := m.alarms.observe(in)
	s.alarms = m.alarms.active()
	r.c.mx.snap.Store(s) // before the events: a scrape prompted by one sees its alarm
	for _, ev := range events {
		if err := r.c.nc.Publish(r.names.AlarmSubject(ev.Name), ev.Marshal()); err != nil {
			r.log.Warn().Err(err).Str("alarm", ev.Name).Msg("publishing an alarm event failed")
		}
		lvl := zerolog.WarnLevel
		if ev.State == "cleared" {
			lvl = zerolog.InfoLevel // the all-clear is news, not a warning
		}
		r.log.WithLevel(lvl).Str("alarm", ev.Name).Str("state", ev.State).Msg(ev.Message)
	}
}

// Collector returns a prometheus.Collector of this coordinator's metrics, for Go programs
// that run their own registry: registry.MustRegister(c.Collector()). A standby exports only
// the weave_lease_* series. Collect reads a snapshot the coordinator publishes every 250ms.
// `weave coordinator --metrics-addr` serves the same on /metrics.
func (c *Coordinator) Collector() prometheus.Collector { return (*coordCollector)(c) }

type coordCollector Coordinator

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

var (
	descJobs          = desc("weave_jobs", "Jobs per state, from the job index (pending, running, retrywait, done, failed, canceled of the tracked groups).", "state")
	descEntered       = desc("weave_jobs_entered_total", "Jobs that entered each state (admissions enter pending).", "state")
	descLeft          = desc("weave_jobs_left_total", "Jobs that left each state.", "state")
	descAdmitted      = desc("weave_jobs_admitted_total", "Jobs admitted into open groups.")
	descReleased      = desc("weave_jobs_released_total", "Releases of jobs to pools (attempts).")
	descRetried       = desc("weave_jobs_retried_total", "Attempts that failed and were scheduled for a retry.")
	descEnded         = desc("weave_jobs_ended_total", "Jobs that ended, by outcome.", "outcome")
	descRejected      = desc("weave_rejections_total", "Messages refused and recorded in NS_REJECTED, by kind (message: a job or control message; report; heartbeat; request: a cancel or redrive the state refuses).", "reason")
	descLostJobs      = desc("weave_jobs_vanished_total", "Jobs failed because their stored message was gone.")
	descLapsed        = desc("weave_attempts_lapsed_total", "Attempts lost with their worker's lease, counted as failed.")
	descRescued       = desc("weave_jobs_rescued_total", "Jobs taken back from pools left without workers.")
	descRequeued      = desc("weave_jobs_requeued_total", "Releases that failed and went back to pending.")
	descWait          = desc("weave_job_queue_wait_seconds", "Time from a job's storage to its first release (±10ms).")
	descRun           = desc("weave_job_run_seconds", "Handler run time of the attempts reported.")
	descGroupJobs     = desc("weave_group_jobs", "Jobs of an open group per state (the first 50 open groups in arrival order).", "group", "state")
	descGroupInFlight = desc("weave_group_in_flight", "Jobs of an open group released and not yet reported (first 50 groups).", "group")
	descGroupsActive  = desc("weave_groups_active", "Open groups tracked by the coordinator.")
	descGroupsWaiting = desc("weave_groups_waiting_dependencies", "Open groups held until the groups they run after complete.")
	descAfter         = desc("weave_dependents_total", "Groups held by dependencies (After, follow-ups) that were released or canceled.", "outcome")
	descGroupsUnlist  = desc("weave_groups_unlisted", "Open groups beyond the 50 with their own weave_group_* series.")
	descResourceJobs  = desc("weave_resource_jobs", "Jobs requiring a resource, per state (first 100 resources by name).", "resource", "state")
	descResourceHold  = desc("weave_resource_holder_slots", "Live slots holding a resource.", "resource")
	descLimitRunning  = desc("weave_limit_running", "Jobs under a limit released and not yet reported.", "kind", "name")
	descLimitHeld     = desc("weave_limit_held_back", "Jobs a limit holds back (a paused one holds back all of them).", "kind", "name")
	descLimitPaused   = desc("weave_limit_paused", "1 while a resource or group is paused (weave limit pause).", "kind", "name")
	descPoolWorkers   = desc("weave_pool_workers", "Live workers of a pool.", "pool")
	descPoolSlots     = desc("weave_pool_slots", "Live slots of a pool (draining workers excluded).", "pool")
	descPoolOut       = desc("weave_pool_outstanding", "Jobs released to a pool and not yet reported.", "pool")
	descWorkerSlots   = desc("weave_worker_slots", "A live worker's slots by state (busy, sleeping), from its latest heartbeat.", "worker", "pool", "state")
	descSlots         = desc("weave_slots", "Live slots of the fleet (draining workers excluded).")
	descOldest        = desc("weave_oldest_pending_job_age_seconds", "Age of the oldest pending job (0 when none).")
	descDepth         = desc("weave_queue_depth", "Jobs waiting for or holding a slot (pending + running): an autoscaler's target divides it by the slots per worker.")
	descAlarm         = desc("weave_alarm_active", "1 while an alarm is raised.", "alarm")
	descLeaseHeld     = desc("weave_lease_held", "1 while this coordinator holds the namespace's lease (leads), 0 as a standby.")
	descLeaseEpoch    = desc("weave_lease_epoch", "Epoch of the lease this coordinator last held.")
	descLeaseAcq      = desc("weave_lease_acquisitions_total", "Terms this coordinator started (failovers to it, and its first start).")
	descLeaseLost     = desc("weave_lease_lost_total", "Terms of this coordinator that ended with an error (lease lost, stalled).")
)

func (c *coordCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descJobs, descEntered, descLeft, descAdmitted, descReleased, descRetried, descEnded,
		descRejected, descLostJobs, descLapsed, descRescued, descRequeued, descWait, descRun, descGroupJobs, descGroupInFlight,
		descGroupsActive, descGroupsWaiting, descAfter, descGroupsUnlist, descResourceJobs, descResourceHold, descLimitRunning, descLimitHeld, descLimitPaused,
		descPoolWorkers, descPoolSlots, descPoolOut,
		descWorkerSlots, descSlots, descOldest, descDepth, descAlarm, descLeaseHeld, descLeaseEpoch, descLeaseAcq, descLeaseLost} {
		ch <- d
	}
}

func (c *coordCollector) Collect(ch chan<- prometheus.Metric) {
	m := &c.mx
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	held := 0.0
	if m.held.Load() {
		held = 1
	}
	gauge(descLeaseHeld, held)
	gauge(descLeaseEpoch, float64(m.epoch.Load()))
	counter(descLeaseAcq, m.acquired.Load())
	counter(descLeaseLost, m.lostLease.Load())
	s := m.snap.Load()
	if s == nil {
		return // a standby: the leader exports the namespace's figures
	}
	for _, st := range jobindex.AllStates() {
		gauge(descJobs, float64(s.states[st]), st.String())
		counter(descEntered, s.entered[st], st.String())
		counter(descLeft, s.left[st], st.String())
	}
	t := s.totals
	counter(descAdmitted, t.Admitted)
	counter(descReleased, t.Released)
	counter(descRetried, t.Retried)
	counter(descEnded, t.Done, "done")
	counter(descEnded, t.Failed, "failed")
	counter(descEnded, t.Canceled, "canceled")
	counter(descRejected, t.Rejected-t.RejectedReports-t.RejectedHeartbeats, "message")
	counter(descRejected, t.RejectedReports, "report")
	counter(descRejected, t.RejectedHeartbeats, "heartbeat")
	counter(descRejected, t.Refused, "request")
	counter(descLostJobs, t.LostJobs)
	counter(descLapsed, t.LostAttempts)
	counter(descRescued, t.Rescued)
	counter(descRequeued, t.Requeued)
	ch <- s.wait.metric(descWait)
	ch <- s.run.metric(descRun)
	for _, g := range s.groups {
		for _, st := range jobindex.AllStates() {
			gauge(descGroupJobs, float64(g.jobs.Get(st)), g.id, st.String())
		}
		gauge(descGroupInFlight, float64(g.inFlight), g.id)
	}
	gauge(descGroupsActive, float64(s.groupsActive))
	gauge(descGroupsWaiting, float64(s.groupsWaiting))
	counter(descAfter, t.AfterReleased, "released")
	counter(descAfter, t.AfterCanceled, "canceled")
	gauge(descGroupsUnlist, float64(s.groupsActive-len(s.groups)))
	for _, r := range s.resources {
		for st, n := range r.Required {
			gauge(descResourceJobs, float64(n), r.Name, st)
		}
		gauge(descResourceHold, float64(r.Holders), r.Name)
	}
	for _, l := range s.limits {
		kind := string(l.Kind)
		gauge(descLimitRunning, float64(l.Running), kind, l.Name)
		gauge(descLimitHeld, float64(l.Waiting), kind, l.Name)
		paused := 0.0
		if l.Paused {
			paused = 1
		}
		gauge(descLimitPaused, paused, kind, l.Name)
	}
	for _, p := range s.pools {
		gauge(descPoolWorkers, float64(p.Workers), p.Key)
		gauge(descPoolSlots, float64(p.Slots), p.Key)
		gauge(descPoolOut, float64(p.Outstanding), p.Key)
	}
	for _, w := range s.workers {
		gauge(descWorkerSlots, float64(w.Busy), w.ID, w.Pool, "busy")
		gauge(descWorkerSlots, float64(w.Sleeping), w.ID, w.Pool, "sleeping")
	}
	gauge(descSlots, float64(s.slots))
	gauge(descOldest, s.oldestAge.Seconds())
	gauge(descDepth, float64(s.states[jobindex.Pending]+s.states[jobindex.Running]))
	active := map[string]bool{}
	for _, a := range s.alarms {
		active[a.Name] = true
	}
	for _, name := range AlarmNames {
		v := 0.0
		if active[name] {
			v = 1
		}
		gauge(descAlarm, v, name)
	}
}
