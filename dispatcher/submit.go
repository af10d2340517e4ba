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
func (d *Dispatcher) Submit(ctx context.Context, groupID string, job Job) (h *Handle, id uint64, err error) {
	if groupID == "" {
		groupID = "job-" + nuid.Next()
	}
	if err := validateGroupID(groupID); err != nil {
		return nil, 0, err
	}
	meta := wire.JobMeta{Group: groupID, Key: job.Key, Require: job.Require, Prefer: job.Prefer, MaxAttempts: job.MaxAttempts, Timeout: job.Timeout, Single: true, Reply: d.reply}
	runAt, err := job.runAt(time.Now())
	if err == nil {
		meta.RunAt = runAt
		err = meta.Validate()
	}
	if err != nil {
		return nil, 0, fmt.Errorf("%w (key %q) submitted as group %q: %w", ErrInvalidJob, job.Key, groupID, err)
	}
	if len(job.Payload) > d.cfg.MaxPayload {
		return nil, 0, fmt.Errorf("%w (key %q) submitted as group %q: payload is %d bytes, at most %d", ErrInvalidJob, job.Key, groupID, len(job.Payload), d.cfg.MaxPayload)
	}
	if err := d.ensure(ctx); err != nil {
		return nil, 0, err
	}
	header := meta.Header()
	newJobTrace(ctx).set(header)
	msg := &nats.Msg{Subject: d.names.JobSubject(wire.GroupToken(groupID)), Header: header, Data: job.Payload}
	mark := d.outcomeMark()
	rctx, cancel := d.requestContext(ctx)
	defer cancel()
	// Like an open, retry a while if the stream has no leader; the message ID makes a retry of a
	// stored message a duplicate.
	ack, err := d.js.PublishMsg(rctx, msg, jetstream.WithRetryAttempts(noLeaderRetries), jetstream.WithRetryWait(50*time.Millisecond))
	if err != nil {
		return nil, 0, fmt.Errorf("weave: submit job (key %q) as group %q: %w", job.Key, groupID, err)
	}
	h = d.Attach(groupID)
	h.openSeq, h.resolvedAt = ack.Sequence, ack.Sequence // a single job is its own incarnation
	h.own = !ack.Duplicate                               // a duplicate's outcomes go to the producer that stored it first
	h.firstID, h.lastID = ack.Sequence, ack.Sequence
	if ack.Duplicate {
		h.duplicates = 1 // stored before: its outcome may be too
	} else {
		h.accepted = 1
		h.submitted = mark
	}
	return h, ack.Sequence, nil
}
