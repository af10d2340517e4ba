package engine

import (
	"cmp"
	"encoding/json"
	"maps"
	"slices"
	"time"

	"github.com/weavejobs/weave/internal/jobindex"
	"github.com/weavejobs/weave/internal/wire"
)

// Status is a point-in-time view of a namespace, answered by the running coordinator.
type Status struct {
	Namespace string `json:"namespace"`
	// Epoch is this coordinator's fencing token: the revision of the lease's key when it took
	// the lease. Every renewal makes a revision, so it grows with the time the lease has been
	// held (by anyone), not with the number of failovers: only its order means something.
	Epoch   uint64    `json:"epoch"`
	Time    time.Time `json:"time"`
	Policy  string    `json:"policy"`
	Feeders int       `json:"feeders"`
	// Unsealed counts the open groups whose producer has not sealed them yet (all of them, also
	// those beyond the groups listed). One whose producer stays silent for AbandonAfter is sealed
	// by the coordinator.
	Unsealed  int               `json:"unsealed"`
	Jobs      map[string]uint64 `json:"jobs"` // count per state (pending, running, retrywait, done, failed, canceled)
	Totals    Totals            `json:"totals"`
	Groups    []GroupStatus     `json:"groups"`
	Resources []ResourceStatus  `json:"resources"`
	Limits    []LimitStatus     `json:"limits,omitempty"` // the limits per resource and group, and their use
	// LimitsSeq is the sequence of the last message of the LIMITS stream this coordinator has
	// applied: a limit stored at sequence n is in force once LimitsSeq ≥ n (Dispatcher.SetLimit
	// waits for it).
	LimitsSeq uint64          `json:"limits_seq"`
	Pools     []PoolStatus    `json:"pools"`
	Workers   []WorkerStatus  `json:"workers"`
	Standbys  []StandbyStatus `json:"standbys,omitempty"` // standby coordinators heard lately
	Alarms    []Alarm         `json:"alarms"`             // raised alarms, at the latest tick
	// OldestPending is when the oldest pending job was stored (to about 10ms), as of the latest
	// tick; zero when no job is pending.
	OldestPending time.Time `json:"oldest_pending,omitzero"`

	// How many entries the lists above have in full. Groups lists at most the 100 oldest open
	// groups; and when the whole answer would not fit in the server's max payload (thousands
	// of workers or resources), its longest lists are cut, from the end, until it does, and Cut
	// is set. A list shorter than its count was cut.
	OpenGroups    int  `json:"open_groups"`
	WaitingGroups int  `json:"waiting_groups"` // of OpenGroups: waiting until the groups they run after complete
	WorkerCount   int  `json:"worker_count"`
	ResourceCount int  `json:"resource_count"`
	LimitCount    int  `json:"limit_count"`
	PoolCount     int  `json:"pool_count"`
	Cut           bool `json:"cut,omitempty"`
}

// Totals are counters since this coordinator took over.
type Totals struct {
	Admitted     uint64 `json:"admitted"`
	Released     uint64 `json:"released"`
	Retried      uint64 `json:"retried"`
	Rejected     uint64 `json:"rejected"`
	StaleReports uint64 `json:"stale_reports"`
	Requeued     uint64 `json:"requeued"`      // releases that failed and went back to pending
	LostJobs     uint64 `json:"lost_jobs"`     // vanished jobs: failed because their stored message is gone
	LostAttempts uint64 `json:"lost_attempts"` // lapsed attempts: lost with their worker's lease, counted as failed
	Rescued      uint64 `json:"rescued"`       // jobs taken back from a pool left without workers
	Done         uint64 `json:"done"`          // jobs that ended done (complete groups included)
	Failed       uint64 `json:"failed"`
	Canceled     uint64 `json:"canceled"`
	// Of Rejected: reports refused (about a job not released to the reporter's pool, an
	// attempt never released, or on a subject that is not the reporter's) and heartbeats
	// refused (on another worker's subject, or a second process with a live worker's ID).
	RejectedReports    uint64 `json:"rejected_reports"`
	RejectedHeartbeats uint64 `json:"rejected_heartbeats"`
	// Refused counts requests the state refuses, not counted in Rejected: a cancel of a group
	// that is not open, a redrive of a group running or with nothing to run again.
	Refused uint64 `json:"refused"`
	// Groups that ran after others: released by their ready record, or canceled because a group
	// they ran after ended otherwise than they asked.
	AfterReleased uint64 `json:"after_released"`
	AfterCanceled uint64 `json:"after_canceled"`
}

// GroupStatus describes one open group.
type GroupStatus struct {
	ID       string    `json:"id"`
	Sealed   bool      `json:"sealed"`
	OpenedAt time.Time `json:"opened_at"` // when its open was stored (the server's clock)
	// LastHeard is the coordinator's time of its producer's latest job, open or keep-alive,
	// while the group is not sealed.
	LastHeard time.Time         `json:"last_heard,omitzero"`
	Abandoned bool              `json:"abandoned,omitempty"` // sealed by the coordinator: its producer went silent
	Queued    int               `json:"queued"`              // handed to the scheduler, not yet released
	InFlight  int               `json:"in_flight"`           // released, not yet reported
	Held      int               `json:"held,omitempty"`      // pending, held back by a limit (Status.Limits)
	Busy      float64           `json:"busy"`                // share of a released job's time its handler runs (recent average)
	Jobs      map[string]uint64 `json:"jobs"`
	// WaitsFor names the groups it runs after that have not completed as it asks; FollowedBy
	// the groups waiting on it (dependents and follow-ups), at most 20.
	WaitsFor   []string `json:"waits_for,omitempty"`
	FollowedBy []string `json:"followed_by,omitempty"`
	Priority   int      `json:"priority,omitempty"` // its jobs go before lower priorities'
}

// ResourceStatus counts the jobs naming one resource, and the live slots holding it. Pending
// jobs requiring a resource with no holders wait until a worker holding it joins.
type ResourceStatus struct {
	Name      string            `json:"name"`
	Holders   int               `json:"holders"`  // live slots holding it
	Required  map[string]uint64 `json:"required"` // jobs requiring it, per state
	Preferred map[string]uint64 `json:"preferred"`
}

// LimitStatus is one limit and its use: the jobs under it released and not reported, and those
// it holds back.
type LimitStatus struct {
	wire.Limit
	Running int `json:"running"`
	Waiting int `json:"waiting"`
}

// PoolStatus describes one pool of workers holding the same resources.
type PoolStatus struct {
	Key         string   `json:"key"`
	Resources   []string `json:"resources,omitempty"`
	Workers     int      `json:"workers"`
	Slots       int      `json:"slots"`
	Outstanding int      `json:"outstanding"` // released to the pool and not yet reported
	// Learned lists the resources the pool learned: it ran jobs preferring them by fallback
	// (Config.LearnAffinity).
	Learned []string `json:"learned,omitempty"`
}

// WorkerStatus describes one live worker, from its last heartbeat.
type WorkerStatus struct {
	ID          string    `json:"id"`
	Pool        string    `json:"pool"`
	Resources   []string  `json:"resources,omitempty"`
	Concurrency int       `json:"concurrency"`
	Busy        int       `json:"busy"`
	Sleeping    int       `json:"sleeping"`
	Draining    bool      `json:"draining,omitempty"`
	LastSeen    time.Time `json:"last_seen"`
}

// Marshal encodes the status as JSON.
func (s *Status) Marshal() []byte {
	b, _ := json.Marshal(s) // plain fields only
	return b
}

// Fit encodes s in at most limit bytes if it can: while it does not fit, the longest of its lists
// (workers, resources, limits, pools, groups) loses its second half, and Cut is set. An answer
// larger than the server's max payload is refused by the server: the status request would time
// out, for `weave status` and the dashboard alike, for as long as the namespace stays that large.
func (s *Status) Fit(limit int) []byte {
	data := s.Marshal()
	for len(data) > limit {
		switch n := max(len(s.Workers), len(s.Resources), len(s.Limits), len(s.Pools), len(s.Groups)); n {
		case 0:
			return data // nothing left to cut: the rest is a few kilobytes
		case len(s.Workers):
			s.Workers = s.Workers[:n/2]
		case len(s.Resources):
			s.Resources = s.Resources[:n/2]
		case len(s.Limits):
			s.Limits = s.Limits[:n/2]
		case len(s.Pools):
			s.Pools = s.Pools[:n/2]
		default:
			s.Groups = s.Groups[:n/2]
		}
		s.Cut = true
		data = s.Marshal()
	}
	return data
}

// maxGroupsInStatus bounds the groups listed (open groups in arrival order).
const maxGroupsInStatus = 100

func counts(c jobindex.Counts) map[string]uint64 {
	m := map[string]uint64{}
	for _, s := range jobindex.AllStates() {
		m[s.String()] = c.Get(s)
	}
	return m
}

func (e *Engine) Status() *Status {
	s := &Status{
		Namespace: e.names.Namespace(),
		Epoch:     e.epoch,
		Time:      e.cfg.now(),
		Policy:    e.cfg.Policy.String(),
		Feeders:   e.fleet.feeders(&e.cfg),
		Unsealed:  len(e.groups.unsealed),
		Jobs:      map[string]uint64{},
		Totals:    Totals(e.stats),
		LimitsSeq: e.limits.applied,
		Alarms:    []Alarm{}, // the run adds the raised ones: a list, even empty, for readers

		OldestPending: e.mx.oldestPending,
	}
	for _, st := range jobindex.AllStates() {
		s.Jobs[st.String()] = e.idx.Count(st)
	}
	s.OpenGroups = e.groups.table.len()
	s.WaitingGroups = len(e.deps.waiting)
	held := e.heldBack(0)
	aside := e.aside()
	for r := range e.groups.table.all() {
		if len(s.Groups) == maxGroupsInStatus {
			break
		}
		v := e.view(r, aside)
		gs := GroupStatus{ID: v.id, Sealed: v.sealed, OpenedAt: v.openedAt, Abandoned: v.abandoned, Queued: v.queued, InFlight: v.inFlight, Busy: v.busy, Jobs: counts(v.jobs), LastHeard: v.lastHeard}
		for _, hb := range held[v.openSeq] {
			gs.Held += hb.Jobs
		}
		gs.WaitsFor = e.waitsFor(r.openSeq)
		gs.FollowedBy = e.dependentsOf(r.id, r.openSeq, maxListedDependents)
		gs.Priority = r.priority()
		s.Groups = append(s.Groups, gs)
	}
	holders := map[string]int{}
	for _, p := range e.fleet.poolOrder {
		learned := slices.Sorted(maps.Keys(p.learned))
		s.Pools = append(s.Pools, PoolStatus{Key: p.key, Resources: p.resources, Workers: p.workers, Slots: p.slots, Outstanding: p.outstanding, Learned: learned})
		for _, r := range p.resources {
			holders[r] += p.slots
		}
	}
	for name, rc := range e.idx.Resources() {
		s.Resources = append(s.Resources, ResourceStatus{Name: name, Holders: holders[name], Required: counts(rc.Required), Preferred: counts(rc.Preferred)})
	}
	slices.SortFunc(s.Resources, func(a, b ResourceStatus) int { return cmp.Compare(a.Name, b.Name) })
	for id, w := range e.fleet.workers {
		s.Workers = append(s.Workers, WorkerStatus{ID: id, Pool: w.pool.key, Resources: w.hb.Resources, Concurrency: w.hb.Concurrency, Busy: w.hb.Busy, Sleeping: w.hb.Sleeping, Draining: w.hb.Draining, LastSeen: w.lastSeen})
	}
	slices.SortFunc(s.Workers, func(a, b WorkerStatus) int { return cmp.Compare(a.ID, b.ID) })
	for _, ls := range e.limits.byKey {
		s.Limits = append(s.Limits, LimitStatus{Limit: ls.Limit, Running: ls.running, Waiting: ls.held})
	}
	slices.SortFunc(s.Limits, func(a, b LimitStatus) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name))
	})
	s.WorkerCount, s.ResourceCount, s.LimitCount, s.PoolCount = len(s.Workers), len(s.Resources), len(s.Limits), len(s.Pools)
	return s
}

// Alarm is one raised alarm, as status shows it.
type Alarm struct {
	Name     string             `json:"name"`
	RaisedAt time.Time          `json:"raised_at"`
	Message  string             `json:"message"`
	Values   map[string]float64 `json:"values"`
}
