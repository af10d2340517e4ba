package engine

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/weavejobs/weave/internal/jobindex"
	"github.com/weavejobs/weave/internal/wire"
)

// Inspection: what the coordinator alone knows of a job or group (its live state, the pool and
// workers running it, the incarnation it belongs to, the retained incarnations whose outcomes
// may hold a job no longer tracked). dispatcher.Job, JobByKey, Group and Groups ask on
// Names.InspectSubject and complete the answer from the streams. Requests are answered on the
// loop, from the engine's state, as status is.
//
// Standby coordinators announce themselves on Names.StandbySubject every
// wire.StandbyInterval while they wait for the lease (announceStandby); the active one keeps
// those heard within three intervals (standbys) and lists them in its status.

// Inspect answers a valid request from the engine's state. Called on the loop.
func (e *Engine) Inspect(req wire.InspectRequest) wire.InspectReply {
	switch {
	case req.Groups:
		return wire.InspectReply{Groups: e.inspectGroups(e.groupWaits(0))}
	case req.Job != 0:
		return e.inspectJob(req.Job, req.Group)
	}
	var rep wire.InspectReply
	if r := e.groups.table.latest(req.Group); r != nil {
		gl := e.groupLive(r, e.groupWaits(r.openSeq), e.aside())
		rep.Group = &gl
		return rep
	}
	for r := range e.retention.ofID(req.Group) {
		gl := retainedLive(req.Group, r)
		rep.Group = &gl
		break // the last to complete
	}
	return rep
}

func (e *Engine) inspectJob(id uint64, hint string) wire.InspectReply {
	st, ok := e.idx.State(id)
	if !ok {
		// Not tracked: its group is complete and forgotten (or it never existed). The retained
		// incarnations opened before it may hold its outcome, nearest first.
		var rep wire.InspectReply
		for gid, r := range e.retention.retained.spanning(id) {
			if len(rep.Candidates) == wire.MaxInspectGroups {
				break
			}
			// Opened at or before it: a single job's incarnation is the job itself.
			if (hint == "" || gid == hint) && !arrivedBefore(id, r.openSeq) && (r.jobsSeq == 0 || !arrivedBefore(r.jobsSeq, id)) {
				rep.Candidates = append(rep.Candidates, retainedLive(gid, r))
			}
		}
		// The incarnation opened last before the job is the likeliest to hold it: read first.
		slices.SortFunc(rep.Candidates, func(a, b wire.GroupLive) int { return cmpSeq(b.Incarnation, a.Incarnation) })
		return rep
	}
	jl := &wire.JobLive{ID: id, State: st.String()}
	if j := e.jobs[id]; j != nil {
		jl.Group, jl.Incarnation = j.g.id, j.g.openSeq
		jl.Key, jl.Attempt, jl.MaxAttempts, jl.Released = j.key, j.attempt, j.maxAtt, j.since
		for _, a := range j.history {
			jl.History = append(jl.History, wire.AttemptJSON(a))
		}
		if st == jobindex.RetryWait {
			jl.RetryAt = j.retryAt
		}
		if st == jobindex.Running && j.pool != nil {
			jl.Pool = j.pool.key
			for wid, w := range e.fleet.workers {
				if w.pool == j.pool {
					jl.Workers = append(jl.Workers, wid)
				}
			}
			slices.Sort(jl.Workers)
			if len(jl.Workers) == 1 {
				jl.Worker = jl.Workers[0]
			}
		}
	} else if r := e.jobRec(id); r != nil && (hint == "" || r.id == hint) {
		jl.Group, jl.Incarnation = r.id, r.openSeq
	}
	if st == jobindex.Pending {
		e.whyPending(jl)
	}
	return wire.InspectReply{Job: jl}
}

// whyPending says why pending job jl (of group jl.Group, if known) does not start, if more than
// a slot is wanted: the limit holding it back (or that would, were it offered now: a job still in
// its group's queue has not met its limits yet), or the resources it requires that no live
// worker holds.
func (e *Engine) whyPending(jl *wire.JobLive) {
	ls := (*limitState)(nil)
	if j := e.jobs[jl.ID]; j != nil && j.heldBy != nil {
		ls = j.heldBy
	} else if jl.Group != "" {
		ls = holdingBack(e.limitsOf(nil, jl.ID, jl.Group), e.cfg.now())
	}
	if ls != nil {
		jl.HeldBy = &wire.HeldBack{Kind: ls.Kind, Name: ls.Name, Paused: ls.Paused}
		return
	}
	if e.placeable(jl.ID) {
		return
	}
	held := map[string]bool{}
	for _, p := range e.fleet.poolOrder {
		if p.workers > 0 {
			for _, r := range p.resources {
				held[r] = true
			}
		}
	}
	all := slices.Collect(e.idx.JobRequires(jl.ID))
	for _, r := range all {
		if !held[r] {
			jl.Missing = append(jl.Missing, r)
		}
	}
	if len(jl.Missing) == 0 {
		jl.Missing = all // each is held, by no one worker with the others
	}
}

// waits is why the pending and delayed jobs of the groups inspected wait (see groupWaits), by
// open sequence.
type waits struct {
	held        map[uint64][]wire.HeldBack
	unplaceable map[uint64]int
	nextRunAt   map[uint64]time.Time
}

// groupWaits gathers, per group (or for the incarnation opened at only, if not 0), the limits
// holding its jobs back (heldBack), its jobs set aside because they require resources no live
// worker holds, and when its first delayed job runs. One pass over the parked jobs and the
// delayed ones serves every group listed.
func (e *Engine) groupWaits(only uint64) waits {
	w := waits{held: e.heldBack(only), unplaceable: map[uint64]int{}, nextRunAt: map[uint64]time.Time{}}
	for _, j := range e.retries.parked {
		if only == 0 || j.g.openSeq == only {
			w.unplaceable[j.g.openSeq]++
		}
	}
	if only != 0 {
		if r := e.groups.table.get(only); r == nil || e.recCounts(r).Delayed == 0 {
			return w // none of its jobs is in the heap: not worth a walk of every delayed job
		}
	}
	for _, d := range e.delays.heap {
		if st, _ := e.idx.State(d.id); st != jobindex.Delayed {
			continue // canceled, or released before a restart: dropped when it comes up
		}
		r := e.jobRec(d.id)
		if r == nil || only != 0 && r.openSeq != only {
			continue
		}
		if at, ok := w.nextRunAt[r.openSeq]; !ok || d.at < at.UnixNano() {
			w.nextRunAt[r.openSeq] = time.Unix(0, d.at)
		}
	}
	return w
}

// groupView is what status, inspection and metrics show of a tracked incarnation.
type groupView struct {
	id                  string
	openSeq             uint64
	sealed, abandoned   bool
	complete            bool
	openedAt, lastHeard time.Time
	admitted            uint64
	queued, inFlight    int
	busy                float64
	jobs                jobindex.Counts
}

// view shows r. aside is what the pending jobs released before and waiting again (retries,
// parked jobs, a limit's line) count per group (see aside): not in its queue.
func (e *Engine) view(r *groupRec, aside map[*group]int) groupView {
	v := groupView{id: r.id, openSeq: r.openSeq, jobs: e.recCounts(r)}
	if u := e.groups.unsealed[r.openSeq]; u != nil {
		v.lastHeard = u.lastHeard
	}
	g := e.liveOf(r)
	if g == nil {
		v.sealed, v.abandoned, v.complete = r.flags&recSealed != 0, r.flags&recAbandoned != 0, r.flags&recComplete != 0
		v.openedAt, v.admitted, v.queued, v.busy = fromUnixNano(r.openedAt), v.jobs.Total(), int(v.jobs.Pending), e.groups.busy
		return v
	}
	v.sealed, v.abandoned, v.complete, v.openedAt, v.admitted, v.inFlight, v.busy = g.sealed, g.abandoned, g.complete, g.openedAt, g.admitted, g.inFlight, g.busy
	if g.inSched && e.sched.Entered(g) {
		v.queued = e.sched.Queued(g)
	} else {
		v.queued = int(v.jobs.Pending) - aside[g]
	}
	return v
}

// aside counts, per group, its pending jobs that were released before (a *job: a retry due, a
// job returned, parked or held back by a limit), which wait outside its queue.
func (e *Engine) aside() map[*group]int {
	var n map[*group]int
	for _, j := range e.jobs {
		if st, _ := e.idx.State(j.id); st == jobindex.Pending {
			if n == nil {
				n = map[*group]int{}
			}
			n[j.g]++
		}
	}
	return n
}

func (e *Engine) groupLive(r *groupRec, w waits, aside map[*group]int) wire.GroupLive {
	v := e.view(r, aside)
	return wire.GroupLive{
		ID: v.id, Incarnation: v.openSeq, Sealed: v.sealed, Abandoned: v.abandoned, Complete: v.complete,
		OpenedAt: v.openedAt, Admitted: v.admitted, Queued: v.queued, InFlight: v.inFlight, Jobs: counts(v.jobs),
		HeldBack: w.held[v.openSeq], Unplaceable: w.unplaceable[v.openSeq], NextRunAt: w.nextRunAt[v.openSeq],
		LastHeard: v.lastHeard, WaitsFor: e.waitsFor(r.openSeq), FollowedBy: e.dependentsOf(r.id, r.openSeq, maxListedDependents),
		Priority: r.priority(),
	}
}

// retainedLive describes retained group r, of group ID id (copied: the reply outlives the loop's
// step, and id may share the retained IDs' bytes).
func retainedLive(id string, r *retained) wire.GroupLive {
	return wire.GroupLive{ID: strings.Clone(id), Incarnation: r.openSeq, Sealed: true, Complete: true, CompletedAt: r.completedAt(), SummarySeq: r.summarySeq}
}

// heldBack lists, per group by open sequence (or for the incarnation opened at only, if not 0),
// the limits holding some of its jobs back and how many each holds: the answer to "why does its
// pending job not start?". Each limit counts its held jobs per group as it holds and releases
// them, so this costs a lookup per limit and group, not a pass over the jobs held.
func (e *Engine) heldBack(only uint64) map[uint64][]wire.HeldBack {
	var out map[uint64][]wire.HeldBack
	for k, ls := range e.limits.byKey {
		for g, n := range ls.byGroup {
			if only != 0 && g.openSeq != only {
				continue
			}
			if out == nil {
				out = map[uint64][]wire.HeldBack{}
			}
			out[g.openSeq] = append(out[g.openSeq], wire.HeldBack{Kind: k.kind, Name: k.name, Paused: ls.Paused, Jobs: n})
		}
	}
	for _, hb := range out {
		slices.SortFunc(hb, func(a, b wire.HeldBack) int {
			return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name))
		})
	}
	return out
}

// inspectGroups lists the tracked incarnations in arrival order, then the retained ones, the
// latest first; each list bounded by wire.MaxInspectGroups. w is groupWaits' answer.
func (e *Engine) inspectGroups(w waits) []wire.GroupLive {
	var out []wire.GroupLive
	aside := e.aside()
	for r := range e.groups.table.all() {
		if len(out) == wire.MaxInspectGroups {
			break
		}
		out = append(out, e.groupLive(r, w, aside))
	}
	tracked := len(out)
	for id, r := range e.retention.retained.newestFirst() {
		if len(out)-tracked == wire.MaxInspectGroups {
			break
		}
		out = append(out, retainedLive(id, r))
	}
	return out
}

// StandbyStatus is a standby coordinator, from its latest announcement.
type StandbyStatus struct {
	Holder   string    `json:"holder"` // host/pid
	Since    time.Time `json:"since"`  // waiting for the lease since
	LastSeen time.Time `json:"last_seen"`
}
