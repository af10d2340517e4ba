package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/internal/wire"
)

// Dead letters. A job that failed (permanently, or out of attempts) stays inspectable after its
// group is complete: its outcome, with the history of its attempts, is in RESULTS and its
// message (payload and options) in JOBS until the result retention has passed. Failed lists
// those outcomes, reading RESULTS with direct get rather than a consumer: it reads what is stored
// and stops, so there is no consumer to create, and none to clean up when the caller stops
// early. Redrive asks the coordinator to run them again (a coordinator operation, like a cancel).

// scanPage is how many messages one batch direct get request reads, and scanPageBytes how many
// bytes of them at most past the first: together they bound the outcome messages a scan (Failed,
// Wait, inspection) holds at once, whatever size workers made them.
const (
	scanPage      = 32
	scanPageBytes = 1 << 20
)

// Failed lists the jobs still failed whose outcomes the RESULTS stream holds: those of groupID,
// or of every group when groupID is "". Each comes with its Group, its last error and its
// History. Failed reads what is stored when it is called and ends: it does not wait for jobs
// that fail later. Jobs come in the order their outcomes were recorded, so the jobs of different
// groups interleave.
//
// A failed job stays listed, whichever incarnation of its group it failed in, until a job
// Redrive published to run it again is done, or fails in its turn (then that job is listed, under
// its new ID), or until ResultRetention has passed; a failed job of a group that is still running
// appears as soon as it failed. A job may appear twice if the coordinator repeated its record
// after a crash. (Outcomes recorded by a coordinator older than this rule do not say which job
// they ran again: a job redriven by one stays listed.)
//
// The sequence is lazy: it reads the stream a page of messages at a time, so memory does not
// depend on the number of failed jobs (it holds the IDs of the jobs run again, read in a first
// pass), and breaking out of the loop stops reading. A message
// that cannot be decoded yields an error wrapping ErrMalformedOutcome and the sequence continues;
// any other error (an invalid groupID wrapping ErrInvalidGroup, ctx's end, a NATS error) is
// yielded last.
func (d *Dispatcher) Failed(ctx context.Context, groupID string) iter.Seq2[JobOutcome, error] {
	return func(yield func(JobOutcome, error) bool) {
		subject := d.names.AllOutcomes()
		if groupID != "" {
			if err := validateGroupID(groupID); err != nil {
				yield(JobOutcome{}, err)
				return
			}
			subject = d.names.OutcomeSubject(wire.GroupToken(groupID))
		}
		results, err := d.stream(ctx, d.names.ResultsStream())
		if err != nil {
			yield(JobOutcome{}, fmt.Errorf("weave: list failed jobs: %w", err))
			return
		}
		// Stop at what is stored now: the coordinator keeps appending.
		upTo := results.CachedInfo().State.LastSeq
		settled := map[uint64]bool{} // failed jobs run again since, done or failed anew
		for m, err := range d.scanOutcomes(ctx, subject, 1, upTo, nil) {
			if err != nil {
				if !errors.Is(err, ErrMalformedOutcome) {
					yield(JobOutcome{}, err)
					return
				}
				continue // yielded by the second pass
			}
			for _, o := range m.outs {
				if o.RedriveOf != 0 && o.State != wire.FinalCanceled {
					settled[o.RedriveOf] = true
				}
			}
		}
		for m, err := range d.scanOutcomes(ctx, subject, 1, upTo, nil) {
			if err != nil {
				if !yield(JobOutcome{}, err) {
					return
				}
				continue
			}
			for i := range m.outs {
				if m.outs[i].State == wire.FinalFailed && !settled[m.outs[i].ID] && !yield(jobOutcome(m.group, &m.outs[i]), nil) {
					return
				}
			}
		}
	}
}

// Redrive asks the coordinator to run failed jobs of groupID again, as a new incarnation of the
// group, and returns a Handle for that incarnation: with no ids, every job still failed in the
// group's complete incarnations (those Failed lists: a job failed in any of them, whichever, and
// not run again successfully since); else only the given IDs, each of which must be one of them.
// Redriving again once the new incarnation is complete redrives the jobs still failed then.
//
// The coordinator decides, on its own state, and answers (see ARCHITECTURE.md, "Dead letters
// and redrive"): Redrive publishes the request on the group's control subject (stored in the JOBS
// stream) and waits for the answer at most Config.RequestTimeout, within ctx. On acceptance the
// coordinator publishes the new incarnation itself: each job rebuilt from its stored message
// (payload, key, required and preferred resources, MaxAttempts and Timeout; other headers a
// producer may have added are not copied) under a new ID, and the seal. The Handle's Accepted is
// the number of jobs of the new incarnation; its FirstID and LastID are zero, and Duplicates 0.
// A coordinator that stops while publishing them is replaced by one that completes the
// publication, each job stored once.
//
// It returns a nil Handle and an error when nothing is run again:
//
//   - an incarnation of the group is not complete: ErrGroupRunning, with a Handle for that
//     incarnation (Wait on it, then redrive again), or a nil Handle if a redrive of the group is
//     already starting one;
//   - there is nothing to redrive (an unknown group, one whose retention has passed, one whose
//     failed jobs all ran again and succeeded), or an ID is not a job still failed: ErrNotFailed,
//     naming them;
//   - the stored messages of all the failed jobs are gone: ErrJobGone;
//   - no coordinator answered: ErrNoAnswer. The request stays stored and is decided when a
//     coordinator reads it, so the Redrive may have happened: call Redrive again, which is refused
//     with ErrGroupRunning (and a Handle) if it did, or Attach to the group.
//
// When some failed jobs' messages are gone, the others run again: Redrive returns the Handle and
// an error wrapping ErrJobGone that counts the missing ones.
func (d *Dispatcher) Redrive(ctx context.Context, groupID string, ids ...uint64) (*Handle, error) {
	if err := validateGroupID(groupID); err != nil {
		return nil, err
	}
	if err := context.Cause(ctx); err != nil {
		return nil, fmt.Errorf("weave: redrive group %q: %w", groupID, err)
	}
	if len(ids) > wire.MaxCancelJobs {
		return nil, fmt.Errorf("%w: redrive of %d jobs of group %q, at most %d per call", ErrInvalidJob, len(ids), groupID, wire.MaxCancelJobs)
	}
	if slices.Contains(ids, 0) {
		return nil, fmt.Errorf("%w: redrive of group %q: job ID 0", ErrNotFailed, groupID)
	}
	if err := d.ensure(ctx); err != nil {
		return nil, err
	}
	a, err := d.ask(ctx, wire.GroupControl{Group: groupID, Op: wire.OpRedrive, Jobs: ids})
	if err != nil {
		return nil, err
	}
	d.log.Debug().Str("group", groupID).Bool("ok", a.OK).Uint64("incarnation", a.Incarnation).Int("jobs", a.Jobs).Msg("redrive answered")
	switch {
	case a.OK:
		h := d.Attach(groupID)
		h.openSeq, h.resolvedAt, h.accepted = a.Incarnation, a.Incarnation, a.Jobs
		if a.Gone > 0 {
			return h, fmt.Errorf("%w: redrive of group %q: the stored messages of %d failed jobs are gone; the other %d run again",
				ErrJobGone, groupID, a.Gone, a.Jobs)
		}
		return h, nil
	case a.Code == wire.AnswerRunning:
		var h *Handle
		if a.Incarnation != 0 {
			h = d.Attach(groupID)
			h.openSeq, h.resolvedAt = a.Incarnation, a.Incarnation
		}
		return h, fmt.Errorf("%w: redrive refused: %s", ErrGroupRunning, a.Reason)
	case a.Code == wire.AnswerNotFailed:
		return nil, fmt.Errorf("%w: redrive refused: %s", ErrNotFailed, a.Reason)
	case a.Code == wire.AnswerGone:
		return nil, fmt.Errorf("%w: redrive refused: %s", ErrJobGone, a.Reason)
	default:
		return nil, fmt.Errorf("weave: redrive of group %q refused by the coordinator: %s", groupID, a.Reason)
	}
}

// outcomeMsg is one decoded message of an outcome subject.
type outcomeMsg struct {
	seq   uint64             // in RESULTS
	group string             // from the subject
	outs  []wire.Outcome     // none for a summary
	sum   *wire.GroupSummary // set for a summary
}

// scanOutcomes yields the messages stored on subject (wildcards allowed) from sequence from up to
// sequence upTo, in stream order, reading scanPage messages per request. With keep set, it skips the messages
// whose Weave-Group-Seq header keep refuses, before decoding them. A message that cannot be
// decoded yields an error wrapping ErrMalformedOutcome beside a message holding only its
// sequence, and the sequence continues; a read error is yielded last, beside nil.
func (d *Dispatcher) scanOutcomes(ctx context.Context, subject string, from, upTo uint64, keep func(groupSeq string) bool) iter.Seq2[*outcomeMsg, error] {
	return func(yield func(*outcomeMsg, error) bool) {
		stream := d.names.ResultsStream()
		prefix := d.names.OutcomeSubject("")
		for from <= upTo {
			rctx, cancel := d.requestContext(ctx)
			msgs, err := d.results.NextUpTo(rctx, subject, from, scanPage, scanPageBytes)
			cancel()
			if err != nil {
				yield(nil, fmt.Errorf("weave: read %s: %w", subject, err))
				return
			}
			if len(msgs) == 0 {
				return
			}
			for _, m := range msgs {
				if m.Seq > upTo {
					return
				}
				from = m.Seq + 1
				if keep != nil && !keep(m.Header.Get(wire.HdrGroupSeq)) {
					continue
				}
				om := &outcomeMsg{seq: m.Seq}
				om.group, err = wire.ParseGroupToken(strings.TrimPrefix(m.Subject, prefix))
				if err == nil {
					om.outs, om.sum, err = wire.DecodeOutcomeMsg(m.Data)
				}
				if err != nil {
					err = fmt.Errorf("%w: %s sequence %d (%s): %w", ErrMalformedOutcome, stream, m.Seq, m.Subject, err)
					if !yield(&outcomeMsg{seq: m.Seq}, err) {
						return
					}
					continue
				}
				if !yield(om, nil) {
					return
				}
			}
		}
	}
}

// stream returns a stream of the namespace, after checking that the namespace exists.
func (d *Dispatcher) stream(ctx context.Context, name string) (jetstream.Stream, error) {
	if err := d.ensure(ctx); err != nil {
		return nil, err
	}
	s, err := d.js.Stream(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", name, err)
	}
	return s, nil
}
