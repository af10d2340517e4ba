package coordinator

import (
	"context"
	"maps"
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
	waiting   map[uint64]*waitingGroup // by open sequence: groups whose jobs wait (unmet edges, or a ready record on its way)
	byInc     map[uint64][]uint64      // dependents' open sequences, by the incarnation they wait on
	byNext    map[string][]uint64      // dependents waiting for a group ID's next incarnation
	byRedrive map[string][]uint64      // dependents waiting for a redrive of a group ID that failed
	// results and failedOn outlive the wait, until the group is forgotten: how the groups it
	// ran after ended (for its jobs' batches), and the group whose end canceled it.
	results  map[uint64]string
	failedOn map[uint64]string
}

// waitingGroup is a group held by its edges.
type waitingGroup struct {
	id         string
	openSeq    uint64
	openedAt   time.Time
	edges      []edge
	readyAsked bool
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

// holdOpen takes the edges of g's open: g waits, and its edges are bound now, or at the end of
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
	w := &waitingGroup{id: g.id, openSeq: g.openSeq, openedAt: g.openedAt, edges: make([]edge, len(edges))}
	for i, a := range edges {
		w.edges[i] = edge{After: a}
	}
	if e.deps.waiting == nil { // most namespaces never use edges
		e.deps = deps{waiting: map[uint64]*waitingGroup{}, byInc: map[uint64][]uint64{}, byNext: map[string][]uint64{},
			byRedrive: map[string][]uint64{}, results: map[uint64]string{}, failedOn: map[uint64]string{}}
	}
	e.deps.waiting[g.openSeq] = w
	if !e.replaying() {
		e.bindEdges(w, false)
	}
	return true, ""
}

// isWaiting reports whether g is held by its edges.
func (e *engine) isWaiting(g *group) bool { return e.deps.waiting[g.openSeq] != nil }

// cycle reports a group through which a new incarnation of id with edges would wait on itself:
// a group it would (transitively) run after that waits for id's next incarnation.
func (e *engine) cycle(id string, edges []wire.After) string {
	if len(e.deps.byNext[id]) == 0 {
		return ""
	}
	seen := map[uint64]bool{}
	var walk func(seq uint64) string
	walk = func(seq uint64) string {
		w := e.deps.waiting[seq]
		if w == nil || seen[seq] {
			return ""
		}
		seen[seq] = true
		for _, ed := range w.edges {
			if ed.met {
				continue
			}
			if ed.bound == 0 && ed.Group == id {
				return w.id
			}
			if found := walk(ed.bound); found != "" {
				return found
			}
		}
		return ""
	}
	for _, a := range edges {
		if g := e.groups.byID[a.Group]; g != nil {
			if found := walk(g.openSeq); found != "" {
				return found
			}
		}
	}
	return ""
}

// bindEdges binds w's unbound edges (see deps) and decides those whose incarnation is complete;
// all looks at every tracked incarnation (after a restart), not only each ID's latest.
func (e *engine) bindEdges(w *waitingGroup, all bool) {
	for i := range w.edges {
		ed := &w.edges[i]
		if ed.met || ed.bound != 0 {
			continue
		}
		ed.bound = ed.Incarnation
		if ed.bound == 0 {
			ed.bound = e.latestIncarnation(ed.Group, w.openSeq, all)
		}
		switch dep := e.groups.incarnations[ed.bound]; {
		case ed.bound == 0:
			e.deps.byNext[ed.Group] = append(e.deps.byNext[ed.Group], w.openSeq)
		case dep != nil && !dep.complete:
			e.deps.byInc[ed.bound] = append(e.deps.byInc[ed.bound], w.openSeq)
		case dep != nil:
			e.decideEdge(w, ed, e.stateOf(dep))
		default:
			st, known := e.retainedState(ed.Group, ed.bound)
			if !known {
				// Complete and past its retention, or never stored: nothing says it succeeded.
				st = edgeState{failed: 1}
			}
			e.decideEdge(w, ed, st)
		}
	}
	e.edgesChanged(w)
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

// decideEdge decides ed of w, whose incarnation ended as st.
func (e *engine) decideEdge(w *waitingGroup, ed *edge, st edgeState) {
	ed.result = wire.AfterResult{Group: ed.Group, Incarnation: ed.bound, When: ed.When.String(),
		Jobs: st.jobs, Done: st.done, Failed: st.failed, Canceled: st.canceled, FailedIDs: st.failedIDs, More: st.more}
	switch {
	case ed.When == wire.WhenComplete,
		ed.When == wire.WhenSuccess && st.succeeded(),
		ed.When == wire.WhenFailure && !st.succeeded():
		ed.met, ed.failed = true, false
	case ed.When == wire.WhenSuccess && ed.IfFailed == wire.IfFailedWait:
		ed.failed = true
		e.deps.byRedrive[ed.Group] = append(e.deps.byRedrive[ed.Group], w.openSeq)
	case e.deps.failedOn[w.openSeq] == "":
		// Waiting until the cancel is read back (cancelGroup), so that its jobs end canceled
		// there, as at replay.
		e.deps.failedOn[w.openSeq] = ed.Group
		e.stats.AfterCanceled++
		e.out.depCancels = append(e.out.depCancels, depControl{id: w.id, openSeq: w.openSeq})
		e.log.Info().Str("group", w.id).Str("after", ed.Group).Str("when", ed.When.String()).Msg("group canceled: a group it runs after ended otherwise")
	}
}

// edgesChanged asks for w's ready record once every edge is met.
func (e *engine) edgesChanged(w *waitingGroup) {
	if e.deps.waiting[w.openSeq] != w || w.readyAsked || e.deps.failedOn[w.openSeq] != "" {
		return
	}
	if g := e.groups.incarnations[w.openSeq]; g != nil && g.cancelReq {
		return
	}
	for _, ed := range w.edges {
		if !ed.met {
			return
		}
	}
	w.readyAsked = true
	e.out.readies = append(e.out.readies, depControl{id: w.id, openSeq: w.openSeq})
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
	for _, seq := range waiting {
		w := e.deps.waiting[seq]
		if w == nil {
			continue
		}
		for i := range w.edges {
			ed := &w.edges[i]
			if ed.Group == g.id && !ed.met && (ed.bound == 0 || ed.failed && g.redriven) {
				ed.bound, ed.failed = g.openSeq, false
				e.deps.byInc[g.openSeq] = append(e.deps.byInc[g.openSeq], seq)
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
	for _, seq := range waiting {
		w := e.deps.waiting[seq]
		if w == nil {
			continue
		}
		for i := range w.edges {
			if ed := &w.edges[i]; ed.bound == g.openSeq && !ed.met && !ed.failed {
				e.decideEdge(w, ed, st)
			}
		}
		e.edgesChanged(w)
	}
}

// applyReady releases the waiting group its ready record names (wire.OpReady).
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
	if !e.isWaiting(g) {
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
		e.deps.results[g.openSeq] = string(wire.AppendAfterResults(nil, results))
	}
	if !e.replaying() && !g.cancelReq && !g.complete {
		e.schedule(g, slices.Collect(e.idx.GroupJobs(g.idxKey, jobindex.Pending)))
	}
}

// stopWaiting stops holding g: released, canceled or complete.
func (e *engine) stopWaiting(g *group) { delete(e.deps.waiting, g.openSeq) }

// forgetDeps drops what deps keeps of a forgotten group.
func (e *engine) forgetDeps(g *group) {
	if e.deps.waiting != nil {
		delete(e.deps.waiting, g.openSeq)
		delete(e.deps.results, g.openSeq)
		delete(e.deps.failedOn, g.openSeq)
	}
}

// afterResults is how the groups g ran after ended, encoded for its jobs' batches ("" for none).
func (e *engine) afterResults(g *group) string { return e.deps.results[g.openSeq] }

// canceledFor is the group whose end canceled g ("" if none did).
func (e *engine) canceledFor(g *group) string { return e.deps.failedOn[g.openSeq] }

// depsCanceled records, as a coordinator's cancel is read (at replay too), the group whose end
// canceled g.
func (e *engine) depsCanceled(g *group, dep string) {
	if e.deps.failedOn == nil {
		e.deps.failedOn = map[uint64]string{}
	}
	e.deps.failedOn[g.openSeq] = dep
}

// answerLateFor is how old an open with edges read during replay may be for the coordinator to
// answer it at replay's end: its producer may still be waiting (Publish waits RequestTimeout).
const answerLateFor = 30 * time.Second

// bindAfterReplay binds the edges of the groups replay left waiting (no ready record read), now
// that the complete incarnations are known; the completions endReplay decides next decide them.
// It answers the opens stored lately, whose producers may still wait.
func (e *engine) bindAfterReplay(opens []heldOpen) {
	for _, o := range opens {
		e.answer(o.seq, o.c, wire.ControlAnswer{OK: true})
	}
	for _, seq := range slices.Sorted(maps.Keys(e.deps.waiting)) {
		e.bindEdges(e.deps.waiting[seq], true)
	}
}

// depControl names a group whose ready record or cancel the run stores.
type depControl struct {
	id      string
	openSeq uint64
}

// readyRecord is the ready record the run stores for the waiting group at openSeq.
func (e *engine) readyRecord(id string, openSeq uint64) (wire.GroupControl, []byte) {
	var results []wire.AfterResult
	if w := e.deps.waiting[openSeq]; w != nil {
		results = make([]wire.AfterResult, len(w.edges))
		for i, ed := range w.edges {
			results[i] = ed.result
		}
	}
	return wire.GroupControl{Group: id, Op: wire.OpReady, Incarnation: openSeq, Proof: e.key.ReadyProof(id, openSeq)},
		wire.AppendAfterResults(nil, results)
}

// missingDeps lists the groups waiting for a group never published (for dependency_missing).
func (e *engine) missingDeps() []missingDep {
	var out []missingDep
	for id, list := range e.deps.byNext {
		for _, seq := range list {
			if w := e.deps.waiting[seq]; w != nil {
				out = append(out, missingDep{group: w.id, waitsFor: id, since: w.openedAt})
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
	for _, list := range [][]uint64{e.deps.byInc[g.openSeq], e.deps.byNext[g.id], e.deps.byRedrive[g.id]} {
		for _, seq := range list {
			if len(out) == max {
				return out
			}
			if w := e.deps.waiting[seq]; w != nil && !slices.Contains(out, w.id) {
				out = append(out, w.id)
			}
		}
	}
	return out
}

// waitsFor describes what the waiting group g waits for, for status and inspection.
func (e *engine) waitsFor(g *group) []string {
	w := e.deps.waiting[g.openSeq]
	if w == nil {
		return nil
	}
	var out []string
	for _, ed := range w.edges {
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
// messages are built here, on the loop, which owns the engine.
func (r *run) storeDepControls(ctx context.Context, readies, cancels []depControl) {
	var msgs []*nats.Msg
	for _, d := range readies {
		c, body := r.e.readyRecord(d.id, d.openSeq)
		m := nats.NewMsg(r.names.GroupSubject(wire.GroupToken(d.id)))
		m.Header, m.Data = c.Header(), body
		msgs = append(msgs, m)
	}
	for _, d := range cancels {
		tok := wire.GroupToken(d.id)
		m := nats.NewMsg(r.names.GroupSubject(tok))
		m.Header = wire.GroupControl{Group: d.id, Op: wire.OpCancel, AfterFailed: r.e.deps.failedOn[d.openSeq]}.Header()
		m.Header.Set(wire.HdrMsgID, "dep-cancel/"+tok+"/"+strconv.FormatUint(d.openSeq, 10))
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
