package coordinator

import (
	"container/heap"
	"slices"
	"time"

	"github.com/weavejobs/weave/internal/jobindex"
	"github.com/weavejobs/weave/internal/journal"
	"github.com/weavejobs/weave/internal/wire"
)

// Replay rebuilds the state from the streams. The JOBS feed gives the groups and their jobs
// (through feed); the EVENTS stream gives the reports and the retry decisions (through report and
// journalRecord); the RESULTS stream gives the outcomes already written (outcomeReplay); the WORK
// stream gives the batches released and not yet acknowledged (finishReplay's alive).
//
// No release is journaled: a worker acknowledges a batch only after the report covering it is
// stored, so every job ever released is still in WORK or has a report in EVENTS.

// aliveJob is a job found in a WORK batch: released, not yet acknowledged.
type aliveJob struct {
	attempt uint32
	pool    string
}

// journalRecord applies one journal record.
func (e *engine) journalRecord(r journal.Record) {
	if r.Epoch < e.maxEpoch {
		// Written by a coordinator that had lost its lease after a newer epoch began: fenced off.
		return
	}
	e.maxEpoch = r.Epoch
	if e.replaying && r.Kind == journal.KindRefused {
		e.skipRefused(r.Entries) // see reports.go
		return
	}
	if !e.replaying || r.Kind != journal.KindRetry {
		return // live: our own records, applied when decided
	}
	for _, en := range r.Entries {
		if prev, ok := e.replayRetries[en.ID]; !ok || en.Attempt >= prev.Attempt {
			e.replayRetries[en.ID] = en
		}
	}
}

// outcomeReplay applies one message from a group's outcome subject written before the restart:
// msgSeq and at are its sequence and time in RESULTS.
func (e *engine) outcomeReplay(gtok string, openSeq uint64, outs []wire.Outcome, sum *wire.GroupSummary, msgSeq uint64, at time.Time) {
	id, err := wire.ParseGroupToken(gtok)
	if err != nil {
		return
	}
	// The incarnation the outcomes belong to, if its messages are still in JOBS: several
	// incarnations of one group ID can be, when a later one opened after an earlier one ended.
	g := e.incarnations[openSeq]
	if g != nil && g.id != id {
		g = nil
	}
	if sum != nil {
		// A finished incarnation: its outcomes are kept until the retention passes, and its job
		// messages too while they are in JOBS (some failed, or it was not purged yet).
		var jobsSeq uint64
		if g != nil {
			g.finished = true
			jobsSeq = g.lastSeq
		}
		e.finished(id, openSeq, msgSeq, sum.Failed > 0, jobsSeq, at)
		return
	}
	if g == nil {
		return // a purged incarnation
	}
	for _, o := range outs {
		st, ok := e.idx.State(o.ID)
		if !ok || st.Terminal() {
			continue
		}
		to := map[wire.Final]jobindex.State{wire.FinalDone: jobindex.Done, wire.FinalFailed: jobindex.Failed, wire.FinalCanceled: jobindex.Canceled}[o.State]
		e.moveTerminal(o.ID, to)
		switch to {
		case jobindex.Done:
			g.done++
		case jobindex.Failed:
			g.failed++
		case jobindex.Canceled:
			g.canceled++
		}
	}
}

// finishReplay ends replay and reconciles every job that was ever released: running if its
// latest attempt is still in WORK, waiting if a retry was decided for its latest report, and
// otherwise decided now from its latest report.
func (e *engine) finishReplay(alive map[uint64]aliveJob, now time.Time) {
	ids := map[uint64]bool{}
	for id := range alive {
		ids[id] = true
	}
	for id := range e.replayReports {
		ids[id] = true
	}
	for id := range e.replayRetries {
		ids[id] = true
	}
	var undecided []reportAt
	for _, id := range sortedIDs(ids) {
		g := e.replayGroupOf[id]
		if st, ok := e.idx.State(id); g == nil || g.finished || !ok || st.Terminal() {
			continue // finished, or its group was purged
		}
		a, isAlive := alive[id]
		rp, reported := e.replayReports[id]
		rt, retried := e.replayRetries[id]
		j := &job{id: id, g: g, heapIdx: -1, attempt: max(a.attempt, rp.r.Attempt, rt.Attempt), history: e.replayHistory[id]}
		e.jobs[id] = j
		e.mustMove(id, jobindex.Running)
		switch {
		case isAlive && a.attempt == j.attempt:
			j.pool = e.poolFor(a.pool, nil)
			j.pool.outstanding++
		case retried && rt.Attempt == j.attempt:
			e.mustMove(id, jobindex.RetryWait)
			j.retryAt, j.evSeq = rt.At, rp.seq
			e.retryWait.Push(j)
		case reported:
			undecided = append(undecided, rp)
			if h := j.history; len(h) > 0 && rp.r.Status.Failed() {
				j.history = h[:len(h)-1] // deciding the report adds it back
			}
		}
	}
	heap.Init(&e.retryWait)

	// Rebuild the scheduler: open groups in arrival order, each with its never-released pending
	// jobs in ID order, sealed after the push.
	pending := map[*group][]uint64{}
	for id, g := range e.replayGroupOf {
		if st, _ := e.idx.State(id); st == jobindex.Pending && e.jobs[id] == nil {
			pending[g] = append(pending[g], id)
		}
	}
	e.replaying = false
	e.maxEpoch = max(e.maxEpoch, e.epoch)
	e.boundRetained()
	for _, g := range e.arrival {
		if !g.finished {
			ids := pending[g]
			slices.Sort(ids)
			e.schedule(g, ids)
		}
	}
	e.replayGroupOf, e.replayReports, e.replayRetries, e.replayHistory = nil, nil, nil, nil
	// The incarnations whose summary is stored: purge them if not yet done. Taken before the
	// undecided reports are decided, since those can finish more (whose summary is written first).
	for _, g := range e.arrival {
		if g.finished {
			e.out.purges = append(e.out.purges, g)
		}
	}
	// Decide the reports no decision followed, as if they arrived now.
	for _, ra := range undecided {
		e.report(ra.pool, ra.worker, ra.seq, ra.r, now)
	}
	// Apply the cancels read, in order, as if they arrived now (a stored cancel that no
	// coordinator had applied yet, or one applied before a restart, which finds its jobs ended).
	for _, c := range e.replayCancels {
		switch {
		case c.g.finished:
		case len(c.jobs) > 0:
			e.cancelJobs(c.g, c.jobs)
		default:
			e.cancelGroup(c.g)
		}
	}
	e.replayCancels = nil
	for _, g := range e.arrival {
		e.checkFinished(g)
	}
	e.redriveAfterReplay()
}

func sortedIDs(m map[uint64]bool) []uint64 {
	ids := make([]uint64, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
