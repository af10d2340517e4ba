package engine

import (
	"time"

	"github.com/weavejobs/weave/internal/wire"
)

// admitSingle applies a single job (wire.JobMeta.Single) whose ID is seq: one message, or one
// job of a single pack, that is its group's open, its only job and its seal, so a job submitted
// alone costs one message instead of three. The group's incarnation is the job's ID: its
// message's sequence, or its packed job ID in a single pack. Everything after admission (release,
// retries, outcomes, summary, purge, retention, cancel, redrive) is a group's.
//
// A single job whose group ID has an incarnation that is not complete, or is being redriven, is
// refused, as an open is: a single job opens its own group (which would have the redrive's open
// refused, after its request was answered). During replay the feed is read before the outcomes,
// so whether a sealed incarnation had completed is not known yet, nor whether a redrive was
// starting: as an open (applyOpen), the single job is deferred until endReplay decides it (see
// deferredOpen).
func (e *Engine) admitSingle(subject string, seq uint64, j *wire.StoredJob, stored time.Time) bool {
	m := &j.Meta
	if e.refusedWhileRedriven(subject, seq, m.Group) {
		return false
	}
	prev := e.groups.table.latest(m.Group)
	if prev != nil && !e.complete(prev) && (!e.sealed(prev) || !e.Replaying()) {
		e.refuseOpen(subject, seq, SingleRunning(m.Group))
		return false
	}
	e.applyOpen(subject, seq, wire.GroupControl{Group: m.Group, Op: wire.OpOpen, Reply: m.Reply, After: m.After, Priority: m.Priority}, prev, stored)
	r := e.groups.table.get(seq)
	if r == nil {
		return false // its open was refused (a cycle), and so the message
	}
	r.flags |= recSingle
	admitted := e.mayJoin(subject, seq, m.Group, r) && e.admit(subject, seq, r, j)
	r.flags |= recSealed
	r.lastSeq = seq
	delete(e.groups.unsealed, seq)
	e.completeIfDone(r)
	return admitted
}

// SingleRunning is why a single job for a group ID with an incarnation not complete is refused.
func SingleRunning(id string) string {
	return "single job for group " + id + ", which is open or still running: a single job opens a group of its own"
}

// arrivedBefore reports whether the incarnation or message a came before b in JOBS: by wire.Arrival,
// since a single pack's job's incarnation, its packed job ID, is a larger number than the
// sequences of the messages stored after it.
func arrivedBefore(a, b uint64) bool { return wire.Arrival(a) < wire.Arrival(b) }

// later returns whichever of a and b came later in JOBS (arrivedBefore).
func later(a, b uint64) uint64 {
	if arrivedBefore(a, b) {
		return b
	}
	return a
}
