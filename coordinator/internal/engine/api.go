package engine

import (
	"cmp"
	"time"

	"github.com/weavejobs/weave/internal/wire"
)

// The calls the coordinator's run makes besides feeding messages (Feed, Report, Heartbeat,
// SetLimit, ...), stepping (ReleaseAll, TakeEffects) and asking (Status, Inspect, Observe).

// Epoch is the fencing token of the term the engine decides for.
func (e *Engine) Epoch() uint64 { return e.epoch }

// SetKey sets the key that signs releases and verifies the proofs reports echo; the run reads
// it before replay.
func (e *Engine) SetKey(k wire.ReleaseKey) { e.key = k }

// SetMaxOutcome bounds an outcome's size (wire.OutcomeSize) so one always fits an outcome
// message; 0 leaves it unbounded.
func (e *Engine) SetMaxOutcome(n int) { e.maxOutcome = n }

// SetAlive hands replay the attempts found running (work batches still held by workers).
func (e *Engine) SetAlive(alive map[uint64]AliveJob) { e.replay.alive = alive }

// Size is the incarnations tracked and the jobs in flight.
func (e *Engine) Size() (groups, inFlight int) { return e.groups.table.len(), len(e.jobs) }

// NoteEvent records that the EVENTS record at seq is being applied.
func (e *Engine) NoteEvent(seq uint64) { e.retention.noteEvent(seq) }

// OutcomesStored records that the outcomes of the reports at these EVENTS sequences are stored.
func (e *Engine) OutcomesStored(evSeqs []uint64) { e.retention.outcomeStored(evSeqs) }

// GroupStored records that the summary of the incarnation opened at openSeq is stored (at
// RESULTS sequence summarySeq when written now, 0 if it was before) and its job messages purged
// if they were to be, at at: the group is retained, if written now, and forgotten.
func (e *Engine) GroupStored(openSeq, summarySeq uint64, evSeqs []uint64, at time.Time) {
	e.retention.outcomeStored(evSeqs)
	g := e.groups.live[openSeq]
	if g == nil {
		return
	}
	if summarySeq > 0 {
		e.retain(g.id, g.openSeq, summarySeq, g.keepJobs, g.lastSeq, at, g.summary(), e.outcomesExpire(g))
	}
	e.forget(g)
}

// LimitsApplied records that the LIMITS stream is applied up to seq.
func (e *Engine) LimitsApplied(seq uint64) { e.limits.applied = max(e.limits.applied, seq) }

// NextDue is when the engine next has something to do without input (a retry, a delayed job,
// a limit's token, lingering outcomes), zero if nothing is due.
func (e *Engine) NextDue(now time.Time) time.Time {
	due := e.retries.nextDue()
	for _, d := range [...]time.Time{e.delays.nextDue(), e.limits.nextToken(now)} {
		if !d.IsZero() && (due.IsZero() || d.Before(due)) {
			due = d
		}
	}
	if len(e.ol.lingering) > 0 && (due.IsZero() || e.ol.due.Before(due)) {
		due = e.ol.due
	}
	return due
}

// Upcoming appends to buf the IDs of the next n jobs of the live incarnation opened at openSeq
// that the scheduler will release, for the run to read their payloads ahead.
func (e *Engine) Upcoming(buf []uint64, openSeq uint64, n int) []uint64 {
	g := e.groups.live[openSeq]
	if g == nil {
		return buf
	}
	return e.sched.Upcoming(buf, g, n)
}

// LostPools names the pools whose released batches may be lost (see fleet.lost).
func (e *Engine) LostPools(now time.Time) []string { return e.fleet.lost(now, lostAfter) }

// OrphanPools names the pools left without a live worker for rescueAfter (see fleet.orphans).
func (e *Engine) OrphanPools(now time.Time, rescueAfter time.Duration) []string {
	return e.fleet.orphans(now, rescueAfter)
}

// KeysToLearn lists the jobs whose key and attempt limit replay could not know (released before
// the restart) and those of outcomes about to be written without their key, or, in an
// incarnation a redrive opened, without the failed job they ran again: the run reads their
// messages and hands them back with Learn and LearnOutcomes.
func (e *Engine) KeysToLearn() []uint64 {
	var ids []uint64
	for id, j := range e.jobs {
		if j.key == "" && j.maxAtt == 0 {
			ids = append(ids, id)
		}
	}
	for _, g := range e.out.outcomes {
		for i := range g.outcomes {
			if unknownKey(g, &g.outcomes[i]) {
				ids = append(ids, g.outcomes[i].ID)
			}
		}
	}
	return ids
}

// LearnOutcomes completes the outcomes about to be written from their jobs' messages.
func (e *Engine) LearnOutcomes(metas map[uint64]*wire.JobMeta) {
	for _, g := range e.out.outcomes {
		for i := range g.outcomes {
			o := &g.outcomes[i]
			m := metas[o.ID]
			if m == nil || !unknownKey(g, o) {
				continue
			}
			o.Key = cmp.Or(o.Key, m.Key)
			if g.redriven {
				o.RedriveOf = m.RedriveOf
			}
		}
	}
}

func unknownKey(g *group, o *wire.Outcome) bool { return o.Key == "" || g.redriven && o.RedriveOf == 0 }

// releaseOf is the run's copy of a release, values only.
func (e *Engine) releaseOf(rel release) Release {
	out := Release{Pool: rel.pool.key, Jobs: make([]ReleaseJob, len(rel.jobs))}
	for i, j := range rel.jobs {
		out.Jobs[i] = ReleaseJob{ID: j.id, Attempt: j.attempt, Rel: j.rel, OpenSeq: j.g.openSeq, Tok: j.g.tok, After: e.afterResults(j.g)}
	}
	return out
}
