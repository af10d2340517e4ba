package coordinator

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

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

// inspectQuery is an inspection request handed to the loop.
type inspectQuery struct {
	req   wire.InspectRequest
	reply chan wire.InspectReply
}

// inspector is the term's inspection state: the channel its responder hands requests to the
// loop on (read by the loop only), and the standbys heard (owned by standbys' mutex).
type inspector struct {
	ch       chan inspectQuery
	standbys standbys
}

func newInspector() *inspector { return &inspector{ch: make(chan inspectQuery)} }

// subscribeInspect starts the inspection responder and the standby listener of the term.
func (r *run) subscribeInspect() error {
	sub, err := r.c.nc.Subscribe(r.names.InspectSubject(), r.serveInspect)
	if err != nil {
		return err
	}
	r.stop = append(r.stop, func() { _ = sub.Unsubscribe() })
	sb, err := r.c.nc.Subscribe(r.names.StandbySubject(), func(m *nats.Msg) {
		a, err := wire.ParseStandbyAnnounce(m.Data)
		if err != nil {
			r.log.Debug().Err(err).Msg("ignoring a malformed standby announcement")
			return
		}
		r.insp.standbys.heard(a, time.Now())
	})
	if err != nil {
		return err
	}
	r.stop = append(r.stop, func() { _ = sb.Unsubscribe() })
	return nil
}

// serveInspect answers an inspection request: a bad one at once, with the reason; a good one
// from the loop.
func (r *run) serveInspect(m *nats.Msg) {
	req, err := wire.ParseInspectRequest(m.Data)
	var rep wire.InspectReply
	if err != nil {
		rep.Error = err.Error()
	} else {
		q := inspectQuery{req: req, reply: make(chan wire.InspectReply, 1)}
		select {
		case r.insp.ch <- q:
		case <-r.done:
			return
		case <-time.After(2 * time.Second):
			return
		}
		rep = <-q.reply
	}
	if err := m.Respond(rep.Marshal()); err != nil && !errors.Is(err, nats.ErrMsgNoReply) {
		r.log.Warn().Err(err).Msg("inspect reply failed")
	}
}

// inspect answers a valid request from the engine's state. Called on the loop.
func (e *engine) inspect(req wire.InspectRequest) wire.InspectReply {
	switch {
	case req.Groups:
		return wire.InspectReply{Groups: e.inspectGroups(e.groupWaits(nil))}
	case req.Job != 0:
		return e.inspectJob(req.Job, req.Group)
	}
	var rep wire.InspectReply
	if g := e.groups.byID[req.Group]; g != nil {
		gl := e.groupLive(g, e.groupWaits(g))
		rep.Group = &gl
		return rep
	}
	for i := len(e.retention.retained) - 1; i >= 0; i-- {
		if e.retention.retained[i].id == req.Group {
			gl := retainedLive(&e.retention.retained[i])
			rep.Group = &gl
			break
		}
	}
	return rep
}

func (e *engine) inspectJob(id uint64, hint string) wire.InspectReply {
	st, ok := e.idx.State(id)
	if !ok {
		// Not tracked: its group is complete and forgotten (or it never existed). The retained
		// incarnations opened before it may hold its outcome, nearest first.
		var rep wire.InspectReply
		seq := wire.JobSeq(id) // the message that stores it
		for i := len(e.retention.retained) - 1; i >= 0 && len(rep.Candidates) < wire.MaxInspectGroups; i-- {
			r := &e.retention.retained[i]
			if (hint == "" || r.id == hint) && r.openSeq < seq && (r.jobsSeq == 0 || seq <= r.jobsSeq) {
				rep.Candidates = append(rep.Candidates, retainedLive(r))
			}
		}
		// The incarnation opened last before the job is the likeliest to hold it: read first.
		slices.SortFunc(rep.Candidates, func(a, b wire.GroupLive) int { return cmp.Compare(b.Incarnation, a.Incarnation) })
		return rep
	}
	jl := &wire.JobLive{ID: id, State: st.String()}
	var g *group
	if j := e.jobs[id]; j != nil {
		g = j.g
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
	} else if g = e.incarnationOf(id, hint); g != nil {
		jl.Group, jl.Incarnation = g.id, g.openSeq
	}
	if st == jobindex.Pending {
		e.whyPending(jl, g)
	}
	return wire.InspectReply{Job: jl}
}

// whyPending says why pending job jl of g (nil if not known) does not start, if more than a
// slot is wanted: the limit holding it back (or that would, were it offered now: a job still in
// its group's queue has not met its limits yet), or the resources it requires that no live
// worker holds.
func (e *engine) whyPending(jl *wire.JobLive, g *group) {
	ls := (*limitState)(nil)
	if j := e.jobs[jl.ID]; j != nil && j.heldBy != nil {
		ls = j.heldBy
	} else if g != nil {
		ls = holdingBack(e.limitsOf(nil, jl.ID, g), e.cfg.now())
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

// incarnationOf returns the tracked incarnation holding job id, if the hint (the job's group ID,
// read from its stored message) or the ID ranges of the incarnations tell it: a job belongs to
// the latest incarnation of its group ID opened before it.
func (e *engine) incarnationOf(id uint64, hint string) *group {
	var found *group
	n := 0
	seq := wire.JobSeq(id) // the message that stores it
	for _, g := range e.groups.incarnations {
		if g.openSeq >= seq || seq > g.lastSeq || (hint != "" && g.id != hint) {
			continue
		}
		n++
		if found == nil || g.openSeq > found.openSeq {
			found = g
		}
	}
	if hint == "" && n > 1 {
		return nil // groups interleave there: without the hint it cannot be told
	}
	return found
}

// waits is why the pending and delayed jobs of the groups inspected wait (see groupWaits).
type waits struct {
	held        map[*group][]wire.HeldBack
	unplaceable map[*group]int
	nextRunAt   map[*group]time.Time
}

// groupWaits gathers, per group (or for group only, if not nil), the limits holding its jobs
// back (heldBack), its jobs set aside because they require resources no live worker holds, and
// when its first delayed job runs. One pass over the parked jobs and the delayed ones serves
// every group listed.
func (e *engine) groupWaits(only *group) waits {
	w := waits{held: e.heldBack(only), unplaceable: map[*group]int{}, nextRunAt: map[*group]time.Time{}}
	for _, j := range e.retries.parked {
		if only == nil || j.g == only {
			w.unplaceable[j.g]++
		}
	}
	for _, d := range e.delays.heap {
		if only != nil && d.g != only {
			continue
		}
		if st, _ := e.idx.State(d.id); st != jobindex.Delayed {
			continue // canceled, or released before a restart: dropped when it comes up
		}
		if at, ok := w.nextRunAt[d.g]; !ok || d.at < at.UnixNano() {
			w.nextRunAt[d.g] = time.Unix(0, d.at)
		}
	}
	return w
}

func (e *engine) groupLive(g *group, w waits) wire.GroupLive {
	gc, _ := e.idx.GroupCounts(g.idxKey)
	gl := wire.GroupLive{
		ID: g.id, Incarnation: g.openSeq, Sealed: g.sealed, Abandoned: g.abandoned, Complete: g.complete,
		OpenedAt: g.openedAt, Admitted: g.admitted, Queued: e.sched.Queued(g), InFlight: g.inFlight, Jobs: counts(gc),
		HeldBack: w.held[g], Unplaceable: w.unplaceable[g], NextRunAt: w.nextRunAt[g],
	}
	if e.isWaiting(g) {
		gl.WaitsFor = e.waitsFor(g)
	}
	gl.FollowedBy = e.dependentsOf(g, maxListedDependents)
	gl.Priority = g.priority
	if !g.sealed {
		gl.LastHeard = g.lastHeard
	}
	return gl
}

func retainedLive(r *retained) wire.GroupLive {
	return wire.GroupLive{ID: r.id, Incarnation: r.openSeq, Sealed: true, Complete: true, CompletedAt: r.at, SummarySeq: r.summarySeq}
}

// heldBack lists, per group (or for group only, if not nil), the limits holding some of its
// jobs back and how many each holds: the answer to "why does its pending job not start?". Each
// limit counts its held jobs per group as it holds and releases them, so this costs a lookup
// per limit and group, not a pass over the jobs held.
func (e *engine) heldBack(only *group) map[*group][]wire.HeldBack {
	var out map[*group][]wire.HeldBack
	for k, ls := range e.limits.byKey {
		for g, n := range ls.byGroup {
			if only != nil && g != only {
				continue
			}
			if out == nil {
				out = map[*group][]wire.HeldBack{}
			}
			out[g] = append(out[g], wire.HeldBack{Kind: k.kind, Name: k.name, Paused: ls.Paused, Jobs: n})
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
func (e *engine) inspectGroups(w waits) []wire.GroupLive {
	var out []wire.GroupLive
	for _, g := range e.groups.arrival {
		if len(out) == wire.MaxInspectGroups {
			break
		}
		out = append(out, e.groupLive(g, w))
	}
	for i, n := len(e.retention.retained)-1, 0; i >= 0 && n < wire.MaxInspectGroups; i, n = i-1, n+1 {
		out = append(out, retainedLive(&e.retention.retained[i]))
	}
	return out
}

// StandbyStatus is a standby coordinator, from its latest announcement.
type StandbyStatus struct {
	Holder   string    `json:"holder"` // host/pid
	Since    time.Time `json:"since"`  // waiting for the lease since
	LastSeen time.Time `json:"last_seen"`
}

// standbys are the standby coordinators heard lately. Written by the standby subscription, read
// by the status responder; mu guards m.
type standbys struct {
	mu sync.Mutex
	m  map[string]StandbyStatus
}

func (s *standbys) heard(a wire.StandbyAnnounce, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]StandbyStatus{}
	}
	s.m[a.Holder] = StandbyStatus{Holder: a.Holder, Since: a.Since, LastSeen: now}
}

// list returns the standbys heard within three announcement intervals, by holder, and forgets
// the others.
func (s *standbys) list(now time.Time) []StandbyStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []StandbyStatus
	for h, st := range s.m {
		if now.Sub(st.LastSeen) > 3*wire.StandbyInterval {
			delete(s.m, h)
			continue
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b StandbyStatus) int { return cmp.Compare(a.Holder, b.Holder) })
	return out
}

// announceStandby publishes a standby announcement every wire.StandbyInterval, the first after
// one interval (a coordinator that takes a free lease at once never announces), until the
// returned stop is called.
func (c *Coordinator) announceStandby(ctx context.Context, holder string) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		a := wire.StandbyAnnounce{Holder: holder, Since: time.Now()}
		t := time.NewTicker(wire.StandbyInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := c.nc.Publish(c.names.StandbySubject(), a.Marshal()); err != nil {
					c.cfg.Logger.Debug().Err(err).Msg("standby announcement failed")
				}
			}
		}
	}()
	return func() { cancel(); <-done }
}
