package coordinator

import (
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/weavejobs/weave/internal/jobindex"
	"github.com/weavejobs/weave/internal/journal"
	"github.com/weavejobs/weave/internal/wire"
	"github.com/weavejobs/weave/spreader"
)

// engine is the coordinator's state machine. It does no I/O: the loop feeds it the streams'
// messages, heartbeats and the clock, and carries out the effects it records in e.out. One
// goroutine (the loop) owns it; only the job index inside is shared with status readers.
type engine struct {
	cfg   Config
	names wire.Names
	log   zerolog.Logger
	rng   *rand.Rand

	epoch     uint64 // this coordinator's fencing token
	maxEpoch  uint64 // highest epoch seen in the journal; records of lower epochs after it are fenced off
	replaying bool   // true until the streams have been read up to their state at start

	idx   *jobindex.Index
	sched *spreader.Scheduler[*group, uint64]

	groups       map[string]*group // the latest incarnation of each group ID (finished ones are removed once persisted)
	incarnations map[uint64]*group // every tracked incarnation by its open's JOBS sequence
	arrival      []*group          // tracked incarnations in arrival order, for the scheduler rebuild after replay
	unsealed     map[*group]bool   // open incarnations not sealed yet: AbandonAfter watches them
	jobs         map[uint64]*job   // jobs released at least once and not yet terminal

	nextAbandonCheck time.Time // abandon looks for silent producers no more often than this

	retryReady []*job    // jobs due for another release, ahead of new offers
	parked     []*job    // pending jobs no live pool can run (a hard requirement nobody holds)
	retryWait  retryHeap // jobs waiting for their retry time

	pools     map[string]*pool
	poolOrder []*pool // stable iteration order; rotated for fairness between pools
	workers   map[string]*workerInfo
	slots     int     // total slots of live workers
	busy      float64 // the fleet's busy share without waiting (see learnBusy); sizes the prefetch window
	groupBusy float64 // the average of the groups' busy shares: a new group starts from it

	// replay-only state, dropped when replay ends.
	replayGroupOf map[uint64]*group
	replayReports map[uint64]reportAt      // latest report per job
	replayRetries map[uint64]journal.Entry // latest retry decision per job
	replayHistory map[uint64][]wire.Attempt
	replayCancels []replayCancel // cancels read, applied once the state is rebuilt

	stats   counters
	mx      loopMetrics // metrics and alarms (metrics.go)
	out     effects
	tierBuf []uint64 // scratch for leastLoaded

	retained      []retained     // finished groups, in finishing order, whose outcomes are kept
	eventsApplied uint64         // the last EVENTS sequence applied
	jobsApplied   uint64         // the last JOBS sequence applied
	unstored      map[uint64]int // EVENTS sequences of reports whose outcomes are not stored yet
}

// counters are monotonic totals shown by status.
type counters struct {
	Admitted, Released, Retried, Rejected, StaleReports, Requeued, LostJobs, LostAttempts, Rescued uint64
	Done, Failed, Canceled                                                                         uint64 // jobs that ended so
	RejectedReports, RejectedHeartbeats                                                            uint64 // of Rejected: see report and checkHeartbeat
}

// group is one open group.
type group struct {
	id, tok   string
	openSeq   uint64 // the open message's sequence: the group's incarnation
	idxKey    string // the group's name in the job index: ID and incarnation
	lastSeq   uint64 // the sequence of its last message in JOBS: a purge stops there
	sealed    bool
	abandoned bool // sealed by the coordinator: the producer went silent (see abandon)
	// sealedByCancel: a cancel of the whole group sealed it before its producer did.
	sealedByCancel bool
	count          uint64    // jobs the producer says it published (seal); informational
	openedAt       time.Time // when its open was stored (the server's clock)
	// lastHeard is the coordinator's time of the group's latest job, open or keep-alive while
	// unsealed; abandonAt is when the coordinator last asked for its seal (zero if never).
	lastHeard, abandonAt time.Time
	cancelReq            bool // a cancel arrived: pending jobs end canceled, running ones are told to stop
	admitted             uint64
	done                 uint64
	failed               uint64
	canceled             uint64
	inSched              bool // added to the scheduler
	// busy estimates the share of a released job's time that its handler runs (the rest is
	// queueing and round trips), from the group's reports: the exponentially weighted average of
	// handler durations ÷ that of (report time − release time), kept in ranAvg and cycleAvg
	// (seconds). By Little's law, released jobs × busy is the group's running jobs as the
	// handlers see them.
	busy             float64
	ranAvg, cycleAvg float64
	finished         bool // every job terminal and the summary is being written

	outcomes    []wire.Outcome // terminal outcomes not yet handed to the writer
	outcomeSeqs []uint64       // the EVENTS sequence of the report behind each, or 0
}

func (g *group) terminal() uint64 { return g.done + g.failed + g.canceled }

// job is a job that has been released at least once and is not terminal yet.
type job struct {
	id        uint64
	g         *group
	attempt   uint32    // the current (or last) attempt, 1 for the first
	reuse     bool      // the last release did not run (drained, or its publish failed): the next one keeps its attempt number
	pool      *pool     // while running
	since     time.Time // when the current attempt was released
	evSeq     uint64    // the EVENTS sequence of the report this job's state depends on; 0 if none
	key       string
	maxAtt    int
	history   []wire.Attempt // failed attempts, for the outcome (bounded by wire.MaxHistory)
	cancelReq bool           // a cancel of this job arrived while it ran
	counted   bool           // counted in the scheduler's in-flight for its group
	retryAt   time.Time
	heapIdx   int
}

// replayCancel is a cancel read during replay: of the group, or of some of its jobs.
type replayCancel struct {
	g    *group
	jobs []uint64
}

// reportAt is a report seen during replay, applied once the journal has been read.
type reportAt struct {
	pool   string // of the subject it came on
	worker string
	seq    uint64 // in EVENTS
	r      wire.Report
	prev   *reportAt // the job's report it replaced, the latest again if this one was refused (skipRefused)
}

// effects are the side effects the loop must carry out after a step, in this order.
type effects struct {
	releases  []release
	retries   []journal.Entry
	outcomes  []*group // groups with outcomes to write
	summaries []*group // finished groups whose summary to write (after their outcomes)
	purges    []*group // finished groups whose summary exists: purge their jobs, forget them
	// retentionPurges are finished groups past their retention: delete their outcomes.
	retentionPurges []purge
	rejections      []rejection
	cancels         []uint64        // running jobs whose handlers must be canceled
	abandons        []*group        // unsealed groups whose producer went silent: store a seal for them
	answers         []answer        // answers to control messages that asked for one (answers.go)
	refused         []journal.Entry // refused reports, to journal (journal.KindRefused)
}

func (o *effects) empty() bool {
	return len(o.releases)+len(o.retries)+len(o.outcomes)+len(o.summaries)+len(o.purges)+len(o.rejections)+len(o.cancels)+len(o.retentionPurges)+len(o.abandons)+len(o.answers)+len(o.refused) == 0
}

// release is a batch of jobs handed to a pool.
type release struct {
	pool *pool
	jobs []*job
}

// rejection records a message the coordinator refused.
type rejection struct {
	subject string
	seq     uint64
	reason  string
}

func newEngine(cfg Config, names wire.Names, epoch uint64) (*engine, error) {
	sched, err := spreader.NewScheduler[*group, uint64](spreader.Config{
		Feeders:             max(cfg.Feeders, 1),
		Policy:              cfg.Policy,
		MaxInFlightPerGroup: cfg.MaxInFlightPerGroup,
	})
	if err != nil {
		return nil, err
	}
	return &engine{
		cfg:           cfg,
		names:         names,
		log:           cfg.Logger,
		rng:           rand.New(rand.NewPCG(epoch, uint64(cfg.now().UnixNano()))),
		epoch:         epoch,
		busy:          1,
		groupBusy:     1,
		replaying:     true,
		idx:           jobindex.New(),
		sched:         sched,
		groups:        map[string]*group{},
		incarnations:  map[uint64]*group{},
		unsealed:      map[*group]bool{},
		jobs:          map[uint64]*job{},
		pools:         map[string]*pool{},
		workers:       map[string]*workerInfo{},
		replayGroupOf: map[uint64]*group{},
		replayReports: map[uint64]reportAt{},
		replayRetries: map[uint64]journal.Entry{},
		replayHistory: map[uint64][]wire.Attempt{},
		unstored:      map[uint64]int{},
	}, nil
}

func (e *engine) reject(subject string, seq uint64, reason string) {
	e.stats.Rejected++
	e.log.Warn().Str("subject", subject).Uint64("seq", seq).Str("reason", reason).Msg("rejected message")
	e.out.rejections = append(e.out.rejections, rejection{subject: subject, seq: seq, reason: reason})
}

// feed applies one message of the JOBS stream, stored at the server's time stored, and reports
// whether it admitted a job.
func (e *engine) feed(subject string, seq uint64, h nats.Header, stored time.Time) bool {
	e.jobsApplied = max(e.jobsApplied, seq)
	if strings.HasPrefix(subject, e.names.GroupSubject("")) {
		c, err := wire.ParseGroupControl(h)
		if err != nil {
			e.reject(subject, seq, err.Error())
			return false
		}
		e.control(subject, seq, c, stored)
		return false
	}
	m, err := wire.ParseJobMeta(h)
	if err != nil {
		e.reject(subject, seq, err.Error())
		return false
	}
	e.mx.stored(seq, stored)
	return e.admit(subject, seq, m)
}

func (e *engine) control(subject string, seq uint64, c wire.GroupControl, stored time.Time) {
	g := e.groups[c.Group]
	switch c.Op {
	case wire.OpOpen:
		switch {
		case g != nil && !g.finished && !g.sealed:
			// A producer publishing the group again, e.g. after a crash: its jobs join the
			// open group (dedup by key drops those stored already).
			e.log.Info().Str("group", c.Group).Msg("group opened again while open: resuming")
			e.heard(g)
			return
		case g != nil && !g.finished && !e.replaying:
			e.reject(subject, seq, "group "+c.Group+" is sealed and still running; publish it again once it has finished")
			return
		}
		// New, or a new incarnation of a finished group's ID. During replay the feed is read
		// before the outcomes, so whether the previous incarnation had finished is not known
		// yet; but an open still in the stream after a sealed incarnation is one the live
		// coordinator accepted (it deletes those it refuses), so replay accepts it too and
		// tracks both incarnations until the outcomes tell how far the older one got.
		g = &group{id: c.Group, tok: wire.GroupToken(c.Group), openSeq: seq, lastSeq: seq, idxKey: c.Group + "\x00" + strconv.FormatUint(seq, 10), busy: e.groupBusy, openedAt: stored}
		e.groups[c.Group] = g
		e.incarnations[seq] = g
		e.arrival = append(e.arrival, g)
		e.unsealed[g] = true
		e.heard(g)
		if !e.replaying {
			e.schedule(g, nil)
		}
	case wire.OpKeepAlive:
		if g == nil || g.sealed {
			e.reject(subject, seq, "keep-alive of a group that is not open: "+c.Group)
			return
		}
		e.heard(g)
	case wire.OpSeal:
		switch {
		case g != nil && g.sealedByCancel && !c.Abandoned:
			// Canceled while open, which sealed it: the producer's own seal comes after.
			g.lastSeq = seq
			return
		case g == nil || g.sealed:
			e.reject(subject, seq, "seal of a group that is not open: "+c.Group)
			return
		}
		e.seal(g, seq)
		g.count, g.abandoned = c.Count, c.Abandoned
		if g.abandoned {
			e.log.Warn().Str("group", g.id).Uint64("jobs", g.admitted).Msg("group abandoned by its producer: sealed with the jobs it has")
		}
		e.checkFinished(g)
	case wire.OpCancel:
		if g == nil {
			e.reject(subject, seq, "cancel of a group that is not open: "+c.Group)
			e.answerNotOpen(seq, c)
			return
		}
		if g.finished {
			e.answerNotOpen(seq, c)
			return
		}
		if len(c.Jobs) == 0 && !g.sealed {
			// No job may join a canceled group, so it can finish without its producer. Sealed at
			// the cancel's place in the stream, also while replaying, so a replay refuses the
			// same later jobs.
			e.seal(g, seq)
			g.sealedByCancel = true
		}
		if e.replaying {
			// The group's pending jobs are not in the scheduler yet, nor its running ones known:
			// finishReplay applies the cancel to the rebuilt state.
			e.replayCancels = append(e.replayCancels, replayCancel{g: g, jobs: c.Jobs})
			return
		}
		canceled, stopping := g.canceled, len(e.out.cancels)
		if len(c.Jobs) > 0 {
			e.cancelJobs(g, c.Jobs)
		} else {
			e.cancelGroup(g)
		}
		e.answer(seq, c, wire.ControlAnswer{OK: true, Canceled: int(g.canceled - canceled), Stopping: len(e.out.cancels) - stopping})
	}
}

// seal marks g sealed by the message at seq: no more jobs join it.
func (e *engine) seal(g *group, seq uint64) {
	g.sealed, g.lastSeq = true, seq
	delete(e.unsealed, g)
	if g.inSched {
		_ = e.sched.Seal(g)
	}
}

// heard records a sign of life from g's producer.
func (e *engine) heard(g *group) { g.lastHeard = e.cfg.now() }

// abandon asks for a seal of every unsealed group whose producer has published nothing (no job,
// no keep-alive) for AbandonAfter: a producer that died after its open, or a client that never
// seals, would otherwise keep the group from ever finishing. The seal is stored in JOBS like a
// producer's, marked abandoned, so a replay reaches the same decision; jobs stored after it are
// refused. A seal whose write failed is asked for again after another AbandonAfter.
func (e *engine) abandon(now time.Time) {
	if now.Before(e.nextAbandonCheck) || e.replaying {
		return
	}
	e.nextAbandonCheck = now.Add(min(time.Second, e.cfg.AbandonAfter/4))
	for g := range e.unsealed {
		if now.Sub(g.lastHeard) >= e.cfg.AbandonAfter && now.Sub(g.abandonAt) >= e.cfg.AbandonAfter {
			g.abandonAt = now
			e.out.abandons = append(e.out.abandons, g)
		}
	}
}

func (e *engine) admit(subject string, seq uint64, m wire.JobMeta) bool {
	g := e.groups[m.Group]
	switch {
	case g == nil:
		e.reject(subject, seq, "job for a group that is not open: "+m.Group)
		return false
	case g.sealedByCancel:
		e.reject(subject, seq, "job for group "+m.Group+", which was canceled")
		return false
	case g.sealed:
		e.reject(subject, seq, "job after the seal of group "+m.Group)
		return false
	case subject != e.names.JobSubject(g.tok):
		e.reject(subject, seq, "job subject does not match its group "+m.Group)
		return false
	}
	if err := e.idx.Add(seq, g.idxKey, m.Require, m.Prefer); err != nil {
		e.reject(subject, seq, err.Error())
		return false
	}
	g.admitted++
	g.lastSeq = seq
	e.heard(g)
	e.stats.Admitted++
	switch {
	case g.cancelReq:
		e.moveTerminal(seq, jobindex.Canceled)
		e.recordOutcome(g, wire.Outcome{ID: seq, Key: m.Key, State: wire.FinalCanceled, Data: []byte("group canceled")}, 0)
		return false
	case e.replaying:
		e.replayGroupOf[seq] = g
	case g.inSched:
		_ = e.sched.Push(g, seq)
	}
	return true
}

// schedule hands a group to the scheduler with its pending jobs (in ID order).
func (e *engine) schedule(g *group, pending []uint64) {
	if err := e.sched.AddGroup(g); err != nil {
		e.log.Error().Err(err).Str("group", g.id).Msg("scheduler refused group")
		return
	}
	g.inSched = true
	if len(pending) > 0 {
		_ = e.sched.Push(g, pending...)
	}
	if g.sealed {
		_ = e.sched.Seal(g)
	}
}

func (e *engine) cancelGroup(g *group) {
	if g.cancelReq {
		return
	}
	g.cancelReq = true
	const reason = "group canceled"
	if g.inSched {
		for _, id := range e.sched.Cancel(g) {
			e.moveTerminal(id, jobindex.Canceled)
			e.recordOutcome(g, wire.Outcome{ID: id, State: wire.FinalCanceled, Data: []byte(reason)}, 0)
		}
		g.inSched = false
	}
	for _, j := range e.jobs {
		if j.g != g {
			continue
		}
		st, _ := e.idx.State(j.id)
		switch st {
		case jobindex.Running:
			e.out.cancels = append(e.out.cancels, j.id)
		case jobindex.RetryWait, jobindex.Pending:
			e.dropRetry(j)
			e.finish(j, jobindex.Canceled, []byte(reason), 0)
		}
	}
	e.checkFinished(g)
}

// cancelJobs cancels some jobs of a group: pending ones end canceled at once, running ones are
// told to stop (their attempt then ends canceled). IDs not in the group, or already ended, are
// ignored.
func (e *engine) cancelJobs(g *group, ids []uint64) {
	const reason = "job canceled"
	for _, id := range ids {
		st, ok := e.idx.State(id)
		if !ok || st.Terminal() {
			continue
		}
		if j := e.jobs[id]; j != nil {
			if j.g != g {
				continue
			}
			if st == jobindex.Running {
				j.cancelReq = true
				e.out.cancels = append(e.out.cancels, id)
				continue
			}
			e.dropRetry(j)
			e.finish(j, jobindex.Canceled, []byte(reason), 0)
			continue
		}
		if st == jobindex.Pending && g.inSched && e.sched.Remove(g, id, func(a, b uint64) bool { return a == b }) {
			e.moveTerminal(id, jobindex.Canceled)
			e.recordOutcome(g, wire.Outcome{ID: id, State: wire.FinalCanceled, Data: []byte(reason)}, 0)
		}
	}
}

// recordOutcome queues a terminal outcome for the group's outcome subject. evSeq is the EVENTS
// sequence of the report behind it (kept until the outcome is stored), or 0.
func (e *engine) recordOutcome(g *group, o wire.Outcome, evSeq uint64) {
	switch o.State {
	case wire.FinalDone:
		g.done++
		e.stats.Done++
	case wire.FinalFailed:
		g.failed++
		e.stats.Failed++
	case wire.FinalCanceled:
		g.canceled++
		e.stats.Canceled++
	}
	if len(g.outcomes) == 0 {
		e.out.outcomes = append(e.out.outcomes, g)
	}
	g.outcomes = append(g.outcomes, o)
	g.outcomeSeqs = append(g.outcomeSeqs, evSeq)
	if evSeq > 0 {
		e.unstored[evSeq]++
	}
	e.checkFinished(g)
}

func (e *engine) checkFinished(g *group) {
	if g.finished || !g.sealed || g.terminal() != g.admitted || e.replaying {
		return
	}
	g.finished = true
	if g.inSched {
		e.sched.Cancel(g) // frees its slot if it still holds one; its queue is empty
		g.inSched = false
	}
	e.out.summaries = append(e.out.summaries, g)
}

// forget drops a finished group whose summary is persisted.
func (e *engine) forget(g *group) {
	if e.groups[g.id] == g {
		delete(e.groups, g.id)
	}
	delete(e.incarnations, g.openSeq)
	delete(e.unsealed, g)
	// A group that admitted no job was never in the index: nothing to forget there.
	if _, err := e.idx.Forget(g.idxKey); err != nil && (g.admitted > 0 || !errors.Is(err, jobindex.ErrUnknownGroup)) {
		e.log.Error().Err(err).Str("group", g.id).Uint64("incarnation", g.openSeq).Msg("forgetting a finished group")
	}
	for i, a := range e.arrival {
		if a == g {
			e.arrival = append(e.arrival[:i], e.arrival[i+1:]...)
			break
		}
	}
}

// moveTerminal moves a job to a terminal state along legal transitions.
func (e *engine) moveTerminal(id uint64, to jobindex.State) {
	st, ok := e.idx.State(id)
	if !ok || st == to {
		return
	}
	if to == jobindex.Done || to == jobindex.Failed {
		if st == jobindex.RetryWait {
			e.mustMove(id, jobindex.Pending)
			st = jobindex.Pending
		}
		if st == jobindex.Pending {
			e.mustMove(id, jobindex.Running)
		}
	}
	e.mustMove(id, to)
}

func (e *engine) mustMove(id uint64, to jobindex.State) {
	if from, err := e.idx.Move(id, to); err == nil {
		e.mx.moved(from, to)
	} else {
		// A bug, not bad input: every caller checks the state first.
		e.log.Error().Err(err).Uint64("job", id).Msg("illegal state transition")
	}
}
