package coordinator

import (
	"container/heap"
	"fmt"
	"slices"
	"time"

	"github.com/weavejobs/weave/internal/jobindex"
	"github.com/weavejobs/weave/internal/journal"
	"github.com/weavejobs/weave/internal/wire"
)

// applyReports applies a report message stored in EVENTS on subject NS.ev.report.<pool>.<worker>
// (see engine.report for what is checked). A message that is not a report batch of the worker its
// subject names is rejected whole.
func (r *run) applyReports(subject string, evSeq uint64, data []byte) {
	pool, worker, ok := r.names.ParseReportSubject(subject)
	if !ok {
		r.e.rejectReports(subject, evSeq, "not a report subject: reports go on "+r.names.ReportSubject("<pool>", "<worker>"))
		return
	}
	from, reports, err := wire.DecodeReports(data)
	if err == nil && from != worker {
		err = fmt.Errorf("%w: report from %q on the subject of worker %q", wire.ErrMalformed, from, worker)
	}
	if err != nil {
		r.e.rejectReports(subject, evSeq, err.Error())
		return
	}
	now := r.cfg.now()
	for _, rp := range reports {
		r.e.report(pool, worker, evSeq, rp, now)
	}
}

// report applies one attempt outcome reported by a worker of a pool, both named by the subject
// the report was published on (NS.ev.report.<pool>.<worker>), which a worker's NATS permissions
// bind to its own pool and ID (see internal/auth).
//
// A report about a running job is accepted only if the job was released to that pool, and the
// worker, if it is live, is a worker of that pool: a worker of another pool (or anyone able to
// publish on another pool's report subjects) cannot decide a job it was not given. Reports the
// coordinator hands back from an orphaned pool (rescue.go) come as wire.RescueWorker on the
// rescued pool's subject, which only the coordinator role may publish on. A worker that is not
// live any more (silent for HeartbeatMisses heartbeats, then heard again) is still a worker of
// the pool its subject names: its reports are accepted, because it acks the job's batch once the
// report is stored, and refusing the report would leave the job running for ever. A refused
// report changes nothing; it is recorded in NS_REJECTED and counted.
//
// During replay the pool a job was released to is not known (releases are not journaled; see
// replay.go) unless its batch is still in WORK. Such a job is running again after replay, in
// its batch's pool, and only later reports decide it, checked as above. A report refused before
// the restart was journaled (KindRefused) and replay skips it. Not checked: a report stored but
// not yet examined when the coordinator stopped, about a job whose batch was acknowledged;
// replay applies it on its subject's word (ARCHITECTURE.md, Roles).
//
// seq is the report message's sequence in EVENTS: the job's state depends on it until the
// decision it leads to is stored elsewhere (see lowWater).
func (e *engine) report(pool, worker string, seq uint64, r wire.Report, now time.Time) {
	if e.replaying {
		// Decisions are replayed from the journal; a report is applied after replay only if
		// no decision followed it (see finishReplay).
		// As live, the first report of an attempt decides it and later ones are stale, unless
		// it gave the job back unrun (released), which keeps the attempt number for the next
		// release: a stale report (a forged one, or a lost report of a batch whose worker had
		// reported it) must not decide the job at replay either.
		prev, ok := e.replayReports[r.ID]
		if ok && r.Attempt <= prev.r.Attempt && !(r.Attempt == prev.r.Attempt && prev.r.Status == wire.StatusReleased) {
			return // stale, as it was live
		}
		ra := reportAt{pool: pool, worker: worker, seq: seq, r: r}
		if ok {
			ra.prev = &prev // kept until replay ends, in case this one was refused
		}
		e.replayReports[r.ID] = ra
		if r.Status.Failed() {
			// The history of the attempts whose reports are still in EVENTS (older ones may have
			// been trimmed).
			j := &job{history: e.replayHistory[r.ID]}
			j.addHistory(historyWorker(worker, r.Status), r.Data, now)
			e.replayHistory[r.ID] = j.history
		}
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
	if reason := e.foreignReport(pool, worker, j); reason != "" {
		e.refuseReport(pool, worker, seq, r, reason)
		return
	}
	if worker == wire.RescueWorker {
		e.stats.Rescued++
	}
	e.stopRunning(j)
	e.mx.reported(worker, r.Duration, now)
	if r.Status != wire.StatusReleased && r.Status != wire.StatusLost {
		e.learnBusy(j, r.Duration, r.Waited, now) // the others say nothing about the job's time
	}
	switch r.Status {
	case wire.StatusOK:
		e.finish(j, jobindex.Done, r.Data, seq)
	case wire.StatusPermanent:
		j.addHistory(worker, r.Data, now)
		e.finish(j, jobindex.Failed, r.Data, seq)
	case wire.StatusCanceled:
		e.finish(j, jobindex.Canceled, r.Data, seq)
	case wire.StatusReleased:
		e.requeue(j)
		j.evSeq = seq
	case wire.StatusError, wire.StatusLost:
		if r.Status == wire.StatusLost {
			e.stats.LostAttempts++
		}
		j.addHistory(historyWorker(worker, r.Status), r.Data, now)
		switch {
		case j.cancelReq || j.g.cancelReq:
			e.finish(j, jobindex.Canceled, r.Data, seq) // canceled while running: no retry
			return
		case int(j.attempt) >= e.maxAttempts(j):
			e.finish(j, jobindex.Failed, r.Data, seq)
			return
		}
		e.scheduleRetry(j, e.retryDelay(j, r.RetryAfter), now)
		j.evSeq = seq // the attempt count and the retry record (written after it) live there
	}
}

// foreignReport returns why a report from worker of pool about the running job j is refused, or
// "" (see report).
func (e *engine) foreignReport(pool, worker string, j *job) string {
	if j.pool != nil && j.pool.key != pool {
		return fmt.Sprintf("report from worker %q of pool %s about job %d, which was released to pool %s", worker, pool, j.id, j.pool.key)
	}
	if w := e.workers[worker]; w != nil && w.pool.key != pool {
		return fmt.Sprintf("report about job %d on pool %s's subject from worker %q, which is live in pool %s", j.id, pool, worker, w.pool.key)
	}
	return ""
}

// skipRefused undoes, during replay, the reports a journal record says were refused before the
// restart: the report before a refused one is the job's latest again, and a refused failed
// attempt leaves the history.
func (e *engine) skipRefused(entries []journal.Entry) {
	for _, en := range entries {
		head, ok := e.replayReports[en.ID]
		if !ok {
			continue
		}
		// Unlink the refused report from the job's chain of reports, latest first.
		var refused *reportAt
		if head.seq == en.Seq {
			refused = &head
			if head.prev != nil {
				e.replayReports[en.ID] = *head.prev
			} else {
				delete(e.replayReports, en.ID)
			}
		} else {
			for ra := &head; ra.prev != nil; ra = ra.prev {
				if ra.prev.seq == en.Seq {
					refused, ra.prev = ra.prev, ra.prev.prev
					break
				}
			}
			e.replayReports[en.ID] = head
		}
		if refused == nil || !refused.r.Status.Failed() {
			continue
		}
		// Its failed attempt is in the history: take the latest entry it added out.
		h := e.replayHistory[en.ID]
		for i := len(h) - 1; i >= 0; i-- {
			if h[i].Worker == historyWorker(refused.worker, refused.r.Status) && h[i].Error == string(refused.r.Data) {
				e.replayHistory[en.ID] = append(h[:i], h[i+1:]...)
				break
			}
		}
	}
}

// unreleasedReport returns why a report about an attempt that was never released is refused, or
// "" for a stale report (an attempt already decided: a duplicate run, or a job that ended). No
// honest worker reports an attempt later than the job's latest release, nor a job that was never
// released; replay would otherwise take such a report for the job's latest.
func (e *engine) unreleasedReport(j *job, r wire.Report) string {
	if j != nil && r.Attempt > j.attempt {
		return fmt.Sprintf("report about attempt %d of job %d, whose latest release is attempt %d", r.Attempt, r.ID, j.attempt)
	}
	if st, ok := e.idx.State(r.ID); j == nil && ok && st == jobindex.Pending {
		return fmt.Sprintf("report about job %d, which was never released", r.ID)
	}
	return ""
}

// refuseReport records a refused report in NS_REJECTED, counts it, and journals it so that replay
// skips it (journal.KindRefused).
func (e *engine) refuseReport(pool, worker string, seq uint64, r wire.Report, reason string) {
	e.rejectReports(e.names.ReportSubject(pool, worker), seq, reason)
	e.out.refused = append(e.out.refused, journal.Entry{ID: r.ID, Attempt: r.Attempt, Seq: seq})
}

// rejectReports records a refused report message, or one report of it, and counts it. A message
// refused whole needs no journal record: replay refuses it again.
func (e *engine) rejectReports(subject string, seq uint64, reason string) {
	e.stats.RejectedReports++
	e.reject(subject, seq, reason)
}

// historyWorker is the worker an attempt's history names: the reporter, except for a lost
// attempt, whose reporter only found the batch back after the worker that held it was gone.
func historyWorker(reporter string, st wire.Status) string {
	if st == wire.StatusLost {
		return ""
	}
	return reporter
}

// busyWeight is the weight of one report in a group's busy share.
const busyWeight = 0.1

// learnBusy updates the busy shares from one attempt: it was released at j.since, waited on
// the worker, ran, and its report arrived now. A group's share counts the waiting (by Little's
// law, released jobs × share = jobs running). The fleet's share, which sizes the prefetch
// window, does not: waiting is what the window itself causes, and counting it would make the
// window grow without end.
//
// A group's share is a ratio of averages, average run time ÷ average cycle, as Little's law
// has it, not an average of each job's ratio: cycles vary (queueing, report pacing), and since
// 1/x is convex the average of ran/cycle overstates the share, most for short jobs, whose cycles
// vary most relative to their run. That bias gave a group of 1 ms jobs about 1.87 of its 2 slots
// in the fairness reference case.
func (e *engine) learnBusy(j *job, ran, waited time.Duration, now time.Time) {
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
	e.groupBusy += busyWeight * (share - e.groupBusy)
	if trip := cycle - min(waited, cycle); trip > 0 {
		e.busy += busyWeight * (min(float64(ran)/float64(trip), 1) - e.busy)
	}
}

// addHistory records a failed attempt, keeping the first one and the latest ones.
func (j *job) addHistory(worker string, errText []byte, now time.Time) {
	if len(j.history) >= wire.MaxHistory {
		j.history = append(j.history[:1], j.history[2:]...)
	}
	j.history = append(j.history, wire.Attempt{At: now.Truncate(time.Millisecond), Worker: worker, Error: string(errText)})
}

// stopRunning releases the capacity a running job held.
func (e *engine) stopRunning(j *job) {
	if j.pool != nil {
		j.pool.outstanding--
		j.pool = nil
	}
	if j.counted {
		e.sched.Done(j.g)
		j.counted = false
	}
}

// maxAttempts is the job's own limit, else the configured default (also for jobs released
// before a restart, whose limit is learned again only when they are next released).
func (e *engine) maxAttempts(j *job) int {
	if j.maxAtt > 0 {
		return j.maxAtt
	}
	return e.cfg.MaxAttempts
}

// requeue puts a job that did not run back in front of new work. Its next release keeps the
// attempt number: the report that gave it back is before that release in EVENTS, so a report
// about the attempt is never ambiguous.
func (e *engine) requeue(j *job) {
	e.mustMove(j.id, jobindex.Pending)
	j.reuse = true
	e.retryReady = append(e.retryReady, j)
}

// retryDelay is the wait before attempt j.attempt+1: the handler's request, else exponential
// backoff with full jitter.
func (e *engine) retryDelay(j *job, requested time.Duration) time.Duration {
	if requested > 0 {
		return requested
	}
	ceiling := e.cfg.RetryBase << min(j.attempt-1, 32)
	if ceiling <= 0 || ceiling > e.cfg.RetryMax {
		ceiling = e.cfg.RetryMax
	}
	return time.Duration(e.rng.Int64N(int64(ceiling) + 1))
}

func (e *engine) scheduleRetry(j *job, delay time.Duration, now time.Time) {
	e.mustMove(j.id, jobindex.RetryWait)
	j.retryAt = now.Add(delay)
	heap.Push(&e.retryWait, j)
	e.stats.Retried++
	e.out.retries = append(e.out.retries, journal.Entry{ID: j.id, Attempt: j.attempt, At: j.retryAt})
}

func (e *engine) dropRetry(j *job) {
	if j.heapIdx >= 0 && j.heapIdx < len(e.retryWait) && e.retryWait[j.heapIdx] == j {
		heap.Remove(&e.retryWait, j.heapIdx)
	}
	isJ := func(r *job) bool { return r == j }
	e.retryReady = slices.DeleteFunc(e.retryReady, isJ)
	e.parked = slices.DeleteFunc(e.parked, isJ)
}

// finish moves a job to a terminal state and records its outcome. evSeq is the EVENTS
// sequence of the report that decided it, or 0.
func (e *engine) finish(j *job, to jobindex.State, data []byte, evSeq uint64) {
	e.moveTerminal(j.id, to)
	delete(e.jobs, j.id)
	state := wire.FinalDone
	switch to {
	case jobindex.Failed:
		state = wire.FinalFailed
	case jobindex.Canceled:
		state = wire.FinalCanceled
	}
	e.recordOutcome(j.g, wire.Outcome{ID: j.id, Key: j.key, State: state, Attempts: j.attempt, Data: data, History: j.history}, evSeq)
}

// tick moves due retries back to pending and forgets silent workers.
func (e *engine) tick(now time.Time) {
	for len(e.retryWait) > 0 && !e.retryWait[0].retryAt.After(now) {
		j := heap.Pop(&e.retryWait).(*job)
		e.mustMove(j.id, jobindex.Pending)
		e.retryReady = append(e.retryReady, j)
	}
	e.expireWorkers(now)
	e.abandon(now)
}

// nextDue is when tick next has work: the earliest retry, or zero.
func (e *engine) nextDue() time.Time {
	if len(e.retryWait) == 0 {
		return time.Time{}
	}
	return e.retryWait[0].retryAt
}

// released records what the release pipeline learned from a job's stored message.
func (e *engine) released(id uint64, key string, maxAttempts int) {
	j := e.jobs[id]
	if j == nil {
		return
	}
	j.key, j.maxAtt = key, maxAttempts
}

// lost handles jobs whose release failed (their message vanished from the JOBS stream).
func (e *engine) lost(id uint64, reason string) {
	j := e.jobs[id]
	if j == nil {
		return
	}
	if st, _ := e.idx.State(id); st != jobindex.Running {
		return
	}
	e.stats.LostJobs++
	e.stopRunning(j)
	e.finish(j, jobindex.Failed, []byte(reason), 0)
}

// unreleased puts back a job whose release could not be carried out.
func (e *engine) unreleased(id uint64) {
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

// retryHeap orders retry-waiting jobs by due time.
type retryHeap []*job

func (h retryHeap) Len() int           { return len(h) }
func (h retryHeap) Less(a, b int) bool { return h[a].retryAt.Before(h[b].retryAt) }
func (h retryHeap) Swap(a, b int) {
	h[a], h[b] = h[b], h[a]
	h[a].heapIdx, h[b].heapIdx = a, b
}
func (h *retryHeap) Push(x any) {
	j := x.(*job)
	j.heapIdx = len(*h)
	*h = append(*h, j)
}
func (h *retryHeap) Pop() any {
	old := *h
	j := old[len(old)-1]
	*h = old[:len(old)-1]
	j.heapIdx = -1
	return j
}
