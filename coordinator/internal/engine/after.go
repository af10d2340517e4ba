package engine

import (
	"maps"
	"slices"
	"strconv"
	"time"

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

// holdOpen takes the edges of r's open (r is the new incarnation's record, not in the table
// yet): it waits, and its edges are bound now, or at the end of replay. It reports false when the
// open must be refused, for a cycle (its reason given).
func (e *Engine) holdOpen(r *groupRec, edges []wire.After) (ok bool, reason string) {
	if len(edges) == 0 {
		return true, ""
	}
	if !e.Replaying() {
		if dep := e.cycle(r.id, edges); dep != "" {
			return false, "group " + r.id + " would run after itself through " + dep + ": a cycle"
		}
	}
	w := &waitingGroup{id: r.id, openSeq: r.openSeq, openedAt: fromUnixNano(r.openedAt), edges: make([]edge, len(edges))}
	for i, a := range edges {
		w.edges[i] = edge{After: a}
	}
	if e.deps.waiting == nil { // most namespaces never use edges
		e.deps = deps{waiting: map[uint64]*waitingGroup{}, byInc: map[uint64][]uint64{}, byNext: map[string][]uint64{},
			byRedrive: map[string][]uint64{}, results: map[uint64]string{}, failedOn: map[uint64]string{}}
	}
	e.deps.waiting[r.openSeq] = w
	if !e.Replaying() {
		e.bindEdges(w, false)
	}
	return true, ""
}

// isWaiting reports whether the incarnation opened at seq is held by its edges.
func (e *Engine) isWaiting(seq uint64) bool { return e.deps.waiting[seq] != nil }

// cycle reports a group through which a new incarnation of id with edges would wait on itself:
// a group it would (transitively) run after that waits for id's next incarnation.
func (e *Engine) cycle(id string, edges []wire.After) string {
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
		if r := e.groups.table.latest(a.Group); r != nil {
			if found := walk(r.openSeq); found != "" {
				return found
			}
		}
	}
	return ""
}

// bindEdges binds w's unbound edges (see deps) and decides those whose incarnation is complete;
// all looks at every tracked incarnation (after a restart), not only each ID's latest.
func (e *Engine) bindEdges(w *waitingGroup, all bool) {
	for i := range w.edges {
		ed := &w.edges[i]
		if ed.met || ed.bound != 0 {
			continue
		}
		ed.bound = ed.Incarnation
		if ed.bound == 0 {
			ed.bound = e.latestIncarnation(ed.Group, w.openSeq, all)
		}
		var dep *groupRec
		if ed.bound != 0 {
			if dep = e.groups.table.get(ed.bound); dep != nil && dep.id != ed.Group {
				dep = nil // an incarnation of another group ID: nothing says ed.Group's succeeded
			}
		}
		switch {
		case ed.bound == 0:
			e.deps.byNext[ed.Group] = append(e.deps.byNext[ed.Group], w.openSeq)
		case dep != nil && !e.complete(dep):
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
func (e *Engine) latestIncarnation(id string, before uint64, all bool) uint64 {
	var latest uint64
	if r := e.groups.table.latest(id); r != nil && arrivedBefore(r.openSeq, before) {
		latest = r.openSeq
	}
	for r := range e.retention.ofID(id) {
		if arrivedBefore(r.openSeq, before) && arrivedBefore(latest, r.openSeq) {
			latest = r.openSeq
		}
	}
	if all {
		// After a restart, an earlier incarnation still in JOBS may not be the ID's latest.
		for r := range e.groups.table.all() {
			if !arrivedBefore(r.openSeq, before) {
				break // in arrival order
			}
			if r.id == id && arrivedBefore(latest, r.openSeq) {
				latest = r.openSeq
			}
		}
	}
	return latest
}

// stateOf is how a complete tracked incarnation, r, ended: from its *group's counts if it has
// one, else from the index.
func (e *Engine) stateOf(r *groupRec) edgeState {
	var st edgeState
	if g := e.liveOf(r); g != nil {
		st = edgeState{jobs: g.admitted, done: g.done, failed: g.failed, canceled: g.canceled}
	} else {
		c := e.recCounts(r)
		st = edgeState{jobs: c.Total(), done: c.Done, failed: c.Failed, canceled: c.Canceled}
	}
	if st.failed > 0 {
		for id := range e.groupJobs(r.openSeq, r.flags&recSingle != 0, jobindex.Failed) {
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
func (e *Engine) retainedState(id string, openSeq uint64) (edgeState, bool) {
	for r := range e.retention.ofID(id) {
		if r.openSeq == openSeq {
			sum := e.retention.summary(r)
			return edgeState{jobs: sum.Jobs, done: sum.Done, failed: sum.Failed, canceled: sum.Canceled, more: sum.Failed > 0}, true
		}
	}
	return edgeState{}, false
}

// decideEdge decides ed of w, whose incarnation ended as st.
func (e *Engine) decideEdge(w *waitingGroup, ed *edge, st edgeState) {
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
		e.out.DepCancels = append(e.out.DepCancels, DepControl{Id: w.id, OpenSeq: w.openSeq})
		e.log.Info().Str("group", w.id).Str("after", ed.Group).Str("when", ed.When.String()).Msg("group canceled: a group it runs after ended otherwise")
	}
}

// edgesChanged asks for w's ready record once every edge is met.
func (e *Engine) edgesChanged(w *waitingGroup) {
	if e.deps.waiting[w.openSeq] != w || w.readyAsked || e.deps.failedOn[w.openSeq] != "" {
		return
	}
	if r := e.groups.table.get(w.openSeq); r != nil {
		if g := e.liveOf(r); g != nil && g.cancelReq {
			return
		}
	}
	for _, ed := range w.edges {
		if !ed.met {
			return
		}
	}
	w.readyAsked = true
	e.out.Readies = append(e.out.Readies, DepControl{Id: w.id, OpenSeq: w.openSeq})
}

// openedForDeps binds the edges waiting for a new incarnation of r's ID (or, for a redrive, for
// a redrive of it) to r.
func (e *Engine) openedForDeps(r *groupRec) {
	if e.deps.waiting == nil || e.Replaying() {
		return
	}
	redriven := r.flags&recRedriven != 0
	waiting := e.deps.byNext[r.id]
	delete(e.deps.byNext, r.id)
	if redriven {
		waiting = append(waiting, e.deps.byRedrive[r.id]...)
		delete(e.deps.byRedrive, r.id)
	}
	for _, seq := range waiting {
		w := e.deps.waiting[seq]
		if w == nil {
			continue
		}
		for i := range w.edges {
			ed := &w.edges[i]
			if ed.Group == r.id && !ed.met && (ed.bound == 0 || ed.failed && redriven) {
				ed.bound, ed.failed = r.openSeq, false
				e.deps.byInc[r.openSeq] = append(e.deps.byInc[r.openSeq], seq)
			}
		}
	}
}

// completedForDeps decides the edges bound to g, which has just completed.
func (e *Engine) completedForDeps(g *group) {
	if e.deps.waiting == nil {
		return
	}
	waiting := e.deps.byInc[g.openSeq]
	delete(e.deps.byInc, g.openSeq)
	if len(waiting) == 0 {
		return
	}
	r := e.groups.table.get(g.openSeq)
	if r == nil {
		return
	}
	st := e.stateOf(r)
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

// applyReady releases the waiting group its ready record names (wire.OpReady): it joins the line
// for a feeder slot with its pending jobs, which waited in the index.
func (e *Engine) applyReady(subject string, seq uint64, c wire.GroupControl, r *groupRec, data []byte) {
	switch {
	case !e.key.VerifyReady(c.Proof, c.Group, c.Incarnation):
		e.Reject(subject, seq, "ready record of group "+c.Group+" without a coordinator's proof")
		return
	case r == nil || r.openSeq != c.Incarnation:
		r = e.groups.table.get(c.Incarnation)
		if r == nil || r.id != c.Group {
			return // an incarnation gone already: a record written twice
		}
	}
	g := e.liveOf(r)
	if g != nil {
		g.lastSeq = later(g.lastSeq, seq)
	} else {
		r.lastSeq = later(r.lastSeq, seq)
	}
	if !e.isWaiting(r.openSeq) {
		return // written again after a restart: the first one released it
	}
	results, err := wire.ParseAfterResults(data)
	if err != nil {
		e.Reject(subject, seq, err.Error())
		return
	}
	e.stopWaiting(r.openSeq)
	e.stats.AfterReleased++
	if len(results) > 0 {
		e.deps.results[r.openSeq] = string(wire.AppendAfterResults(nil, results))
	}
	if !e.Replaying() && (g == nil || !g.cancelReq) && !e.complete(r) && e.recCounts(r).Pending > 0 {
		e.enqueue(r) // replay's end puts it in the line (rebuildLine)
	}
}

// stopWaiting stops holding the incarnation opened at seq: released, canceled or complete.
func (e *Engine) stopWaiting(seq uint64) { delete(e.deps.waiting, seq) }

// forgetDeps drops what deps keeps of the forgotten incarnation opened at seq.
func (e *Engine) forgetDeps(seq uint64) {
	if e.deps.waiting != nil {
		delete(e.deps.waiting, seq)
		delete(e.deps.results, seq)
		delete(e.deps.failedOn, seq)
	}
}

// afterResults is how the groups g ran after ended, encoded for its jobs' batches ("" for none).
func (e *Engine) afterResults(g *group) string { return e.deps.results[g.openSeq] }

// CanceledFor is the group whose end canceled the incarnation opened at seq ("" if none did).
func (e *Engine) CanceledFor(seq uint64) string { return e.deps.failedOn[seq] }

// depsCanceled records, as a coordinator's cancel is read (at replay too), the group whose end
// canceled the incarnation opened at seq.
func (e *Engine) depsCanceled(seq uint64, dep string) {
	if e.deps.failedOn == nil {
		e.deps.failedOn = map[uint64]string{}
	}
	e.deps.failedOn[seq] = dep
}

// answerLateFor is how old an open with edges read during replay may be for the coordinator to
// answer it at replay's end: its producer may still be waiting (Publish waits RequestTimeout).
const answerLateFor = 30 * time.Second

// bindAfterReplay binds the edges of the groups replay left waiting (no ready record read), now
// that the complete incarnations are known; the completions endReplay decides next decide them.
// It answers the opens stored lately, whose producers may still wait.
func (e *Engine) bindAfterReplay(opens []heldOpen) {
	for _, o := range opens {
		e.answer(o.seq, o.c, wire.ControlAnswer{OK: true})
	}
	for _, seq := range slices.Sorted(maps.Keys(e.deps.waiting)) {
		e.bindEdges(e.deps.waiting[seq], true)
	}
}

// DepControl names a group whose ready record or cancel the run stores.
type DepControl struct {
	Id      string
	OpenSeq uint64
}

// ReadyRecord is the ready record the run stores for the waiting group at openSeq.
func (e *Engine) ReadyRecord(id string, openSeq uint64) (wire.GroupControl, []byte) {
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
func (e *Engine) missingDeps() []MissingDep {
	var out []MissingDep
	for id, list := range e.deps.byNext {
		for _, seq := range list {
			if w := e.deps.waiting[seq]; w != nil {
				out = append(out, MissingDep{Group: w.id, WaitsFor: id, Since: w.openedAt})
			}
		}
	}
	return out
}

// maxListedDependents bounds the dependents status lists per group.
const maxListedDependents = 20

// dependentsOf lists the IDs of up to max groups waiting on group ID id's incarnation opened at
// seq: bound to it, waiting for the ID's next one, or for a redrive of it.
func (e *Engine) dependentsOf(id string, seq uint64, max int) []string {
	if e.deps.waiting == nil {
		return nil
	}
	var out []string
	for _, list := range [][]uint64{e.deps.byInc[seq], e.deps.byNext[id], e.deps.byRedrive[id]} {
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

// waitsFor describes what the waiting incarnation opened at seq waits for, for status and
// inspection (nil if it does not wait).
func (e *Engine) waitsFor(seq uint64) []string {
	w := e.deps.waiting[seq]
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
