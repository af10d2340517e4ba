package dispatcher

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"iter"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weavejobs/weave/internal/wire"
)

// State is the final state of a job.
type State string

// Final job states.
const (
	StateDone     State = "done"     // the handler succeeded
	StateFailed   State = "failed"   // the last allowed attempt failed, or the failure was permanent
	StateCanceled State = "canceled" // the group or job was canceled before it succeeded
)

// JobOutcome is the final record of one job.
type JobOutcome struct {
	// Group is the ID of the job's group. A Handle's readers know it already; Dispatcher.Failed
	// lists the jobs of every group and needs it to tell them apart.
	Group string
	// ID is the job's ID, which names where it is stored in the JOBS stream (see Handle.FirstID).
	ID       uint64
	Key      string
	State    State
	Attempts int
	// Result is what the handler returned, for StateDone; nil when it returned nothing.
	Result []byte
	// Err is the last attempt's error, for StateFailed and StateCanceled.
	Err string
	// History lists the job's failed attempts, oldest first (the first and the latest ones when
	// there were more than wire.MaxHistory): when, on which worker, and the error.
	History []Attempt
}

// Attempt is one failed attempt of a job.
type Attempt struct {
	At     time.Time `json:"at"`
	Worker string    `json:"worker,omitempty"`
	Err    string    `json:"error"`
}

// Summary counts a finished group's jobs by final state; Jobs = Done + Failed + Canceled.
type Summary struct {
	Jobs     int `json:"jobs"`
	Done     int `json:"done"`
	Failed   int `json:"failed"`
	Canceled int `json:"canceled"`
	// Abandoned says the group was never sealed by its producer: it published no job and no
	// keep-alive for the coordinator's AbandonAfter (the producer died, or a raw client never
	// sealed), so the coordinator sealed it with the jobs it had.
	Abandoned bool `json:"abandoned,omitempty"`
}

func summaryOf(s *wire.GroupSummary) Summary {
	return Summary{Jobs: int(s.Jobs), Done: int(s.Done), Failed: int(s.Failed), Canceled: int(s.Canceled), Abandoned: s.Abandoned}
}

// Result is a finished group's outcome.
type Result struct {
	Summary Summary
	// Jobs holds one outcome per job ID in the order they were recorded. A job recorded twice
	// (the coordinator may repeat a record after a crash) keeps its last record. Outcomes the
	// RESULTS stream no longer retains (after the coordinator's result retention) are missing, while
	// Summary counts every job.
	Jobs []JobOutcome
}

// Handle refers to a published group. Its methods are safe for concurrent use.
type Handle struct {
	d     *Dispatcher
	group string
	gtok  string
	err   error // the group ID is invalid (from Attach); every call returns it

	// Set by Publish (or Redrive) before it returns the Handle; constant afterwards.
	accepted, duplicates int
	firstID, lastID      uint64
	// openSeq is the stream sequence of the group's open message: its incarnation. A group ID
	// may be published again after its group finished; outcomes carry the incarnation they
	// belong to, and a Handle from Publish reads only its own. 0 (Attach) accepts any. An open
	// that resumed a group left unsealed (a producer publishing it again after a crash) joined
	// that group's incarnation: the first wait finds out (resolveIncarnation), under resolveMu,
	// and every read of openSeq comes after it.
	openSeq    uint64
	resolveMu  sync.Mutex
	resolvedAt uint64 // the open sequence resolved, or 0 while not yet
	// submitted is the shared outcome subscription's state just before Submit stored the job,
	// if it was live then (see outcomeMark); zero otherwise.
	submitted outcomeMark
	// own is set when this Dispatcher opened the Handle's incarnation (Publish, Submit): its
	// outcomes come to the Dispatcher's reply token. Other Handles listen to their group's
	// subjects (see listen).
	own bool
	// followUps are the Handles of the follow-ups Publish stored with the group (Then).
	followUps []*Handle
}

// Attach returns a Handle for a group published earlier, possibly by another process, for example
// to wait for its outcome after the submitter restarted. The publishing counters of such a Handle
// (Accepted, Duplicates, FirstID, LastID) are zero. If the group ID was published more than once,
// the Handle reads the outcomes of every incarnation and ends at the first summary it meets (the
// oldest one still retained). If groupID is invalid, every method that does
// I/O returns an error wrapping ErrInvalidGroup.
func (d *Dispatcher) Attach(groupID string) *Handle {
	return &Handle{d: d, group: groupID, gtok: wire.GroupToken(groupID), err: validateGroupID(groupID)}
}

// GroupID returns the group's ID.
func (h *Handle) GroupID() string { return h.group }

// Accepted returns how many jobs Publish stored: every job whose publish the server acknowledged,
// except duplicates. The group's seal carries this count. A job whose acknowledgement was lost (a
// timeout or a disconnect, reported in Publish's error) is not counted, though the server may
// have stored it.
func (h *Handle) Accepted() int { return h.accepted }

// Duplicates returns how many jobs Publish published that JetStream dropped as duplicates of an
// earlier job with the same key in the same group, within the dedup window.
func (h *Handle) Duplicates() int { return h.duplicates }

// FirstID returns the smallest ID of the jobs Publish stored, 0 if none. A job's ID names where it
// is stored in JOBS: the stream sequence of its message if it is stored alone, 2^52 + sequence·32
// + index for a job of a pack (see Config.MaxPack and wire.PackedJobID). So IDs are unique and below
// 2^53, and increase in publish order for jobs stored alone; FirstID and LastID bound the IDs but
// do not list them.
func (h *Handle) FirstID() uint64 { return h.firstID }

// LastID returns the largest ID of the jobs Publish stored, 0 if none.
func (h *Handle) LastID() uint64 { return h.lastID }

// Cancel asks the coordinator to cancel the group: its jobs that have not finished end as
// StateCanceled and the group's outcome is recorded as usual, so Wait still returns.
//
// The request is stored in the JOBS stream, then Cancel waits for the coordinator's answer, at
// most Config.RequestTimeout: it returns nil once the coordinator has applied it (pending jobs
// are canceled, running ones told to stop), an error wrapping ErrGroupNotOpen if the group has no
// open incarnation (an unknown ID, or a group that has finished), or one wrapping ErrNoAnswer if
// no coordinator answered in time: the request stays stored and is applied when a coordinator
// reads it.
func (h *Handle) Cancel(ctx context.Context) error {
	if h.err != nil {
		return h.err
	}
	if err := h.d.ensure(ctx); err != nil {
		return err
	}
	_, err := h.d.cancel(ctx, wire.GroupControl{Group: h.group, Op: wire.OpCancel})
	return err
}

// CancelJobs cancels some jobs of the group: those not started never start, running ones see
// their context canceled (cause worker.ErrJobCanceled); each ends canceled. The result says
// what the coordinator did: the jobs canceled and stopping, and the IDs it left alone (jobs
// that had ended, IDs not in the group). 0, never a job ID, is an error wrapping ErrInvalidJob.
// It waits for the coordinator's answer as Cancel does, with the same errors.
func (h *Handle) CancelJobs(ctx context.Context, ids ...uint64) (CancelResult, error) {
	if h.err != nil {
		return CancelResult{}, h.err
	}
	if len(ids) == 0 || len(ids) > wire.MaxCancelJobs {
		return CancelResult{}, fmt.Errorf("%w: cancel %d jobs (1 to %d per call)", ErrInvalidJob, len(ids), wire.MaxCancelJobs)
	}
	// The coordinator rejects a whole cancel message naming ID 0 (never a job ID), which would
	// leave the other jobs running while this call reported success.
	if slices.Contains(ids, 0) {
		return CancelResult{}, fmt.Errorf("%w: cancel job 0 of group %q: job IDs start at 1", ErrInvalidJob, h.group)
	}
	if err := h.d.ensure(ctx); err != nil {
		return CancelResult{}, err
	}
	return h.d.cancel(ctx, wire.GroupControl{Group: h.group, Op: wire.OpCancel, Jobs: ids})
}

// Wait blocks until the group has finished (every job is in a final state) and returns its
// outcome, or returns ctx's error. It reads the group's outcomes from the RESULTS stream from the
// beginning, so it works for a group that finished long ago (within the result retention)
// and from any process. Like WaitJob it creates no consumer, so any number of Wait calls may run
// at once (see follow). A message that cannot be decoded stops Wait with an error wrapping
// ErrMalformedOutcome. Wait holds every outcome in memory; for very large groups use Outcomes or
// WaitSummary.
func (h *Handle) Wait(ctx context.Context) (*Result, error) {
	var (
		jobs  []JobOutcome
		index = map[uint64]int{}
		bad   error
	)
	sum, err := h.follow(ctx, func(o JobOutcome) bool {
		if i, ok := index[o.ID]; ok {
			jobs[i] = o
			return true
		}
		index[o.ID] = len(jobs)
		jobs = append(jobs, o)
		return true
	}, func(err error) bool {
		bad = err
		return false
	})
	if bad != nil {
		return nil, bad
	}
	if err != nil {
		return nil, err
	}
	return &Result{Summary: *sum, Jobs: jobs}, nil
}

// Outcomes streams the group's job outcomes in the order they were recorded, from the beginning,
// waiting for new ones until the group has finished; then the sequence ends. Memory use does not
// depend on the group's size, and it creates no consumer (see follow). A job may appear more
// than once if the coordinator repeated a record after a crash. Under load, outcomes come in
// bunches: a busy coordinator writes one group's outcomes at most once per its OutcomeLinger
// (10ms by default), and a complete group's at once.
//
// A message that cannot be decoded yields an error wrapping ErrMalformedOutcome and the sequence
// continues, so the caller may skip it; any other error (ctx's end included) is yielded last.
func (h *Handle) Outcomes(ctx context.Context) iter.Seq2[JobOutcome, error] {
	return func(yield func(JobOutcome, error) bool) {
		stopped := false
		_, err := h.follow(ctx, func(o JobOutcome) bool {
			stopped = !yield(o, nil)
			return !stopped
		}, func(err error) bool {
			stopped = !yield(JobOutcome{}, err)
			return !stopped
		})
		if err != nil && !stopped {
			yield(JobOutcome{}, err)
		}
	}
}

// WaitSummary blocks until the group has finished and returns its counts, or returns ctx's error.
// Unlike Wait it does not read the outcomes: for a finished group it reads one message. It creates
// no consumer: it waits on a subscription the Dispatcher's WaitSummary calls share (see Close).
func (h *Handle) WaitSummary(ctx context.Context) (Summary, error) {
	if h.err != nil {
		return Summary{}, h.err
	}
	if err := h.d.ensure(ctx); err != nil {
		return Summary{}, err
	}
	if sum, ok, err := h.waitSummary(ctx); ok || err != nil {
		return sum, err
	}
	// The Dispatcher was closed: read the stored summary on a growing interval.
	var (
		sum    Summary
		found  bool
		stored error
	)
	_, _, err := waitShared[struct{}](ctx, h.d, nil, firstRecheck, func() bool {
		sum, found, stored = h.storedSummary(ctx)
		return found || errors.Is(stored, ErrMalformedOutcome) || errors.Is(stored, nats.ErrConnectionClosed)
	})
	if err != nil {
		return Summary{}, fmt.Errorf("weave: read outcomes of group %q: %w", h.group, err)
	}
	return sum, stored
}

// WaitJob blocks until the outcome of the job with the given ID is recorded and returns it, or
// returns ctx's error. It is for a caller that needs one job's result, not the group's: it returns
// as soon as that job is final, without waiting for the rest of the group, and holds no other
// outcome in memory. Like Wait it reads the group's outcomes from the beginning, so it works for
// a job that finished long ago and from a Handle returned by Attach. It creates no consumer: it
// waits on the subscription the Dispatcher shares (see Close), so many WaitJob calls, one per job
// of a large group say, cost little more than one.
//
// If the group finishes without the job among its outcomes, WaitJob returns an error wrapping
// ErrJobNotFound; so does an id of 0, which is never a job ID. A Handle from Publish reads only
// its own incarnation of the group ID, so a job of an earlier incarnation is not found; a Handle
// from Attach ends at the first summary it meets (see Attach). A message that cannot be decoded
// does not stop WaitJob, since the job's record may come later; but if the group then finishes
// without the job, the error wraps ErrMalformedOutcome instead of ErrJobNotFound, as the job may
// have been in that message. If the coordinator repeated the job's record after a crash, WaitJob
// returns the first one it reads.
func (h *Handle) WaitJob(ctx context.Context, id uint64) (JobOutcome, error) {
	what := fmt.Sprintf("job %d", id)
	if id == 0 && h.err == nil {
		return JobOutcome{}, fmt.Errorf("%w: %s in group %q: job IDs start at 1", ErrJobNotFound, what, h.group)
	}
	return h.waitOne(ctx, what, &jobWaiter{id: id})
}

// WaitKey is WaitJob for the job published with the given Job.Key. Keys are unique within a group
// only within the namespace's dedup window: if the group holds several jobs with
// the key, WaitKey returns the outcome recorded first. A job published without a key cannot be
// waited for by key: an empty key returns an error wrapping ErrJobNotFound at once.
func (h *Handle) WaitKey(ctx context.Context, key string) (JobOutcome, error) {
	what := fmt.Sprintf("job with key %q", key)
	if key == "" && h.err == nil {
		return JobOutcome{}, fmt.Errorf("%w: %s in group %q: jobs without a key have no key to wait for", ErrJobNotFound, what, h.group)
	}
	return h.waitOne(ctx, what, &jobWaiter{key: key})
}

// waitOne waits for the job w names, on the shared subscription (see jobwait.go), or once the
// Dispatcher is closed, by reading the group's outcomes on a growing interval (follow); what
// names the job in errors.
func (h *Handle) waitOne(ctx context.Context, what string, w *jobWaiter) (JobOutcome, error) {
	if h.err != nil {
		return JobOutcome{}, h.err
	}
	if err := h.d.ensure(ctx); err != nil {
		return JobOutcome{}, err
	}
	if err := h.resolveIncarnation(ctx); err != nil {
		return JobOutcome{}, err
	}
	w.group, w.openSeq, w.ch = h.group, h.openSeq, make(chan jobNote, 1)
	if out, ok, err := h.waitJob(ctx, what, w); ok || err != nil {
		return out, err
	}
	return h.followOne(ctx, what, func(o *JobOutcome) bool {
		if w.key != "" {
			return o.Key == w.key
		}
		return o.ID == w.id
	})
}

// followOne follows the group's outcomes until one matches and returns it; what names the job in
// errors. It stops reading at the match.
func (h *Handle) followOne(ctx context.Context, what string, match func(*JobOutcome) bool) (JobOutcome, error) {
	var (
		found JobOutcome
		ok    bool
		bad   error // the first undecodable message
	)
	sum, err := h.follow(ctx, func(o JobOutcome) bool {
		if match(&o) {
			found, ok = o, true
			return false
		}
		return true
	}, func(err error) bool {
		if bad == nil {
			bad = err
		}
		return true // the job's record may still come
	})
	switch {
	case ok:
		return found, nil
	case err != nil:
		return JobOutcome{}, err
	case bad != nil:
		// The job may have been in the message we could not read: not found is not certain.
		return JobOutcome{}, fmt.Errorf("weave: %s not among the readable outcomes of group %q: %w", what, h.group, bad)
	default:
		return JobOutcome{}, fmt.Errorf("%w: %s in group %q, finished with %d jobs", ErrJobNotFound, what, h.group, sum.Jobs)
	}
}

// follow reads the group's outcome subject in stream order, passing every outcome to each and
// every undecodable message to bad, until the group's summary arrives, which it returns. It
// returns nil, nil when each or bad returns false.
//
// It needs no consumer, so any number of Wait and Outcomes calls cost the server nothing but
// reads: it reads what is stored with batch direct gets, then waits on the Dispatcher's shared
// outcome subscription, which signals each message of the group, and reads again from where it
// stopped. Rechecks on a growing interval are the backstop for signals the subscription missed
// (written while the connection was down, or not yet served by the stream when signalled), and
// the only way after Close.
func (h *Handle) follow(ctx context.Context, each func(JobOutcome) bool, bad func(error) bool) (*Summary, error) {
	if h.err != nil {
		return nil, h.err
	}
	if err := h.d.ensure(ctx); err != nil {
		return nil, err
	}
	if err := h.resolveIncarnation(ctx); err != nil {
		return nil, err
	}
	sig := make(chan struct{}, 1)
	registered, recent, err := h.d.watchGroup(h.gtok, h.own, sig)
	if err != nil {
		return nil, err
	}
	if registered {
		defer h.d.unwatchGroup(h.gtok, h.own, sig)
	}

	keep := func(groupSeq string) bool { return sameIncarnation(h.openSeq, groupSeq) }
	subject := h.d.names.OutcomeSubject(h.gtok)
	from := uint64(1)
	interval := firstRecheck
	if recent {
		interval = recheckSoon // a message of the group went by just now: the stream may not serve it yet
	}
	waited := false // the test hook has been called
	for {
		read := from
		for m, err := range h.d.scanOutcomes(ctx, subject, from, math.MaxUint64, keep) {
			switch {
			case errors.Is(err, ErrMalformedOutcome):
				from = m.seq + 1
				if !bad(fmt.Errorf("%w: group %q: %w", ErrMalformedOutcome, h.group, err)) {
					return nil, nil
				}
				continue
			case ctx.Err() != nil:
				return nil, fmt.Errorf("weave: read outcomes of group %q: %w", h.group, ctx.Err())
			case errors.Is(err, nats.ErrConnectionClosed):
				return nil, fmt.Errorf("weave: read outcomes of group %q: %w", h.group, err)
			case err != nil:
				// A stream without a leader for a moment, a timeout: read again at the next recheck.
				h.d.log.Debug().Err(err).Str("group", h.group).Msg("read a group's outcomes")
				continue
			}
			from = m.seq + 1
			for i := range m.outs {
				if !each(jobOutcome(h.group, &m.outs[i])) {
					return nil, nil
				}
			}
			if m.sum != nil { // after the group's last outcomes, if it carries them
				s := summaryOf(m.sum)
				return &s, nil
			}
		}
		if hook := h.d.waitHook; hook != nil && !waited {
			hook()
		}
		waited = true
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("weave: read outcomes of group %q: %w", h.group, ctx.Err())
		case <-sig:
			t.Stop()
			if from > read {
				interval = firstRecheck
			} else {
				// Signalled, yet the last read found nothing new: the stream may serve the message
				// a moment after the subscription delivered it, so read again soon.
				interval = recheckSoon
			}
		case <-t.C:
			interval = min(2*interval, maxRecheck)
		}
	}
}

// jobOutcome converts a decoded outcome of the given group; it copies what aliases the message.
func jobOutcome(group string, o *wire.Outcome) JobOutcome {
	out := JobOutcome{Group: group, ID: o.ID, Key: o.Key, Attempts: int(o.Attempts)}
	for _, a := range o.History {
		out.History = append(out.History, Attempt{At: a.At, Worker: a.Worker, Err: a.Error})
	}
	switch o.State {
	case wire.FinalDone:
		out.State = StateDone
		if len(o.Data) > 0 {
			out.Result = bytes.Clone(o.Data) // o.Data aliases the whole message
		}
	case wire.FinalFailed:
		out.State = StateFailed
		out.Err = string(o.Data)
	case wire.FinalCanceled:
		out.State = StateCanceled
		out.Err = string(o.Data)
	}
	return out
}
