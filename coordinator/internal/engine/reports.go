package engine

import (
	"fmt"
	"time"

	"github.com/weavejobs/weave/internal/jobindex"
	"github.com/weavejobs/weave/internal/journal"
	"github.com/weavejobs/weave/internal/wire"
)

// Report applies one attempt outcome reported by a worker of a pool, both named by the subject
// the report was published on (NS.ev.report.<pool>.<worker>), which a worker's NATS permissions
// bind to its own pool and ID (see internal/auth).
//
// A report about a running job is accepted only if it is about the job's current release, to
// that pool (proven), and the worker, if it is live, is a worker of that pool: a worker of
// another pool (or anyone able to publish on another pool's report subjects) cannot decide a job
// it was not given. Reports the coordinator's rescue returns from an orphaned pool
// come as wire.RescueWorker on the rescued pool's subject, which only the coordinator role may
// publish on. A worker that is not live any more (silent for HeartbeatMisses heartbeats, then
// heard again) is still a worker of the pool its subject names: its reports are accepted,
// because it acks the job's batch once the report is stored, and refusing the report would leave
// the job running for ever. A refused report changes nothing; it is recorded in NS_REJECTED,
// counted, and journaled so that a replay does not record it again.
//
// During replay a report is judged by the same checks as it is read (replayReport): one that is
// not proven is set aside and goes through this function once the state is rebuilt, where it is
// stale or refused exactly as it would be live (see endReplay).
//
// seq is the report message's sequence in EVENTS: the job's state depends on it until the
// decision it leads to is stored elsewhere (see lowWater).
func (e *Engine) Report(pool, worker string, seq uint64, r wire.Report, now time.Time) {
	if e.Replaying() {
		e.replayReport(pool, worker, seq, r, now)
		return
	}
	j := e.jobs[r.ID]
	if j == nil || j.attempt != r.Attempt {
		if reason := e.unreleasedReport(j, r); reason != "" {
			e.refuseReport(pool, worker, seq, r, reason)
			return
		}
		e.stats.StaleReports++ // a duplicate run, or an attempt already decided
		return
	}
	if st, _ := e.idx.State(j.id); st != jobindex.Running {
		e.stats.StaleReports++
		return
	}
	if reason := e.foreignReport(pool, worker, j, r); reason != "" {
		e.refuseReport(pool, worker, seq, r, reason)
		return
	}
	if worker == wire.RescueWorker {
		e.stats.Rescued++
	}
	ran := j.pool // stopRunning forgets it
	e.stopRunning(j)
	e.mx.reported(worker, r.Duration, now)
	if r.Status != wire.StatusReturned && r.Status != wire.StatusLapsed {
		e.learnBusy(j, ran, r.Duration, r.Waited, now) // the others say nothing about the job's time
	}
	e.decide(j, worker, seq, r, now)
}

// decide applies a report's status to the job j, which the report's attempt ran: it ends the
// job, returns it to the ready retries, or schedules a retry.
func (e *Engine) decide(j *job, worker string, seq uint64, r wire.Report, now time.Time) {
	switch r.Status {
	case wire.StatusOK:
		e.end(j, jobindex.Done, r.Data, seq)
	case wire.StatusPermanent:
		j.addHistory(worker, r.Data, now)
		e.end(j, jobindex.Failed, r.Data, seq)
	case wire.StatusCanceled:
		e.end(j, jobindex.Canceled, r.Data, seq)
	case wire.StatusReturned:
		e.requeue(j)
		j.evSeq = seq
		j.rel = seq // the next release of this attempt follows this report
	case wire.StatusError, wire.StatusLapsed:
		if r.Status == wire.StatusLapsed {
			e.stats.LostAttempts++
		}
		j.addHistory(historyWorker(worker, r.Status), r.Data, now)
		switch {
		case j.cancelReq || j.g.cancelReq:
			e.end(j, jobindex.Canceled, r.Data, seq) // canceled while running: no retry
			return
		case int(j.attempt) >= e.maxAttempts(j):
			e.end(j, jobindex.Failed, r.Data, seq)
			return
		}
		e.scheduleRetry(j, e.retryDelay(j, r.RetryAfter), now)
		j.evSeq = seq // the attempt count and the retry record (written after it) live there
	}
}

// foreignReport returns why a report from worker of pool about the running job j is refused, or
// "" (see report).
func (e *Engine) foreignReport(pool, worker string, j *job, r wire.Report) string {
	cur := releaseSeen{rel: j.rel}
	if j.pool != nil {
		cur.pool = j.pool.key
	}
	if _, reason := e.unproven(pool, worker, r, cur); reason != "" {
		return reason
	}
	if w := e.fleet.workers[worker]; w != nil && w.pool.key != pool {
		return fmt.Sprintf("report about job %d on pool %s's subject from worker %q, which is live in pool %s", j.id, pool, worker, w.pool.key)
	}
	return ""
}

// releaseSeen is what the coordinator knows, without the report, of the release a report must be
// about: the pool it went to ("" when not known: the job's batch was acknowledged before a
// restart) and the least release (wire.ReleaseKey.Proof's rel) that is still the attempt's
// current one, since a returned report ends the release before it.
type releaseSeen struct {
	pool string
	rel  uint64
}

// unproven returns why a report about attempt r.Attempt of job r.ID, on the subject of worker of
// pool, is not proven to be about the job's current release to that pool, or "", with the
// release it is about (its proof's, else cur.rel). The live
// coordinator and replay judge every report with it. What proves the release is the
// coordinator's own knowledge of it (cur.pool: released in this term, or the job's batch read
// from WORK, which only coordinators write) or the release proof the report echoes, which only a
// coordinator can make. A report without a valid proof about a release whose pool is not known
// (stored by a worker of the release before proofs, or by anyone else, while no coordinator ran)
// proves nothing; a proof of a release that a returned report ended is refused even from the
// pool the job runs in again.
func (e *Engine) unproven(pool, worker string, r wire.Report, cur releaseSeen) (rel uint64, reason string) {
	switch {
	case cur.pool != "" && cur.pool != pool:
		return 0, fmt.Sprintf("report from worker %q of pool %s about job %d, which was released to pool %s", worker, pool, r.ID, cur.pool)
	case cur.pool == pool && cur.rel == 0:
		return 0, "" // no release of the attempt was returned: the known one is the only one, and the loop spends no MAC on it
	}
	rel, ok := e.key.Verify(r.Proof, pool, r.ID, r.Attempt)
	switch {
	case ok && rel < cur.rel:
		return 0, fmt.Sprintf("report from worker %q of pool %s about attempt %d of job %d is about a release that was returned (at EVENTS sequence %d)", worker, pool, r.Attempt, r.ID, cur.rel)
	case ok:
		return rel, ""
	case cur.pool == pool:
		return cur.rel, ""
	case r.Proof == "":
		return 0, fmt.Sprintf("report from worker %q of pool %s about attempt %d of job %d carries no release proof, and no release of it to that pool is known", worker, pool, r.Attempt, r.ID)
	}
	return 0, fmt.Sprintf("report from worker %q of pool %s about attempt %d of job %d carries a release proof that does not verify for that pool", worker, pool, r.Attempt, r.ID)
}

// unreleasedReport returns why a report about an attempt that was never released is refused, or
// "" for a stale report (an attempt already decided: a duplicate run, or a job that ended). No
// honest worker reports an attempt later than the job's latest release, nor a job that was never
// released (pending, delayed, or released only before a restart that no report proves).
func (e *Engine) unreleasedReport(j *job, r wire.Report) string {
	if j != nil && r.Attempt > j.attempt {
		return fmt.Sprintf("report about attempt %d of job %d, whose latest release is attempt %d", r.Attempt, r.ID, j.attempt)
	}
	if st, ok := e.idx.State(r.ID); j == nil && ok && !st.Terminal() {
		return fmt.Sprintf("report about job %d, which is %s and has no proven release", r.ID, st)
	}
	return ""
}

// refuseReport records a refused report in NS_REJECTED, counts it, and journals it so that replay
// skips it (journal.KindRefused).
func (e *Engine) refuseReport(pool, worker string, seq uint64, r wire.Report, reason string) {
	e.RejectReports(e.names.ReportSubject(pool, worker), seq, reason)
	e.out.Refused = append(e.out.Refused, journal.Entry{ID: r.ID, Attempt: r.Attempt, Seq: seq})
}

// RejectReports records a refused report message, or one report of it, and counts it. A message
// refused whole needs no journal record: replay refuses it again.
func (e *Engine) RejectReports(subject string, seq uint64, reason string) {
	e.stats.RejectedReports++
	e.Reject(subject, seq, reason)
}

// historyWorker is the worker an attempt's history names: the reporter, except for a lapsed
// attempt, whose reporter only found the batch back after the worker that held it was gone.
func historyWorker(reporter string, st wire.Status) string {
	if st == wire.StatusLapsed {
		return ""
	}
	return reporter
}

// addHistory records a failed attempt, keeping the first one and the latest ones, each error cut
// to maxHistoryError: the last error travels whole as the outcome's data.
func (j *job) addHistory(worker string, errText []byte, now time.Time) {
	if len(j.history) >= wire.MaxHistory {
		j.history = append(j.history[:1], j.history[2:]...)
	}
	j.history = append(j.history, wire.Attempt{At: now.Truncate(time.Millisecond), Worker: worker, Error: wire.Truncate(string(errText), maxHistoryError)})
}

// maxHistoryError bounds each error a job's history keeps (the worker sends up to its
// MaxResultSize, 64 KiB by default): a history of wire.MaxHistory attempts then holds at most
// 128 KiB of errors, in the coordinator's memory, in outcomes and in inspection answers. Whole,
// 32 errors of 64 KiB made an outcome of 2 MiB, which no message could carry.
const maxHistoryError = 4 << 10

// busyWeight is the weight of one report in a group's busy share.
const busyWeight = 0.1

// learnBusy updates the busy shares from one attempt: it was released at j.since to pool p,
// waited on the worker, ran, and its report arrived now. A group's share counts the waiting (by
// Little's law, released jobs × share = jobs running). The fleet's share, which sizes the
// prefetch window, does not: waiting is what the window itself causes, and counting it would
// make the window grow without end; nor does the pool's, which decides whether its batches may
// go ahead of its slots (waiting behind a job sent ahead would keep them going ahead).
//
// A group's share is a ratio of averages, average run time ÷ average cycle, as Little's law
// has it, not an average of each job's ratio: cycles vary (queueing, report pacing), and since
// 1/x is convex the average of ran/cycle overstates the share, most for short jobs, whose cycles
// vary most relative to their run, and short jobs' groups would get less than their fair share.
func (e *Engine) learnBusy(j *job, p *pool, ran, waited time.Duration, now time.Time) {
	cycle := now.Sub(j.since)
	if j.since.IsZero() || cycle <= 0 {
		return
	}
	ran = min(ran, cycle)
	share := float64(ran) / float64(cycle)
	g := j.g
	if g.cycleAvg == 0 {
		// The first report: the averages start from the share the group started with.
		g.cycleAvg = cycle.Seconds()
		g.ranAvg = g.busy * g.cycleAvg
	}
	g.ranAvg += busyWeight * (ran.Seconds() - g.ranAvg)
	g.cycleAvg += busyWeight * (cycle.Seconds() - g.cycleAvg)
	g.busy = g.ranAvg / g.cycleAvg
	// A group not measured yet starts from the others' share: starting from 1 would make a new
	// group with one job look busier than a large group with several, and break the spread.
	e.groups.busy += busyWeight * (share - e.groups.busy)
	if trip := cycle - min(waited, cycle); trip > 0 {
		share := min(float64(ran)/float64(trip), 1)
		e.fleet.busy += busyWeight * (share - e.fleet.busy)
		if p != nil {
			p.busy += busyWeight * (share - p.busy) // whether its batches may go ahead (aheadPerSlot)
		}
	}
}

// stopRunning releases the capacity a running job held.
func (e *Engine) stopRunning(j *job) {
	if j.pool != nil {
		j.pool.outstanding--
		j.g.inFlight--
		j.pool = nil
		e.freeLimits(j)
	}
	if j.counted {
		e.sched.Done(j.g)
		j.counted = false
	}
}

// maxAttempts is the job's own limit, else the configured default (also for jobs released
// before a restart, whose limit is learned again only when they are next released).
func (e *Engine) maxAttempts(j *job) int {
	if j.maxAtt > 0 {
		return j.maxAtt
	}
	return e.cfg.MaxAttempts
}

// end moves a job to a terminal state and records its outcome. evSeq is the EVENTS
// sequence of the report that decided it, or 0.
func (e *Engine) end(j *job, to jobindex.State, data []byte, evSeq uint64) {
	e.moveTerminal(j.id, to)
	delete(e.jobs, j.id)
	dropEnded(j)
	state := wire.FinalDone
	switch to {
	case jobindex.Failed:
		state = wire.FinalFailed
	case jobindex.Canceled:
		state = wire.FinalCanceled
	}
	o := wire.Outcome{ID: j.id, Key: j.key, State: state, Attempts: j.attempt, Data: data, History: j.history, RedriveOf: j.redriveOf}
	if e.maxOutcome > 0 && wire.FitOutcome(&o, e.maxOutcome) {
		e.log.Warn().Uint64("job", j.id).Str("group", j.g.id).Int("attempts", int(j.attempt)).Int("limit", e.maxOutcome).
			Msg("outcome larger than a message may be: its history's middle attempts were left out, or errors cut")
	}
	e.recordOutcome(j.g, o, evSeq)
}

// Learn records what the release pipeline learned from a job's stored message: its key, its
// own attempt limit and, in an incarnation a redrive opened, the failed job it runs again.
func (e *Engine) Learn(id uint64, m *wire.JobMeta) {
	j := e.jobs[id]
	if j == nil {
		return
	}
	j.key, j.maxAtt = m.Key, m.MaxAttempts
	if j.g.redriven {
		j.redriveOf = m.RedriveOf
	}
}

// Vanished ends, failed, a job whose release found its stored message gone from the JOBS
// stream (counted in Totals.LostJobs).
func (e *Engine) Vanished(id uint64, reason string) {
	j := e.jobs[id]
	if j == nil {
		return
	}
	if st, _ := e.idx.State(id); st != jobindex.Running {
		return
	}
	e.stats.LostJobs++
	e.stopRunning(j)
	e.end(j, jobindex.Failed, []byte(reason), 0)
}

// ReleaseFailed puts back a job whose release could not be carried out (counted in
// Totals.Requeued).
func (e *Engine) ReleaseFailed(id uint64) {
	e.stats.Requeued++
	j := e.jobs[id]
	if j == nil {
		return
	}
	if st, _ := e.idx.State(id); st != jobindex.Running {
		return
	}
	e.stopRunning(j)
	e.requeue(j)
}
