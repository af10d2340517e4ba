package coordinator

import (
	"container/heap"
	"slices"
	"time"

	"github.com/weavejobs/weave/internal/jobindex"
	"github.com/weavejobs/weave/internal/journal"
	"github.com/weavejobs/weave/internal/wire"
)

// report applies one attempt outcome reported by a worker.
//
// seq is the report message's sequence in EVENTS: the job's state depends on it until the
// decision it leads to is stored elsewhere (see lowWater).
func (e *engine) report(worker string, seq uint64, r wire.Report, now time.Time) {
	if e.replaying {
		// Decisions are replayed from the journal; a report is applied after replay only if
		// no decision followed it (see finishReplay).
		if prev, ok := e.replayReports[r.ID]; !ok || r.Attempt >= prev.r.Attempt {
			e.replayReports[r.ID] = reportAt{worker: worker, seq: seq, r: r}
		}
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
		e.stats.StaleReports++ // a duplicate run, or an attempt already decided
		return
	}
	if st, _ := e.idx.State(j.id); st != jobindex.Running {
		e.stats.StaleReports++
		return
	}
	if worker == wire.RescueWorker {
		e.stats.Rescued++
	}
	e.stopRunning(j)
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
