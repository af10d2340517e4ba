package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weavejobs/weave/internal/directget"
	"github.com/weavejobs/weave/internal/wire"
)

// Inspection: look up a job by ID or by group and key, a group, or the recent and active groups.
// What the coordinator alone knows (a job's live state and the pool running it, a group's
// progress) comes from the running coordinator (a request on NS.api.inspect, answered on its
// loop like status); what ended is read from the streams: outcomes and summaries from
// NS_RESULTS (as long as the coordinator's ResultRetention keeps them), a job's stored message
// from NS_JOBS (its group, key and options, and when it was published, while the coordinator
// keeps it: until its group is complete, or ResultRetention after that if it failed).

// States a job passes through before it ends, as inspection reports them; with StateDone,
// StateFailed and StateCanceled they are the states of the coordinator's job index.
const (
	StatePending   State = "pending"   // waiting to be released to a worker
	StateRunning   State = "running"   // released to a pool: queued on or run by one of its workers
	StateRetryWait State = "retrywait" // its last attempt failed; it is released again at RetryAt
	StateDelayed   State = "delayed"   // published with a time to run at (Job.RunAt) still ahead
)

// ErrNoCoordinator reports that no coordinator answered an inspection request (none is running,
// or it is replaying the streams after a start): the live state of jobs and groups that have not
// ended is unknown. What ended can still be read from the streams.
var ErrNoCoordinator = errors.New("weave: no coordinator answered")

// ErrGroupNotFound reports that Group found no incarnation of the group ID: it was never
// published, or it completed longer ago than the coordinator's ResultRetention.
var ErrGroupNotFound = errors.New("weave: group not found")

// JobInfo describes one job: its live state while it runs, its outcome after it ended.
type JobInfo struct {
	ID    uint64 `json:"id"`
	Group string `json:"group,omitempty"`
	// Incarnation is the sequence of its group's open in JOBS (0 when not known): a group ID
	// published again after it completed is a new incarnation.
	Incarnation uint64 `json:"incarnation,omitempty"`
	Key         string `json:"key,omitempty"`
	State       State  `json:"state"`
	// Attempts counts the attempts so far, the running one included (0 before the first).
	Attempts int `json:"attempts"`
	// MaxAttempts is the job's own limit, 0 when it set none (the coordinator's default applies).
	MaxAttempts int `json:"max_attempts,omitempty"`
	// Priority is the job's priority within its group (Job.Priority; a single job's is its
	// group's), read from its stored message: 0 when it has none or the message is gone.
	Priority int `json:"priority,omitempty"`
	// History lists the failed attempts, oldest first: when, on which worker, the error.
	History []Attempt `json:"history,omitempty"`
	// Result is what the handler returned (StateDone); Err the last error (StateFailed,
	// StateCanceled).
	Result []byte `json:"result,omitempty"`
	Err    string `json:"error,omitempty"`
	// Pool is the pool a running attempt was released to, and Workers that pool's live
	// workers. The coordinator releases a batch to a pool, any of whose workers takes it:
	// Worker, the one running it, is the one that says so when asked (or the pool's only
	// worker while the job waits in its queue).
	Pool    string   `json:"pool,omitempty"`
	Workers []string `json:"workers,omitempty"`
	Worker  string   `json:"worker,omitempty"`
	// PublishedAt is when its message was stored (zero once JOBS no longer holds it);
	// ReleasedAt when its current attempt was released to a pool (live only); StartedAt when
	// the running attempt's handler started (as its worker says); RetryAt when a job in
	// StateRetryWait is released again; RunAt when a delayed job may first run (as published);
	// EndedAt when its outcome was stored.
	PublishedAt time.Time `json:"published_at,omitzero"`
	ReleasedAt  time.Time `json:"released_at,omitzero"`
	StartedAt   time.Time `json:"started_at,omitzero"`
	RetryAt     time.Time `json:"retry_at,omitzero"`
	RunAt       time.Time `json:"run_at,omitzero"`
	EndedAt     time.Time `json:"ended_at,omitzero"`
	// Waiting says, in words, why a job that has not ended does not run (see Waiting): delayed
	// until its RunAt, waiting for its RetryAt, held back by a limit (HeldBy) or a pause,
	// requiring resources no live worker holds (Missing), or waiting for a free slot. Empty
	// for a job running or ended, or when no coordinator answered.
	Waiting string    `json:"waiting,omitempty"`
	HeldBy  *HeldBack `json:"held_by,omitempty"`
	Missing []string  `json:"missing,omitempty"`
}

// explainWait sets info.Waiting from its state and what the coordinator said, at now.
func (info *JobInfo) explainWait(now time.Time) {
	at := func(t time.Time) string {
		return t.Local().Format("2006-01-02 15:04:05") + " (in " + max(t.Sub(now), 0).Round(time.Second).String() + ")"
	}
	switch {
	case info.State == StateDelayed && !info.RunAt.IsZero():
		info.Waiting = "delayed: it runs at " + at(info.RunAt)
	case info.State == StateDelayed:
		info.Waiting = "delayed: its time to run has not come"
	case info.State == StateRetryWait && !info.RetryAt.IsZero():
		info.Waiting = "waiting to retry: it is released again at " + at(info.RetryAt)
	case info.State != StatePending:
	case info.HeldBy != nil && info.HeldBy.Paused:
		info.Waiting = fmt.Sprintf("paused: the limit on %s %q is paused (weave limit resume)", info.HeldBy.Kind, info.HeldBy.Name)
	case info.HeldBy != nil:
		info.Waiting = fmt.Sprintf("held back by the limit on %s %q: it has no room now (weave limit list)", info.HeldBy.Kind, info.HeldBy.Name)
	case len(info.Missing) > 0:
		info.Waiting = fmt.Sprintf("requires %s, which no live worker holds", strings.Join(info.Missing, ", "))
	default:
		info.Waiting = "waiting for a free slot"
	}
}

// GroupState is where a group incarnation stands.
type GroupState string

// Group states.
const (
	GroupOpen     GroupState = "open"     // not sealed: its producer may publish more jobs
	GroupRunning  GroupState = "running"  // sealed, some jobs have not ended
	GroupComplete GroupState = "complete" // every job ended; the summary is stored (or being stored)
	// GroupWaiting: sealed, held until the groups it runs after have completed (GroupInfo.WaitsFor).
	GroupWaiting GroupState = "waiting"
)

// GroupInfo describes one incarnation of a group: its progress while it runs, its summary after.
type GroupInfo struct {
	ID          string     `json:"id"`
	Incarnation uint64     `json:"incarnation"`
	State       GroupState `json:"state"`
	// Abandoned: the coordinator sealed it because its producer went silent.
	Abandoned bool `json:"abandoned,omitempty"`
	// Jobs counts its jobs per state (live only; after it completed see Summary).
	Jobs map[State]int `json:"jobs,omitempty"`
	// Admitted counts the jobs it admitted; Queued those waiting in the scheduler; InFlight
	// those released and not yet reported (live only).
	Admitted int `json:"admitted"`
	Queued   int `json:"queued"`
	InFlight int `json:"in_flight"`
	// OpenedAt is when its open was stored (live only); LastHeard when the coordinator last
	// heard from its producer, while it is open; CompletedAt when its summary was stored.
	OpenedAt    time.Time `json:"opened_at,omitzero"`
	LastHeard   time.Time `json:"last_heard,omitzero"`
	CompletedAt time.Time `json:"completed_at,omitzero"`
	// Summary counts the jobs by final state once it is complete.
	Summary *Summary `json:"summary,omitempty"`
	// HeldBack lists the limits holding some of its pending jobs back (a pause, a concurrency
	// or rate limit: `weave limit`), with how many each holds (live only).
	HeldBack []HeldBack `json:"held_back,omitempty"`
	// Unplaceable counts its pending jobs that require resources no live worker holds;
	// NextRunAt is when the first of its delayed jobs runs (live only).
	Unplaceable int       `json:"unplaceable,omitempty"`
	NextRunAt   time.Time `json:"next_run_at,omitzero"`
	// WaitsFor names the groups it runs after (After, Then) that have not completed as it asks:
	// none of its jobs is released meanwhile (live only).
	WaitsFor []string `json:"waits_for,omitempty"`
	// FollowedBy names the groups waiting on it, at most 20 (live only).
	FollowedBy []string `json:"followed_by,omitempty"`
	// Priority is its priority (Priority), 0 for none (live only).
	Priority int `json:"priority,omitempty"`
}

// HeldBack is a limit holding some of a group's pending jobs back: Kind and Name say which
// (the group's own, or a resource's), Paused whether it is a pause, Jobs how many it holds.
type HeldBack = wire.HeldBack

// Job looks up a job by ID. A job that has not ended is described by the running coordinator
// (ErrNoCoordinator without one), and a running one by the worker running it; one that ended,
// from its stored outcome. It returns an error wrapping ErrJobNotFound when no job has the ID, or
// its outcome is older than the result retention.
//
// Cost: a few requests for a job that has not ended, or whose stored message names its group;
// otherwise it reads the outcomes of the retained groups that may hold it (the coordinator names
// them, nearest first), and without a coordinator every stored outcome.
func (d *Dispatcher) Job(ctx context.Context, id uint64) (*JobInfo, error) {
	if id == 0 {
		return nil, fmt.Errorf("%w: job IDs start at 1", ErrJobNotFound)
	}
	return d.job(ctx, id, "")
}

// JobByKey looks up the job of a group with a key, as Job does. When the group ID was published
// more than once, the latest job with the key wins. It reads the group's stored job messages and
// outcomes (a batch direct get per 32), so its cost grows with the group's size. It returns an error wrapping ErrInvalidGroup
// or ErrInvalidJob for a bad group ID or key, and ErrJobNotFound when no stored job or outcome
// of the group has the key.
func (d *Dispatcher) JobByKey(ctx context.Context, groupID, key string) (*JobInfo, error) {
	if err := validateGroupID(groupID); err != nil {
		return nil, err
	}
	if key == "" {
		return nil, fmt.Errorf("%w: empty key", ErrInvalidJob)
	}
	if err := wire.ValidateKey(key); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidJob, err)
	}
	if err := d.ensure(ctx); err != nil {
		return nil, err
	}
	gtok := wire.GroupToken(groupID)
	var id uint64
	// Jobs still stored: the group's job subject.
	err := d.eachStored(ctx, d.jobs, d.names.JobSubject(gtok), math.MaxUint64, func(m *directget.Msg) bool {
		if m.Header.Get(wire.HdrKey) == key {
			id = max(id, m.Seq)
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	// Jobs that ended: the group's outcomes.
	err = d.eachStored(ctx, d.results, d.names.OutcomeSubject(gtok), math.MaxUint64, func(m *directget.Msg) bool {
		outs, _, err := wire.DecodeOutcomeMsg(m.Data)
		if err == nil {
			for _, o := range outs {
				if o.Key == key {
					id = max(id, o.ID)
				}
			}
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	if id == 0 {
		return nil, fmt.Errorf("%w: no job of group %q has key %q", ErrJobNotFound, groupID, key)
	}
	return d.job(ctx, id, groupID)
}

// job looks up job id; hint is its group ID when the caller knows it.
func (d *Dispatcher) job(ctx context.Context, id uint64, hint string) (*JobInfo, error) {
	if err := d.ensure(ctx); err != nil {
		return nil, err
	}
	info := &JobInfo{ID: id}
	msg, err := d.storedJob(ctx, id)
	if err != nil {
		return nil, err
	}
	if msg == nil {
		// Not stored: beyond the stream's end, it never existed (no need to read outcomes).
		s, err := d.stream(ctx, d.names.JobsStream())
		if err != nil {
			return nil, err
		}
		rctx, cancel := d.requestContext(ctx)
		si, err := s.Info(rctx)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("weave: job %d: %w", id, err)
		}
		if seq := wire.JobSeq(id); seq > si.State.LastSeq {
			where := ""
			if seq != id {
				where = fmt.Sprintf(" (a job of the pack at sequence %d)", seq)
			}
			return nil, fmt.Errorf("%w: no job %d%s: the %s stream ends at %d", ErrJobNotFound, id, where, d.names.JobsStream(), si.State.LastSeq)
		}
	}
	if msg != nil {
		if job := jobOf(msg, id); job != nil {
			meta := job.Meta
			info.Group, info.Key, info.MaxAttempts, info.RunAt, info.Priority = meta.Group, meta.Key, meta.MaxAttempts, meta.RunAt, meta.Priority
			hint = meta.Group
		}
		info.PublishedAt = storedTime(msg.Header)
	}
	rep, err := d.inspect(ctx, wire.InspectRequest{Job: id, Group: hint})
	live := err == nil
	if err != nil && !errors.Is(err, ErrNoCoordinator) {
		return nil, err
	}
	if live && rep.Job != nil {
		j := rep.Job
		info.State, info.Attempts = State(j.State), int(j.Attempt)
		info.Group = cmpOr(j.Group, info.Group)
		info.Key = cmpOr(j.Key, info.Key)
		info.Incarnation = j.Incarnation
		if j.MaxAttempts > 0 {
			info.MaxAttempts = j.MaxAttempts
		}
		info.Pool, info.Workers, info.Worker = j.Pool, j.Workers, j.Worker
		info.ReleasedAt, info.RetryAt = j.Released, j.RetryAt
		info.HeldBy, info.Missing = j.HeldBy, j.Missing
		info.explainWait(time.Now())
		if info.State == StateRunning && info.Pool != "" {
			d.askHolder(ctx, info)
		}
		for _, a := range j.History {
			info.History = append(info.History, Attempt{At: a.At, Worker: a.Worker, Err: a.Error})
		}
		if info.State.ended() && info.Group != "" {
			// Its outcome is stored, or about to be: read it for the result.
			if _, err := d.findOutcome(ctx, info, []wire.GroupLive{{ID: info.Group, Incarnation: info.Incarnation}}); err != nil {
				return nil, err
			}
		}
		return info, nil
	}
	// Not tracked by the coordinator (its group completed), or no coordinator: its outcome.
	var where []wire.GroupLive
	switch {
	case live:
		where = rep.Candidates
	case hint != "":
		where = []wire.GroupLive{{ID: hint}}
	default:
		where = []wire.GroupLive{{}} // every group's outcomes
	}
	found, err := d.findOutcome(ctx, info, where)
	switch {
	case err != nil:
		return nil, err
	case found:
		return info, nil
	case msg != nil && live:
		// Stored, and the coordinator has not admitted it yet.
		info.State = StatePending
		return info, nil
	case msg != nil:
		return nil, fmt.Errorf("weave: job %d of group %q has not ended, and its live state is unknown: %w", id, info.Group, ErrNoCoordinator)
	}
	return nil, fmt.Errorf("%w: no job %d is stored, and no outcome of it within the result retention", ErrJobNotFound, id)
}

// heldTimeout bounds the wait for the worker running a job to answer.
const heldTimeout = 500 * time.Millisecond

// askHolder asks the workers of a running job's pool which of them runs it: the one that does
// answers with its ID and when its handler started. Without an answer (the batch is still queued
// on a worker, or that worker is older than this protocol) Worker stays as the coordinator said.
func (d *Dispatcher) askHolder(ctx context.Context, info *JobInfo) {
	ctx, cancel := context.WithTimeout(ctx, min(heldTimeout, d.cfg.RequestTimeout))
	defer cancel()
	req, _ := json.Marshal(wire.HeldRequest{Version: wire.Version, Job: info.ID}) // plain fields only
	m, err := d.nc.RequestWithContext(ctx, d.names.HeldSubject(info.Pool), req)
	if err != nil {
		return
	}
	var rep wire.HeldReply
	if json.Unmarshal(m.Data, &rep) != nil || rep.Version != wire.Version || rep.Worker == "" {
		return
	}
	info.Worker, info.StartedAt = rep.Worker, rep.Started
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func (s State) ended() bool { return s == StateDone || s == StateFailed || s == StateCanceled }

// findOutcome reads the outcomes of the given incarnations (ID "" = every group, Incarnation 0
// = every incarnation, SummarySeq 0 = up to the stream's end) for info.ID's outcome, and fills
// info from it.
func (d *Dispatcher) findOutcome(ctx context.Context, info *JobInfo, where []wire.GroupLive) (bool, error) {
	for _, g := range where {
		subject := d.names.AllOutcomes()
		if g.ID != "" {
			subject = d.names.OutcomeSubject(wire.GroupToken(g.ID))
		}
		upTo := uint64(math.MaxUint64)
		if g.SummarySeq > 0 {
			upTo = g.SummarySeq
		}
		want := ""
		if g.Incarnation > 0 {
			want = strconv.FormatUint(g.Incarnation, 10)
		}
		found := false
		err := d.eachStored(ctx, d.results, subject, upTo, func(m *directget.Msg) bool {
			if want != "" && m.Header.Get(wire.HdrGroupSeq) != want {
				return true
			}
			outs, _, err := wire.DecodeOutcomeMsg(m.Data)
			if err != nil {
				return true // another message; Failed reports malformed ones
			}
			for i := range outs {
				if outs[i].ID != info.ID {
					continue
				}
				o := jobOutcome("", &outs[i])
				group, _ := wire.ParseGroupToken(strings.TrimPrefix(m.Subject, d.names.OutcomeSubject("")))
				info.Group = cmpOr(info.Group, group)
				info.Key = cmpOr(info.Key, o.Key)
				info.State, info.Attempts, info.History = o.State, o.Attempts, o.History
				info.Result, info.Err = o.Result, o.Err
				info.EndedAt = storedTime(m.Header)
				info.Incarnation, _ = strconv.ParseUint(m.Header.Get(wire.HdrGroupSeq), 10, 64)
				info.Pool, info.Workers, info.Worker, info.RetryAt = "", nil, "", time.Time{}
				found = true // a later record of the same job (repeated after a crash) wins
			}
			return true
		})
		if err != nil || found {
			return found, err
		}
	}
	return false, nil
}

// eachStored calls fn with each message on subject (wildcards allowed) of the stream get reads, up
// to sequence upTo, in order, reading a page per batch direct get, until fn returns false.
func (d *Dispatcher) eachStored(ctx context.Context, get *directget.Client, subject string, upTo uint64, fn func(*directget.Msg) bool) error {
	for from := uint64(1); from <= upTo; {
		rctx, cancel := d.requestContext(ctx)
		msgs, err := get.NextUpTo(rctx, subject, from, scanPage, scanPageBytes)
		cancel()
		if err != nil {
			return fmt.Errorf("weave: read %s: %w", subject, err)
		}
		if len(msgs) == 0 {
			return nil
		}
		for _, m := range msgs {
			if m.Seq > upTo || !fn(m) {
				return nil
			}
			from = m.Seq + 1
		}
	}
	return nil
}

// jobOf is job id of the stored message m (which holds one job, or a pack), nil if m does not
// hold it or is not a valid job message.
func jobOf(m *directget.Msg, id uint64) *wire.StoredJob {
	jobs, _ := wire.ParseStoredJobs(m.Seq, m.Header, m.Data) // nil if not a valid job message
	return wire.JobIn(jobs, id)
}

// storedJob reads the message that stores job id (alone or in a pack) from JOBS, or nil if the
// stream does not hold it.
func (d *Dispatcher) storedJob(ctx context.Context, id uint64) (*directget.Msg, error) {
	if wire.JobSeq(id) == 0 {
		return nil, nil // no message has sequence 0
	}
	rctx, cancel := d.requestContext(ctx)
	defer cancel()
	msgs, errs := d.jobs.GetEach(rctx, []uint64{wire.JobSeq(id)})
	switch {
	case errors.Is(errs[0], directget.ErrNotFound):
		return nil, nil
	case errs[0] != nil:
		return nil, fmt.Errorf("weave: read job %d: %w", id, errs[0])
	case !strings.HasPrefix(msgs[0].Subject, d.names.JobSubject("")):
		return nil, nil // a group control message: no job has its sequence
	}
	return msgs[0], nil
}

// storedTime is when the server stored a message read with a direct get, or zero.
func storedTime(h nats.Header) time.Time {
	t, err := time.Parse(time.RFC3339Nano, h.Get("Nats-Time-Stamp"))
	if err != nil {
		return time.Time{}
	}
	return t
}

// inspect asks the running coordinator. It returns an error wrapping ErrNoCoordinator when none
// answers within RequestTimeout, and one naming the coordinator's reason when it refused the
// request.
func (d *Dispatcher) inspect(ctx context.Context, req wire.InspectRequest) (wire.InspectReply, error) {
	rctx, cancel := d.requestContext(ctx)
	defer cancel()
	m, err := d.nc.RequestWithContext(rctx, d.names.InspectSubject(), req.Marshal())
	switch {
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil, errors.Is(err, nats.ErrTimeout):
		return wire.InspectReply{}, fmt.Errorf("%w in namespace %q: %w", ErrNoCoordinator, d.names.Namespace(), err)
	case err != nil:
		return wire.InspectReply{}, fmt.Errorf("weave: inspect: %w", err)
	}
	rep, err := wire.ParseInspectReply(m.Data)
	if err != nil {
		return wire.InspectReply{}, err
	}
	if rep.Error != "" {
		return wire.InspectReply{}, fmt.Errorf("weave: the coordinator refused the inspect request: %s", rep.Error)
	}
	return rep, nil
}

// Group describes the latest incarnation of a group: its progress from the running coordinator
// while it runs, its summary after it completed (within the result retention). Without a
// coordinator, only a completed group is found (else the error wraps ErrNoCoordinator). It
// returns an error wrapping ErrGroupNotFound when no incarnation of the ID is known.
func (d *Dispatcher) Group(ctx context.Context, id string) (*GroupInfo, error) {
	if err := validateGroupID(id); err != nil {
		return nil, err
	}
	if err := d.ensure(ctx); err != nil {
		return nil, err
	}
	rep, err := d.inspect(ctx, wire.InspectRequest{Group: id})
	live := err == nil
	if err != nil && !errors.Is(err, ErrNoCoordinator) {
		return nil, err
	}
	if live && rep.Group != nil {
		gi := groupInfo(rep.Group)
		if rep.Group.SummarySeq > 0 {
			if err := d.fillSummaries(ctx, []*GroupInfo{gi}, []uint64{rep.Group.SummarySeq}); err != nil {
				return nil, err
			}
		}
		return gi, nil
	}
	// Not known to the coordinator, or no coordinator: the last message on its outcome subject.
	var gi *GroupInfo
	err = d.eachLast(ctx, d.names.OutcomeSubject(wire.GroupToken(id)), func(m *directget.Msg) {
		_, sum, err := wire.DecodeOutcomeMsg(m.Data)
		if err != nil || sum == nil {
			return
		}
		s := summaryOf(sum)
		inc, _ := strconv.ParseUint(m.Header.Get(wire.HdrGroupSeq), 10, 64)
		gi = &GroupInfo{ID: id, Incarnation: inc, State: GroupComplete, Abandoned: s.Abandoned, Admitted: s.Jobs, CompletedAt: storedTime(m.Header), Summary: &s}
	})
	switch {
	case err != nil:
		return nil, err
	case gi != nil:
		return gi, nil
	case !live:
		return nil, fmt.Errorf("weave: group %q: no summary stored: %w", id, ErrNoCoordinator)
	}
	return nil, fmt.Errorf("%w: %q is neither running nor complete within the result retention", ErrGroupNotFound, id)
}

// eachLast calls fn with the last message stored on subject, if any.
func (d *Dispatcher) eachLast(ctx context.Context, subject string, fn func(*directget.Msg)) error {
	rctx, cancel := d.requestContext(ctx)
	defer cancel()
	req := []byte(`{"last_by_subj":"` + subject + `"}`) // a valid subject needs no escaping
	m, err := d.directGet(rctx, directGetAPI+d.names.ResultsStream(), req)
	if err != nil {
		return fmt.Errorf("weave: read %s: %w", subject, err)
	}
	switch status := m.Header.Get("Status"); status {
	case "":
	case "404":
		return nil
	default:
		return fmt.Errorf("weave: read %s: status %s %s", subject, status, m.Header.Get("Description"))
	}
	seq, _ := strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
	fn(&directget.Msg{Seq: seq, Subject: subject, Header: m.Header, Data: m.Data})
	return nil
}

// Groups lists the groups the running coordinator tracks (open, running, or complete and being
// summarised), in arrival order, then those complete within the result retention, the latest
// first; each list holds at most 500 groups. It needs a coordinator (ErrNoCoordinator).
func (d *Dispatcher) Groups(ctx context.Context) ([]GroupInfo, error) {
	if err := d.ensure(ctx); err != nil {
		return nil, err
	}
	rep, err := d.inspect(ctx, wire.InspectRequest{Groups: true})
	if err != nil {
		return nil, err
	}
	out := make([]GroupInfo, len(rep.Groups))
	var (
		retained []*GroupInfo
		seqs     []uint64
	)
	for i := range rep.Groups {
		out[i] = *groupInfo(&rep.Groups[i])
		if s := rep.Groups[i].SummarySeq; s > 0 {
			retained, seqs = append(retained, &out[i]), append(seqs, s)
		}
	}
	if err := d.fillSummaries(ctx, retained, seqs); err != nil {
		return nil, err
	}
	// The coordinator lists the retained ones roughly in completion order (the order their
	// messages were purged); by their summaries' times they are exact.
	first := len(out) - len(retained)
	slices.SortStableFunc(out[first:], func(a, b GroupInfo) int { return b.CompletedAt.Compare(a.CompletedAt) })
	return out, nil
}

// fillSummaries reads the summaries at seqs in RESULTS into gis (one batch of direct gets). A
// summary deleted meanwhile (its retention expired) leaves Summary nil.
func (d *Dispatcher) fillSummaries(ctx context.Context, gis []*GroupInfo, seqs []uint64) error {
	if len(seqs) == 0 {
		return nil
	}
	rctx, cancel := d.requestContext(ctx)
	defer cancel()
	msgs, errs := d.results.GetEach(rctx, seqs)
	for i, m := range msgs {
		if errs[i] != nil && !errors.Is(errs[i], directget.ErrNotFound) {
			return fmt.Errorf("weave: read the summary of group %q: %w", gis[i].ID, errs[i])
		}
		if m == nil {
			continue
		}
		if _, sum, err := wire.DecodeOutcomeMsg(m.Data); err == nil && sum != nil {
			s := summaryOf(sum)
			gis[i].Summary, gis[i].Admitted, gis[i].Abandoned = &s, s.Jobs, s.Abandoned
			if at := storedTime(m.Header); !at.IsZero() {
				gis[i].CompletedAt = at // when the summary was stored
			}
		}
	}
	return nil
}

func groupInfo(g *wire.GroupLive) *GroupInfo {
	gi := &GroupInfo{
		ID: g.ID, Incarnation: g.Incarnation, Abandoned: g.Abandoned, Admitted: int(g.Admitted),
		Queued: g.Queued, InFlight: g.InFlight, OpenedAt: g.OpenedAt, LastHeard: g.LastHeard, CompletedAt: g.CompletedAt,
		HeldBack: g.HeldBack, Unplaceable: g.Unplaceable, NextRunAt: g.NextRunAt, WaitsFor: g.WaitsFor, FollowedBy: g.FollowedBy, Priority: g.Priority,
	}
	switch {
	case g.Complete:
		gi.State = GroupComplete
	case g.Sealed && len(g.WaitsFor) > 0:
		gi.State = GroupWaiting
	case g.Sealed:
		gi.State = GroupRunning
	default:
		gi.State = GroupOpen
	}
	if len(g.Jobs) > 0 {
		gi.Jobs = make(map[State]int, len(g.Jobs))
		for s, n := range g.Jobs {
			gi.Jobs[State(s)] = int(n)
		}
	}
	if g.Complete && g.SummarySeq == 0 {
		// Tracked and complete: its summary is being stored; the counts say the same.
		s := Summary{Jobs: int(g.Admitted), Done: gi.Jobs[StateDone], Failed: gi.Jobs[StateFailed], Canceled: gi.Jobs[StateCanceled], Abandoned: g.Abandoned}
		gi.Summary = &s
	}
	return gi
}
