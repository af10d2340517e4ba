package engine

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/weavejobs/weave/internal/jobindex"
	"github.com/weavejobs/weave/internal/journal"
	"github.com/weavejobs/weave/internal/wire"
	"github.com/weavejobs/weave/spreader"
)

// Engine is the coordinator's state machine (see the package doc). It holds what ties its parts
// together (the job index, the scheduler, the jobs in flight, the counters and the effects of the
// current steps); each part owns one kind of state.
type Engine struct {
	cfg   Config
	names wire.Names
	log   zerolog.Logger
	rng   *rand.Rand // retry jitter

	epoch    uint64 // this coordinator's fencing token
	maxEpoch uint64 // highest epoch seen in the journal; records of lower epochs after it are fenced off
	// key signs each release and verifies the proofs reports echo (wire.ReleaseKey); set by the
	// run before replay.
	key wire.ReleaseKey
	// maxOutcome bounds an outcome's size (wire.OutcomeSize), so that one outcome always fits
	// an outcome message (set by the run from the server's max payload; 0: unbounded).
	maxOutcome int

	idx   *jobindex.Index                     // every admitted job's state, by group and resource
	sched *spreader.Scheduler[*group, uint64] // the groups' pending jobs and feeder slots
	jobs  map[uint64]*job                     // jobs released at least once and not ended yet
	prio  jobPriorities                       // the jobs' priorities within their groups, above 0

	groups    groupSet
	fleet     fleet
	retries   retries
	delays    delays
	limits    limits
	retention retention
	replay    *replayState // nil once replay has ended

	stats        counters
	mx           loopMetrics // metrics and alarms
	out          Effects
	tierBuf      []uint64       // scratch for leastLoaded
	loads        []float64      // the loads of the latest candidates, in their order (LeastInFlight only)
	one          [1]uint64      // scratch for settles
	settledMatch jobindex.Match // the match of the candidate that settled the latest choice

	rd   redriveState // redrive requests
	deps deps         // groups held until the groups they run after complete

	ol outcomeLinger // outcomes waiting for Config.OutcomeLinger

	lastIdx struct { // the last name engine.idxName made
		seq  uint64
		name string
	}
}

// Replaying reports whether replay is still reading the streams.
func (e *Engine) Replaying() bool { return e.replay != nil }

// counters are monotonic totals shown by status (as Totals: the field names must match).
type counters struct {
	Admitted, Released, Retried, Rejected, StaleReports, Requeued, LostJobs, LostAttempts, Rescued uint64
	Done, Failed, Canceled                                                                         uint64 // jobs that ended so
	RejectedReports, RejectedHeartbeats                                                            uint64 // of Rejected: see report and checkHeartbeat
	Refused                                                                                        uint64 // requests the state refuses (see refuse)
	AfterReleased, AfterCanceled                                                                   uint64 // groups held by dependencies, released or canceled
}

// job is a job that has been released at least once and has not ended yet. Owned by the loop,
// through engine.jobs; the fleet (a pool's running jobs) and the retries point at it.
type job struct {
	id        uint64
	g         *group
	attempt   uint32    // the current (or last) attempt, 1 for the first
	reuse     bool      // the last release did not run (returned, or the release failed): the next one keeps its attempt number
	pool      *pool     // while running
	rel       uint64    // the release of the current attempt: the returned report it follows, 0 for none (wire.ReleaseKey.Proof)
	since     time.Time // when the current attempt was released
	evSeq     uint64    // the EVENTS sequence of the report this job's state depends on; 0 if none
	key       string
	maxAtt    int
	redriveOf uint64         // the failed job it runs again, in an incarnation a redrive opened
	history   []wire.Attempt // failed attempts, for the outcome (bounded by wire.MaxHistory)
	cancelReq bool           // a cancel of this job arrived while it ran
	prio      uint8          // its priority within its group, while a limit's line holds it
	counted   bool           // counted in the scheduler's in-flight for its group
	retryAt   time.Time
	heapIdx   int
	heldBy    *limitState // the limit whose line holds it back, if any
	offeredBy *limitState // the limit whose line offered it again, until it is released, held again or ends
}

// Effects are the side effects of the engine's steps, for the run to carry out (TakeEffects):
// values and IDs only. The unexported lists are the engine's own until TakeEffects turns them
// into the exported ones.
type Effects struct {
	releases  []release
	outcomes  []*group // groups with outcomes to write
	summaries []*group // complete groups whose summary to write (after their outcomes)
	purges    []*group // complete groups whose summary is stored: purge their jobs, forget them
	abandons  []*group // unsealed groups whose producer went silent: store a seal for them
	// retentionPurges are retained groups whose retention expired: delete their outcomes.
	retentionPurges []Purge

	Releases     []Release       // batches of jobs to publish to their pools
	Writes       []Write         // outcomes, summaries, completions and expiries, in order
	Abandons     []Abandon       // seals to store for groups whose producer went silent
	Retries      []journal.Entry // retry decisions, to journal
	Rejections   []Rejection
	Cancels      []uint64        // running jobs whose handlers must be canceled
	Answers      []Answer        // answers to control messages that asked for one
	Refused      []journal.Entry // refused reports, to journal (journal.KindRefused)
	RefusedOpens []journal.Entry // opens refused while their group ran, to journal (refuseOpen)
	Redrives     []RedriveOrder  // redrive decisions to carry out
	Readies      []DepControl    // waiting groups whose edges are met: store their ready record
	DepCancels   []DepControl    // waiting groups an edge can no longer release: store a cancel of them
}

// Empty reports whether effects taken by TakeEffects hold nothing to do.
func (o *Effects) Empty() bool {
	return len(o.Releases)+len(o.Writes)+len(o.Abandons)+len(o.Retries)+len(o.Rejections)+len(o.Cancels)+len(o.Answers)+len(o.Refused)+len(o.RefusedOpens)+len(o.Redrives)+len(o.Readies)+len(o.DepCancels) == 0
}

// release is a batch of jobs handed to a pool, as the engine decided it.
type release struct {
	pool *pool
	jobs []*job
}

// Release is a batch of jobs handed to a pool, for the run to publish.
type Release struct {
	Pool string // the pool's key
	Jobs []ReleaseJob
}

// ReleaseJob is one job of a Release.
type ReleaseJob struct {
	ID      uint64
	Attempt uint32
	Rel     uint64 // the returned report it follows (wire.ReleaseKey.Proof), 0 for none
	OpenSeq uint64 // its group's incarnation (see Upcoming)
	Tok     string // its group's token
	After   string // how the groups its group ran after ended (AfterResults)
}

// Rejection records a message the coordinator refused.
type Rejection struct {
	Subject string
	Seq     uint64
	Reason  string
}

// New returns an engine in replay, for the term of the lease epoch.
func New(cfg Config, names wire.Names, epoch uint64) (*Engine, error) {
	sched, err := spreader.NewScheduler[*group, uint64](spreader.Config{
		Feeders:             max(cfg.Feeders, 1),
		Policy:              cfg.Policy,
		MaxInFlightPerGroup: cfg.MaxInFlightPerGroup,
	})
	if err != nil {
		return nil, err
	}
	return &Engine{
		cfg:       cfg,
		names:     names,
		log:       cfg.Logger,
		rng:       rand.New(rand.NewPCG(epoch, uint64(cfg.now().UnixNano()))),
		epoch:     epoch,
		idx:       jobindex.New(),
		sched:     sched,
		jobs:      map[uint64]*job{},
		groups:    groupSet{busy: 1},
		fleet:     fleet{pools: map[string]*pool{}, workers: map[string]*workerInfo{}, busy: 1},
		retention: retention{unstored: map[uint64]int{}},
		replay: &replayState{
			reports: map[uint64]reportAt{},
			retries: map[uint64]journal.Entry{},
			history: map[uint64][]wire.Attempt{},
		},
	}, nil
}

// Reject records a refused message (for NS_REJECTED) and counts it.
func (e *Engine) Reject(subject string, seq uint64, reason string) {
	e.stats.Rejected++
	e.log.Warn().Str("subject", subject).Uint64("seq", seq).Str("reason", reason).Msg("rejected message")
	e.out.Rejections = append(e.out.Rejections, Rejection{Subject: subject, Seq: seq, Reason: reason})
}

// refuseOpen rejects the open (or single job) stored at seq of a group ID whose incarnation runs
// or is being redriven and, live, journals it (journal.KindRefusedOpen) before its message is
// deleted: a replay that still finds the message refuses it again, whatever that incarnation
// became since, as the live coordinator did.
func (e *Engine) refuseOpen(subject string, seq uint64, reason string) {
	e.Reject(subject, seq, reason)
	if !e.Replaying() {
		e.out.RefusedOpens = append(e.out.RefusedOpens, journal.Entry{Seq: seq})
	}
}

// refuse records a well-formed request that the state refuses (a cancel of a group that is not
// open) for NS_REJECTED, like reject, but counts it apart and logs it at info: it is a client
// asking too late or of the wrong group, not malformed or hostile input.
func (e *Engine) refuse(subject string, seq uint64, reason string) {
	e.stats.Refused++
	e.log.Info().Str("subject", subject).Uint64("seq", seq).Str("reason", reason).Msg("request refused")
	e.out.Rejections = append(e.out.Rejections, Rejection{Subject: subject, Seq: seq, Reason: reason})
}

// Feed applies one message of the JOBS stream, stored at the server's time stored, and returns
// the jobs it admitted that are to be released now (not delayed), whose payloads the loop keeps
// for their release. A job message holds one job or a pack of them (wire.ParseStoredJobs); a
// message that is not valid is rejected whole.
//
// It returns the jobs admitted for release, whose payloads the caller keeps for it, and how many
// jobs of their group were ahead of them (admitted and not terminal): the payload cache keeps
// those nearest release first.
func (e *Engine) Feed(subject string, seq uint64, h map[string][]string, data []byte, stored time.Time) (jobs []wire.StoredJob, ahead uint64) {
	e.retention.jobsApplied = max(e.retention.jobsApplied, seq)
	if strings.HasPrefix(subject, e.names.GroupSubject("")) {
		c, err := wire.ParseGroupControl(h)
		if err != nil {
			e.Reject(subject, seq, err.Error())
			return nil, 0
		}
		e.control(subject, seq, c, data, stored)
		return nil, 0
	}
	jobs, err := wire.ParseStoredJobs(seq, h, data)
	if err != nil {
		e.Reject(subject, seq, err.Error())
		return nil, 0
	}
	e.mx.stored(seq, stored)
	if jobs[0].Meta.Single {
		// One single job, or a single pack's: each is its own group, whose incarnation is its ID.
		admitted := jobs[:0]
		for i := range jobs {
			if e.admitSingle(subject, jobs[i].ID, &jobs[i], stored) {
				admitted = append(admitted, jobs[i])
			}
		}
		return admitted, 0
	}
	r := e.groups.table.latest(jobs[0].Meta.Group)
	if !e.mayJoin(subject, seq, jobs[0].Meta.Group, r) {
		return nil, 0
	}
	if r.flags&recRedriven != 0 {
		if reason := e.unprovenRedriven(r, h, jobs); reason != "" {
			e.Reject(subject, seq, reason)
			return nil, 0
		}
	}
	if _, known := e.idx.State(jobs[0].ID); known {
		// Never expected (the feed applies each message once). A message's jobs are admitted
		// together, so a message fed again has its first job known: refused before any of its
		// jobs is indexed, since a refused message is then deleted.
		e.Reject(subject, seq, "job "+strconv.FormatUint(jobs[0].ID, 10)+" is already admitted")
		return nil, 0
	}
	if g := e.liveOf(r); g != nil {
		ahead = g.admitted - g.terminal()
	} else {
		c := e.recCounts(r)
		ahead = c.Pending + c.Running + c.RetryWait + c.Delayed
	}
	admitted := jobs[:0]
	for i := range jobs {
		if e.admit(subject, seq, r, &jobs[i]) {
			admitted = append(admitted, jobs[i])
		}
	}
	return admitted, ahead
}

// Tick moves due retries back to pending, makes due delayed jobs pending, forgets silent
// workers and asks for the seals of abandoned groups.
func (e *Engine) Tick(now time.Time) {
	for j := e.retries.popDue(now); j != nil; j = e.retries.popDue(now) {
		e.mustMove(j.id, jobindex.Pending)
		e.retries.ready = append(e.retries.ready, j)
	}
	e.wake(now)
	e.refillLimits(now)
	e.expireWorkers(now)
	e.forgetAffinity(now)
	e.abandon(now)
}

// moveTerminal moves a job to a terminal state along legal transitions.
func (e *Engine) moveTerminal(id uint64, to jobindex.State) {
	st, ok := e.idx.State(id)
	if !ok || st == to {
		return
	}
	if to == jobindex.Done || to == jobindex.Failed {
		if st == jobindex.RetryWait || st == jobindex.Delayed {
			e.mustMove(id, jobindex.Pending)
			st = jobindex.Pending
		}
		if st == jobindex.Pending {
			e.mustMove(id, jobindex.Running)
		}
	}
	e.mustMove(id, to)
	e.prio.drop(id)
}

// mustMove moves a job in the index, logging an illegal transition.
func (e *Engine) mustMove(id uint64, to jobindex.State) {
	if from, err := e.idx.Move(id, to); err == nil {
		e.mx.moved(from, to)
		if from == jobindex.Pending && len(e.delays.woke) > 0 {
			delete(e.delays.woke, id)
		}
	} else {
		// A bug, not bad input: every caller checks the state first.
		e.log.Error().Err(err).Uint64("job", id).Msg("illegal state transition")
	}
}
