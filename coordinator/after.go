package coordinator

import (
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weavejobs/weave/internal/jobindex"
	"github.com/weavejobs/weave/internal/wire"
)

// deps is the engine's part that holds groups back until the groups they run after have
// completed (wire.After). A group with edges is held from its open: its jobs are admitted and
// counted, but it is not in the scheduler (no feeder slot, no worker slot). When every edge is
// met, the engine asks for a ready record (wire.OpReady, written to the group's control subject
// by the run) and releases the group when that record comes back through the feed, so a replay
// releases it at the same place; an edge that can no longer be met cancels the group the same
// way, with a cancel the coordinator stores. Follow-ups are groups with an edge to the group
// they follow (the dispatcher publishes them with it), so they are held and released alike.
//
// Binding: an edge names an incarnation (the dispatcher's, for a follow-up) or lets the
// coordinator bind it to the group ID's latest incarnation opened before the dependent (tracked,
// or complete and retained), else to its next one. Replay binds after it has read the outcomes,
// so that complete incarnations are known as they were live. Owned by the loop.
type deps struct {
	byInc     map[uint64][]*group // dependents waiting on an incarnation, by its open sequence
	byNext    map[string][]*group // dependents waiting for a group ID's next incarnation
	byRedrive map[string][]*group // dependents waiting for a redrive of a group ID that failed
	waiting   map[*group]bool     // groups whose jobs wait: unmet edges, or a ready record on its way
}

// edge is one of a group's edges, as bound.
type edge struct {
	wire.After
	bound  uint64 // the incarnation it waits on; 0 while it waits for the group ID's next one
	met    bool
	failed bool // its group completed without succeeding; the edge waits for a redrive (IfFailedWait)
	result wire.AfterResult
}

// edgeState is how an edge's incarnation ended, for deciding the edge.
type edgeState struct {
	jobs, done, failed, canceled uint64
	failedIDs                    []uint64
	more                         bool
}

func (s edgeState) succeeded() bool { return s.failed == 0 && s.canceled == 0 }

// holdOpen takes the edges of g's open: g is held, and its edges are bound now, or at the end of
// replay. It reports false when the open must be refused, for a cycle (its reason given).
func (e *engine) holdOpen(g *group, edges []wire.After) (ok bool, reason string) {
	if len(edges) == 0 {
		return true, ""
	}
	if !e.replaying() {
		if dep := e.cycle(g.id, edges); dep != "" {
			return false, "group " + g.id + " would run after itself through " + dep + ": a cycle"
		}
	}
	g.after = make([]edge, len(edges))
	for i, a := range edges {
		g.after[i] = edge{After: a}
	}
	e.depsInit()
	e.deps.waiting[g] = true
	if !e.replaying() {
		e.bindEdges(g, false)
	}
	return true, ""
}

// depsInit makes the maps of deps on first use: most namespaces never use edges.
func (e *engine) depsInit() {
	if e.deps.waiting == nil {
		e.deps = deps{byInc: map[uint64][]*group{}, byNext: map[string][]*group{}, byRedrive: map[string][]*group{}, waiting: map[*group]bool{}}
	}
}

// cycle reports a group through which a new incarnation of id with edges would wait on itself:
// a group it would (transitively) run after that waits for id's next incarnation.
func (e *engine) cycle(id string, edges []wire.After) string {
	if len(e.deps.byNext[id]) == 0 {
		return ""
	}
	seen := map[*group]bool{}
	var walk func(g *group) string
	walk = func(g *group) string {
		if g == nil || seen[g] || !e.deps.waiting[g] {
			return ""
		}
		seen[g] = true
		for _, ed := range g.after {
			if ed.met {
				continue
			}
			if ed.bound == 0 && ed.Group == id {
				return g.id
			}
			if found := walk(e.groups.incarnations[ed.bound]); found != "" {
				return found
			}
		}
		return ""
	}
	for _, a := range edges {
		if found := walk(e.groups.byID[a.Group]); found != "" {
			return found
		}
	}
	return ""
}

// bindEdges binds g's unbound edges (see deps) and decides those whose incarnation is complete;
// all looks at every tracked incarnation (after a restart), not only each ID's latest.
func (e *engine) bindEdges(g *group, all bool) {
	for i := range g.after {
		ed := &g.after[i]
		if ed.met || ed.bound != 0 {
			continue
		}
		ed.bound = ed.Incarnation
		if ed.bound == 0 {
			ed.bound = e.latestIncarnation(ed.Group, g.openSeq, all)
		}
		switch dep := e.groups.incarnations[ed.bound]; {
		case ed.bound == 0:
			e.deps.byNext[ed.Group] = append(e.deps.byNext[ed.Group], g)
		case dep != nil && !dep.complete:
			e.deps.byInc[ed.bound] = append(e.deps.byInc[ed.bound], g)
		case dep != nil:
			e.decideEdge(g, ed, e.stateOf(dep))
		default:
			st, known := e.retainedState(ed.Group, ed.bound)
			if !known {
				// Complete and past its retention, or never stored: nothing says it succeeded.
				st = edgeState{failed: 1}
			}
			e.decideEdge(g, ed, st)
		}
	}
	e.edgesChanged(g)
}

// latestIncarnation is the open sequence of id's latest incarnation opened before seq, tracked
// or retained; 0 if there is none.
func (e *engine) latestIncarnation(id string, before uint64, all bool) uint64 {
	var latest uint64
	if g := e.groups.byID[id]; g != nil && g.openSeq < before {
		latest = g.openSeq
	}
	// Retained groups are in completion order: a dependency is most often a recent one.
	rs := e.retention.retained
	for i := len(rs) - 1; i >= 0; i-- {
		if r := rs[i]; r.id == id && r.openSeq < before && r.openSeq > latest {
			latest = r.openSeq
		}
	}
	if all {
		// After a restart, an earlier incarnation still in JOBS may not be byID's.
		for seq, g := range e.groups.incarnations {
			if g.id == id && seq < before && seq > latest {
				latest = seq
			}
		}
	}
	return latest
}

// stateOf is how a complete tracked incarnation ended.
func (e *engine) stateOf(g *group) edgeState {
	st := edgeState{jobs: g.admitted, done: g.done, failed: g.failed, canceled: g.canceled}
	if g.failed > 0 {
		for id := range e.idx.GroupJobs(g.idxKey, jobindex.Failed) {
			if len(st.failedIDs) == wire.MaxAfterFailedIDs {
				st.more = true
				break
			}
			st.failedIDs = append(st.failedIDs, id)
		}
	}
	return st
}

// retainedState is how a complete, forgotten incarnation ended, while its outcomes are retained.
func (e *engine) retainedState(id string, openSeq uint64) (edgeState, bool) {
	for _, r := range e.retention.retained {
		if r.id == id && r.openSeq == openSeq {
			return edgeState{jobs: r.sum.Jobs, done: r.sum.Done, failed: r.sum.Failed, canceled: r.sum.Canceled, more: r.sum.Failed > 0}, true
		}
	}
	return edgeState{}, false
}

// decideEdge decides ed of g, whose incarnation ended as st.
func (e *engine) decideEdge(g *group, ed *edge, st edgeState) {
	ed.result = wire.AfterResult{Group: ed.Group, Incarnation: ed.bound, When: ed.When.String(),
		Jobs: st.jobs, Done: st.done, Failed: st.failed, Canceled: st.canceled, FailedIDs: st.failedIDs, More: st.more}
	switch {
	case ed.When == wire.WhenComplete,
		ed.When == wire.WhenSuccess && st.succeeded(),
		ed.When == wire.WhenFailure && !st.succeeded():
		ed.met, ed.failed = true, false
	case ed.When == wire.WhenSuccess && ed.IfFailed == wire.IfFailedWait:
		ed.failed = true
		e.deps.byRedrive[ed.Group] = append(e.deps.byRedrive[ed.Group], g)
	case g.afterFailed == "":
		// Held until the cancel is read back (cancelGroup), so that its jobs end canceled
		// there, as at replay.
		g.afterFailed = ed.Group
		e.stats.AfterCanceled++
		e.out.depCancels = append(e.out.depCancels, g)
		e.log.Info().Str("group", g.id).Str("after", ed.Group).Str("when", ed.When.String()).Msg("group canceled: a group it runs after ended otherwise")
	}
}

// edgesChanged asks for g's ready record once every edge is met.
func (e *engine) edgesChanged(g *group) {
	if !e.deps.waiting[g] || g.readyAsked || g.cancelReq || g.afterFailed != "" {
		return
	}
	for _, ed := range g.after {
		if !ed.met {
			return
		}
	}
	g.readyAsked = true
	e.out.readies = append(e.out.readies, g)
}

// openedForDeps binds the edges waiting for a new incarnation of g's ID (or, for a redrive, for
// a redrive of it) to g.
func (e *engine) openedForDeps(g *group) {
	if e.deps.waiting == nil || e.replaying() {
		return
	}
	waiting := e.deps.byNext[g.id]
	delete(e.deps.byNext, g.id)
	if g.redriven {
		waiting = append(waiting, e.deps.byRedrive[g.id]...)
		delete(e.deps.byRedrive, g.id)
	}
	for _, d := range waiting {
		if !e.deps.waiting[d] {
			continue
		}
		for i := range d.after {
			ed := &d.after[i]
			if ed.Group == g.id && !ed.met && (ed.bound == 0 || ed.failed && g.redriven) {
				ed.bound, ed.failed = g.openSeq, false
				e.deps.byInc[g.openSeq] = append(e.deps.byInc[g.openSeq], d)
			}
		}
	}
}

// completedForDeps decides the edges bound to g, which has just completed.
func (e *engine) completedForDeps(g *group) {
	if e.deps.waiting == nil {
		return
	}
	waiting := e.deps.byInc[g.openSeq]
	delete(e.deps.byInc, g.openSeq)
	if len(waiting) == 0 {
		return
	}
	st := e.stateOf(g)
	for _, d := range waiting {
		if !e.deps.waiting[d] {
			continue
		}
		for i := range d.after {
			if ed := &d.after[i]; ed.bound == g.openSeq && !ed.met && !ed.failed {
				e.decideEdge(d, ed, st)
			}
		}
		e.edgesChanged(d)
	}
}

// applyReady releases the held group its ready record names (wire.OpReady).
func (e *engine) applyReady(subject string, seq uint64, c wire.GroupControl, g *group, data []byte) {
	switch {
	case !e.key.VerifyReady(c.Proof, c.Group, c.Incarnation):
		e.reject(subject, seq, "ready record of group "+c.Group+" without a coordinator's proof")
		return
	case g == nil || g.openSeq != c.Incarnation:
		g = e.groups.incarnations[c.Incarnation]
		if g == nil || g.id != c.Group {
			return // an incarnation gone already: a record written twice
		}
	}
	g.lastSeq = max(g.lastSeq, seq)
	if !e.deps.waiting[g] {
		return // written again after a restart: the first one released it
	}
	results, err := wire.ParseAfterResults(data)
	if err != nil {
		e.reject(subject, seq, err.Error())
		return
	}
	e.stopWaiting(g)
	e.stats.AfterReleased++
	if len(results) > 0 {
		g.afterResults = string(wire.AppendAfterResults(nil, results))
	}
	for i := range g.after {
		g.after[i].met = true
	}
	if !e.replaying() && !g.cancelReq && !g.complete {
		e.schedule(g, slices.Collect(e.idx.GroupJobs(g.idxKey, jobindex.Pending)))
	}
}

// stopWaiting stops holding g: released, canceled or forgotten.
func (e *engine) stopWaiting(g *group) {
	delete(e.deps.waiting, g)
}

// answerLateFor is how old an open with edges read during replay may be for the coordinator to
// answer it at replay's end: its producer may still be waiting (Publish waits RequestTimeout).
const answerLateFor = 30 * time.Second

// bindAfterReplay binds the edges of the groups replay left held (no ready record read), now
// that the complete incarnations are known; the completions endReplay decides next decide them.
// It answers the opens stored lately, whose producers may still wait.
func (e *engine) bindAfterReplay(opens []heldOpen) {
	for _, o := range opens {
		e.answer(o.seq, o.c, wire.ControlAnswer{OK: true})
	}
	if e.deps.waiting == nil {
		return
	}
	for _, g := range e.groups.arrival {
		if e.deps.waiting[g] {
			e.bindEdges(g, true)
		}
	}
}

// readyRecord is the ready record the run stores for g.
func (e *engine) readyRecord(g *group) (wire.GroupControl, []byte) {
	results := make([]wire.AfterResult, len(g.after))
	for i, ed := range g.after {
		results[i] = ed.result
	}
	return wire.GroupControl{Group: g.id, Op: wire.OpReady, Incarnation: g.openSeq, Proof: e.key.ReadyProof(g.id, g.openSeq)},
		wire.AppendAfterResults(nil, results)
}

// missingDeps lists the groups waiting for a group never published (for dependency_missing).
func (e *engine) missingDeps() []missingDep {
	var out []missingDep
	for id, list := range e.deps.byNext {
		for _, g := range list {
			if e.deps.waiting[g] {
				out = append(out, missingDep{group: g.id, waitsFor: id, since: g.openedAt})
			}
		}
	}
	return out
}

// maxListedDependents bounds the dependents status lists per group.
const maxListedDependents = 20

// dependentsOf lists the IDs of up to max groups waiting on g: bound to its incarnation, waiting
// for its ID's next one, or for a redrive of it.
func (e *engine) dependentsOf(g *group, max int) []string {
	if e.deps.waiting == nil {
		return nil
	}
	var out []string
	for _, list := range [][]*group{e.deps.byInc[g.openSeq], e.deps.byNext[g.id], e.deps.byRedrive[g.id]} {
		for _, d := range list {
			if len(out) == max {
				return out
			}
			if e.deps.waiting[d] && !slices.Contains(out, d.id) {
				out = append(out, d.id)
			}
		}
	}
	return out
}

// waitsFor describes what a waiting group waits for, for status and inspection.
func (g *group) waitsFor() []string {
	var out []string
	for _, ed := range g.after {
		switch {
		case ed.met:
		case ed.bound == 0:
			out = append(out, ed.Group+" ("+ed.When.String()+"; not published yet)")
		case ed.failed:
			out = append(out, ed.Group+" (did not succeed; waits for a redrive)")
		default:
			out = append(out, ed.Group+" ("+ed.When.String()+", incarnation "+strconv.FormatUint(ed.bound, 10)+")")
		}
	}
	return out
}

// storeDepControls stores the ready records of readies and a cancel of each group in cancels,
// trying again until they are stored or the term ends (the next term decides them again). The
// messages are built here, on the loop, which owns the groups.
func (r *run) storeDepControls(ctx context.Context, readies, cancels []*group) {
	var msgs []*nats.Msg
	for _, g := range readies {
		c, body := r.e.readyRecord(g)
		m := nats.NewMsg(r.names.GroupSubject(g.tok))
		m.Header, m.Data = c.Header(), body
		msgs = append(msgs, m)
	}
	for _, g := range cancels {
		m := nats.NewMsg(r.names.GroupSubject(g.tok))
		m.Header = wire.GroupControl{Group: g.id, Op: wire.OpCancel, AfterFailed: g.afterFailed}.Header()
		m.Header.Set(wire.HdrMsgID, "dep-cancel/"+g.tok+"/"+strconv.FormatUint(g.openSeq, 10))
		msgs = append(msgs, m)
	}
	for _, m := range msgs {
		r.wg.Go(func() {
			_ = r.retry(ctx, "store a dependency record", func(ctx context.Context) error {
				_, err := r.c.js.PublishMsg(ctx, m)
				return err
			})
		})
	}
}
