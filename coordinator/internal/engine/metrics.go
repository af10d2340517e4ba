package engine

import (
	"slices"
	"sort"
	"time"

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
const MaxGroupMetrics = 50

// maxResourceMetrics bounds the resources with series in weave_resource_jobs, as groups.
const maxResourceMetrics = 100

// numStates is the number of job states (jobindex.AllStates).
var numStates = len(jobindex.AllStates())

// secondsBuckets are the histograms' buckets: 1ms to 1h.
var SecondsBuckets = []float64{.001, .005, .01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

// Hist is a histogram owned by one goroutine: observing costs a short search and two adds.
type Hist struct {
	Counts []uint64 // per bucket of secondsBuckets, not cumulative; one more for +Inf
	Sum    float64
	N      uint64
}

func (h *Hist) observe(d time.Duration) {
	if h.Counts == nil {
		h.Counts = make([]uint64, len(SecondsBuckets)+1)
	}
	s := d.Seconds()
	h.Counts[sort.SearchFloat64s(SecondsBuckets, s)]++
	h.Sum += s
	h.N++
}

func (h Hist) clone() Hist {
	h.Counts = slices.Clone(h.Counts)
	return h
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
	wait     Hist // stored → first release
	run      Hist // handler run time, from reports
	arrivals []seqAt
	// lastReport is each worker's latest report (for worker_stuck), pruned each tick.
	lastReport map[string]time.Time
	lost       []string // workers whose heartbeats lapsed since the last tick
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

// MetricsSnapshot is what a scrape reads: immutable once published.
type MetricsSnapshot struct {
	Epoch         uint64
	States        []uint64 // per jobindex state
	Entered       []uint64 // per state: jobs that entered it (admissions into pending included)
	Left          []uint64 // per state
	Totals        Totals
	Wait, Run     Hist
	Groups        []GroupSnap
	GroupsActive  int
	GroupsWaiting int
	Resources     []ResourceStatus
	Limits        []LimitStatus
	Pools         []PoolStatus
	Workers       []WorkerStatus
	OldestAge     time.Duration // of the oldest pending job; 0 if none
	Slots         int
	Alarms        []Alarm
}

type GroupSnap struct {
	ID       string
	Jobs     jobindex.Counts
	InFlight int
}

// Observe runs on the loop each tick: it returns a new metrics snapshot and what the alarms
// see, for the run to judge and publish.
func (e *Engine) Observe(now time.Time) (*MetricsSnapshot, AlarmInput) {
	m := &e.mx
	s := &MetricsSnapshot{
		Epoch:   e.epoch,
		States:  make([]uint64, numStates),
		Entered: make([]uint64, numStates),
		Left:    make([]uint64, numStates),
		Totals:  Totals(e.stats),
		Wait:    m.wait.clone(),
		Run:     m.run.clone(),
		Slots:   e.fleet.slots,
	}
	for _, st := range jobindex.AllStates() {
		s.States[st] = e.idx.Count(st)
	}
	s.Entered[jobindex.Pending] = e.stats.Admitted
	for from := range numStates {
		for to := range numStates {
			s.Entered[to] += m.moves[from][to]
			s.Left[from] += m.moves[from][to]
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
		if len(s.Groups) == MaxGroupMetrics {
			break
		}
		v := e.view(r, nil)
		s.Groups = append(s.Groups, GroupSnap{ID: v.id, Jobs: v.jobs, InFlight: v.inFlight})
	}
	s.GroupsActive = e.groups.table.len()
	s.GroupsWaiting = len(e.deps.waiting)
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
	if s.States[jobindex.Pending] > 0 && oldest > 0 {
		if !since.IsZero() {
			s.OldestAge = now.Sub(since)
			m.oldestPending = since
		}
		// Samples older than the oldest pending job are no longer needed (one is kept: it
		// dates the jobs stored after it).
		if i := sort.Search(len(m.arrivals), func(i int) bool { return m.arrivals[i].seq > oldest }); i > 1 {
			m.arrivals = slices.Delete(m.arrivals, 0, i-1)
		}
	}
	st := e.Status()
	s.Pools, s.Workers, s.Limits = st.Pools, st.Workers, st.Limits
	if len(st.Resources) > maxResourceMetrics {
		st.Resources = st.Resources[:maxResourceMetrics]
	}
	s.Resources = st.Resources

	in := AlarmInput{
		Now: now, Failed: e.stats.Failed, Pending: s.States[jobindex.Pending],
		EnteredPending: s.Entered[jobindex.Pending], LeftPending: s.Left[jobindex.Pending],
		Slots: e.fleet.slots, Lost: m.lost,
	}
	for _, ls := range e.limits.byKey {
		in.Held += uint64(ls.held)
	}
	in.Missing = e.missingDeps()
	m.lost = nil
	for id, w := range e.fleet.workers {
		in.Busy += w.hb.Busy
		in.Workers = append(in.Workers, WorkerSample{ID: id, Busy: w.hb.Busy, LastReport: m.lastReport[id]})
	}
	for id := range m.lastReport {
		if e.fleet.workers[id] == nil {
			delete(m.lastReport, id)
		}
	}
	return s, in
}

// AlarmInput is what the alarms see at one tick: the state counts and the fleet.
type AlarmInput struct {
	Now            time.Time
	Failed         uint64 // jobs that ended failed, monotonic
	Pending        uint64 // jobs pending now
	Held           uint64 // of them, those limits hold back: more slots would not start them
	EnteredPending uint64 // jobs that entered PENDING, monotonic
	LeftPending    uint64 // jobs that left PENDING, monotonic
	Slots          int    // live slots (draining workers' excluded)
	Busy           int    // busy slots from the live workers' latest heartbeats
	Workers        []WorkerSample
	Lost           []string // workers whose heartbeats lapsed since the last tick
	// Missing are the groups waiting for a group never published, with when they were opened.
	Missing []MissingDep
}

// MissingDep is a group waiting for a group never published.
type MissingDep struct {
	Group, WaitsFor string
	Since           time.Time
}

// WorkerSample is one live worker at a tick.
type WorkerSample struct {
	ID         string
	Busy       int
	LastReport time.Time // its latest report, zero if none since it joined
}
