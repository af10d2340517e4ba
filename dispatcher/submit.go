package dispatcher

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/weavejobs/weave/internal/wire"
)

// Submit publishes one job as a group of its own, in one message: the coordinator applies it as
// the group's open, its only job and its seal (Publish costs three messages for a group of one).
// It returns the group's Handle and the job's ID; wait with h.WaitJob(ctx, id) or h.Wait.
//
// The group is groupID, or a generated "job-<unique>" when groupID is empty. A single job is a
// group like any other: it takes a feeder slot and a fair share of its own under the policy (a
// stream of single jobs shares the slots as that many groups of one), it retries, can be
// canceled (h.Cancel, or h.CancelJobs(ctx, id)), redriven if it failed, inspected, and limited
// by its group ID's limit. A group ID whose incarnation has not completed cannot take a single
// job: the coordinator refuses it (recorded in NS_REJECTED) and WaitJob waits until ctx ends, so
// give single jobs their own IDs. Submitting the same group ID and key again within the dedup
// window stores it once: Submit then returns the first one's ID and h.Duplicates() is 1.
//
// Of the group options After and Priority apply (a single job's group has weight 1 and no
// follow-ups of its own), as to a group Publish opens. job.Priority is the same as the Priority
// option: a single job's priority is its group's.
func (d *Dispatcher) Submit(ctx context.Context, groupID string, job Job, opts ...GroupOption) (h *Handle, id uint64, err error) {
	var o groupOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.weight > 1 || len(o.then) > 0 {
		return nil, 0, fmt.Errorf("%w of single job %q: only After and Priority apply to a single job", ErrInvalidOption, groupID)
	}
	if err := wire.ValidatePriority(o.priority); err != nil {
		return nil, 0, fmt.Errorf("%w of single job %q: %w", ErrInvalidOption, groupID, err)
	}
	msg, groupID, err := d.singleMsg(ctx, groupID, &job, o.edges(), o.priority)
	if err != nil {
		return nil, 0, err
	}
	if err := d.ensure(ctx); err != nil {
		return nil, 0, err
	}
	answers, err := d.openAnswers(wire.GroupControl{Group: groupID, After: o.edges()})
	if err != nil {
		return nil, 0, err
	}
	if answers != nil {
		defer func() { _ = answers.Unsubscribe() }()
	}
	mark := d.outcomeMark()
	rctx, cancel := d.requestContext(ctx)
	defer cancel()
	// Like an open, retry a while if the stream has no leader; the message ID makes a retry of a
	// stored message a duplicate.
	ack, err := d.js.PublishMsg(rctx, msg, jetstream.WithRetryAttempts(noLeaderRetries), jetstream.WithRetryWait(50*time.Millisecond))
	if err != nil {
		return nil, 0, fmt.Errorf("weave: submit job (key %q) as group %q: %w", job.Key, groupID, err)
	}
	if err := d.awaitOpen(ctx, answers, groupID, ack.Sequence); err != nil {
		return nil, 0, err
	}
	return d.singleHandle(groupID, ack, mark), ack.Sequence, nil
}

// Single is one job of SubmitMany: the job, and the group it is submitted as ("" for a generated
// "job-<unique>" ID, as Submit does).
type Single struct {
	Group string
	Job   Job
}

// Submitted is a job SubmitMany stored: its group's Handle and its ID. Wait with
// s.Handle.WaitJob(ctx, s.ID). The Handle's Duplicates is 1 when the job was stored before.
type Submitted struct {
	Handle *Handle
	ID     uint64
}

// SubmitMany submits single jobs as Submit does each one, but keeps up to Config.MaxPending
// publishes in flight instead of waiting for each one's acknowledgement, so a backlog of one-off
// jobs is stored at the stream's pace, not at one round trip per job. Every job is checked before any is published; an
// invalid one is an error wrapping ErrInvalidJob, naming its index, and nothing is published. A
// publish that fails stops the submission: SubmitMany returns the jobs stored so far, in order,
// with the error (the jobs after them may or may not be stored; submit them again with their
// keys, which the dedup window makes safe). The result is in the order of jobs.
func (d *Dispatcher) SubmitMany(ctx context.Context, jobs []Single) ([]Submitted, error) {
	msgs := make([]*nats.Msg, len(jobs))
	groups := make([]string, len(jobs))
	for i := range jobs {
		var err error
		if msgs[i], groups[i], err = d.singleMsg(ctx, jobs[i].Group, &jobs[i].Job, nil, 0); err != nil {
			return nil, fmt.Errorf("job %d: %w", i, err)
		}
	}
	if err := d.ensure(ctx); err != nil {
		return nil, err
	}
	mark := d.outcomeMark()
	out := make([]Submitted, 0, len(jobs))
	acks := make([]jetstream.PubAckFuture, 0, min(len(jobs), d.cfg.MaxPending))
	var failed error
	// settle waits for the oldest publish in flight and records it; after a failure, the rest
	// only free their slots.
	settle := func(wctx context.Context) error {
		f := acks[0]
		acks = acks[1:]
		defer func() { <-d.slots }()
		select {
		case ack := <-f.Ok():
			if failed == nil {
				i := len(out)
				out = append(out, Submitted{Handle: d.singleHandle(groups[i], ack, mark), ID: ack.Sequence})
			}
		case err := <-f.Err():
			if failed == nil {
				i := len(out)
				failed = fmt.Errorf("weave: submit job %d (key %q) as group %q: %w", i, jobs[i].Job.Key, groups[i], err)
			}
		case <-wctx.Done():
			if failed == nil {
				failed = fmt.Errorf("weave: submit job %d: acknowledgement: %w", len(out), context.Cause(wctx))
			}
		}
		return failed
	}
	// acquire takes a MaxPending slot, settling this call's oldest publish while none is free;
	// only with nothing in flight does it wait for other publications to free one.
	acquire := func() error {
		for {
			select {
			case d.slots <- struct{}{}:
				return nil
			default:
			}
			if len(acks) == 0 {
				select {
				case d.slots <- struct{}{}:
					return nil
				case <-ctx.Done():
					return context.Cause(ctx)
				}
			}
			if err := settle(ctx); err != nil {
				return err
			}
		}
	}
	for i, msg := range msgs {
		if err := acquire(); err != nil {
			if failed == nil {
				failed = fmt.Errorf("weave: submit job %d: %w", i, err)
			}
			break
		}
		f, err := d.js.PublishMsgAsync(msg, jetstream.WithRetryAttempts(noLeaderRetries), jetstream.WithRetryWait(50*time.Millisecond))
		if err != nil {
			<-d.slots
			failed = fmt.Errorf("weave: submit job %d (key %q) as group %q: %w", i, jobs[i].Job.Key, groups[i], err)
			break
		}
		acks = append(acks, f)
	}
	// Settle what is in flight also when ctx ended: those jobs were published.
	fctx, cancel := d.finishContext(ctx)
	defer cancel()
	for len(acks) > 0 {
		_ = settle(fctx)
	}
	return out, failed
}

// singleMsg checks job and returns its message as a single job of groupID (generated when
// empty), and the group ID.
func (d *Dispatcher) singleMsg(ctx context.Context, groupID string, job *Job, after []wire.After, priority int) (*nats.Msg, string, error) {
	if groupID == "" {
		groupID = "job-" + nuid.Next()
	}
	if err := validateGroupID(groupID); err != nil {
		return nil, "", err
	}
	switch {
	case job.Priority == 0:
	case priority == 0:
		priority = job.Priority
	case priority != job.Priority:
		return nil, "", fmt.Errorf("%w of single job %q: Job.Priority %d and the Priority option %d differ (a single job's priority is its group's: give one)", ErrInvalidOption, groupID, job.Priority, priority)
	}
	meta := wire.JobMeta{Group: groupID, Key: job.Key, Require: job.Require, Prefer: job.Prefer, MaxAttempts: job.MaxAttempts, Timeout: job.Timeout, Single: true, Reply: d.reply, After: after, Priority: priority}
	runAt, err := job.runAt(time.Now())
	if err == nil {
		meta.RunAt = runAt
		err = meta.Validate()
	}
	if err == nil && len(job.Payload) > d.cfg.MaxPayload {
		err = fmt.Errorf("payload is %d bytes, at most %d", len(job.Payload), d.cfg.MaxPayload)
	}
	if err != nil {
		return nil, "", fmt.Errorf("%w (key %q) submitted as group %q: %w", ErrInvalidJob, job.Key, groupID, err)
	}
	header := meta.Header()
	newJobTrace(ctx).set(header)
	return &nats.Msg{Subject: d.names.JobSubject(wire.GroupToken(groupID)), Header: header, Data: job.Payload}, groupID, nil
}

// singleHandle returns the Handle of a single job stored as ack says; mark is the outcome
// subscription's state before it was published.
func (d *Dispatcher) singleHandle(groupID string, ack *jetstream.PubAck, mark outcomeMark) *Handle {
	h := d.Attach(groupID)
	h.openSeq, h.resolvedAt = ack.Sequence, ack.Sequence // a single job is its own incarnation
	h.firstID, h.lastID = ack.Sequence, ack.Sequence
	if ack.Duplicate {
		h.duplicates = 1 // stored before: its outcome may be too
	} else {
		h.accepted = 1
		h.submitted = mark
		h.own = true // a duplicate's outcomes go to the producer that stored it first
	}
	return h
}
