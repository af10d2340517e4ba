package dispatcher

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
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
	meta, err := d.singleMeta(groupID, &job, o.edges(), o.priority)
	if err != nil {
		return nil, 0, err
	}
	groupID, msg := meta.Group, d.singleMsgOf(ctx, meta, job.Payload)
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
	return d.singleHandle(groupID, ack.Sequence, ack.Duplicate, mark), ack.Sequence, nil
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

// SubmitMany submits single jobs as Submit does each one, each its own group, but in far fewer
// messages: consecutive jobs without a key travel in packs of up to Config.MaxPack jobs (and 64
// KiB), one stored message each, as Publish packs a group's jobs; a job with a key keeps a message
// of its own, which JetStream deduplicates by group and key. Up to Config.MaxPending messages
// await their acknowledgement at once, so a backlog of one-off jobs is stored at the stream's
// pace, not at one round trip per job.
//
// Every job is checked before any is published; an invalid one is an error wrapping
// ErrInvalidJob, naming its index, and nothing is published. A publish that fails stops the
// submission: SubmitMany returns the jobs stored so far, in order, with the error; the jobs after
// them may or may not be stored: submit them again within the dedup window, which stores each
// once (a job with a key is deduplicated by its group and key, one alone without a key by its
// group, a pack by its groups, and the rest is packed again as it was). The result is in the
// order of jobs; a job of the same group and key as an earlier one of the call is its duplicate
// (its ID, Duplicates 1), as it would be had both been stored alone. A job of a pack has a packed
// ID (2^52 + sequence·32 + index, as a job of a group's pack), which is also its group's
// incarnation.
func (d *Dispatcher) SubmitMany(ctx context.Context, jobs []Single) ([]Submitted, error) {
	metas := make([]wire.JobMeta, len(jobs))
	for i := range jobs {
		var err error
		if metas[i], err = d.singleMeta(jobs[i].Group, &jobs[i].Job, nil, 0); err != nil {
			return nil, fmt.Errorf("job %d: %w", i, err)
		}
	}
	units := d.singleUnits(ctx, jobs, metas)
	if err := d.ensure(ctx); err != nil {
		return nil, err
	}
	mark := d.outcomeMark()
	out := make([]Submitted, 0, len(jobs))
	acks := make([]jetstream.PubAckFuture, 0, min(len(units), d.cfg.MaxPending))
	settled := 0 // units whose publish is settled: acks holds the next ones, in order
	var failed error
	// settle waits for the oldest publish in flight and records its jobs; after a failure, the
	// rest only free their slots.
	settle := func(wctx context.Context) error {
		f, u := acks[0], units[settled]
		acks = acks[1:]
		settled++
		if u.msg == nil {
			// A repeat of an earlier job of this call, which settled before it.
			if failed == nil {
				first := out[u.repeats]
				out = append(out, Submitted{Handle: d.singleHandle(metas[u.first].Group, first.ID, true, mark), ID: first.ID})
			}
			return failed
		}
		defer func() { <-d.slots }()
		select {
		case ack := <-f.Ok():
			if failed == nil {
				for k := range u.n {
					id := ack.Sequence
					if u.n > 1 {
						id = wire.PackedJobID(ack.Sequence, k)
					}
					out = append(out, Submitted{Handle: d.singleHandle(metas[u.first+k].Group, id, ack.Duplicate, mark), ID: id})
				}
			}
		case err := <-f.Err():
			if failed == nil {
				failed = fmt.Errorf("weave: submit job %d (key %q) as group %q: %w", u.first, jobs[u.first].Job.Key, metas[u.first].Group, err)
			}
		case <-wctx.Done():
			if failed == nil {
				failed = fmt.Errorf("weave: submit job %d: acknowledgement: %w", u.first, context.Cause(wctx))
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
	for _, u := range units {
		if u.msg == nil {
			acks = append(acks, nil) // nothing to publish: settled in its turn
			continue
		}
		if err := acquire(); err != nil {
			if failed == nil {
				failed = fmt.Errorf("weave: submit job %d: %w", u.first, err)
			}
			break
		}
		f, err := d.js.PublishMsgAsync(u.msg, jetstream.WithRetryAttempts(noLeaderRetries), jetstream.WithRetryWait(50*time.Millisecond))
		if err != nil {
			<-d.slots
			failed = fmt.Errorf("weave: submit job %d (key %q) as group %q: %w", u.first, jobs[u.first].Job.Key, metas[u.first].Group, err)
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

// singleUnit is one message of SubmitMany: jobs first to first+n-1, alone (n = 1) or a single pack;
// or, without a message, job first repeating job repeats (the same group and key) of the call.
type singleUnit struct {
	msg      *nats.Msg
	first, n int
	repeats  int
}

// singleUnits packs the checked single jobs (metas) into messages: runs of jobs without a key in
// single packs of up to MaxPack jobs and packBytes, the others, and a run of one, alone; a repeat
// of an earlier job is a unit without a message.
func (d *Dispatcher) singleUnits(ctx context.Context, jobs []Single, metas []wire.JobMeta) []singleUnit {
	limit := min(packBytes, d.cfg.MaxPayload)
	cost := func(i int) int {
		j := &jobs[i].Job
		return wire.SinglePackedSize(metas[i].Group, j.Payload, j.Require, j.Prefer)
	}
	// A job of the same group and key as an earlier one of the call is its duplicate, as
	// JetStream would make it if both went alone: one in a pack would instead be refused, its
	// group running, and its Handle wait for ever.
	seen := make(map[string]int, len(jobs))
	keyOf := func(i int) string { return wire.GroupToken(metas[i].Group) + "/" + metas[i].Key }
	first := func(i int) (int, bool) {
		k := keyOf(i)
		j, ok := seen[k]
		if !ok {
			seen[k] = i
		}
		return j, ok
	}
	var units []singleUnit
	for i := 0; i < len(jobs); {
		if j, ok := first(i); ok {
			units = append(units, singleUnit{first: i, n: 1, repeats: j})
			i++
			continue
		}
		n, size := 1, cost(i)
		if metas[i].Key == "" {
			for i+n < len(jobs) && n < d.cfg.MaxPack && metas[i+n].Key == "" && size+cost(i+n) <= limit {
				if _, ok := seen[keyOf(i+n)]; ok {
					break // a repeat: a unit of its own, next
				}
				first(i + n)
				size += cost(i + n)
				n++
			}
		}
		u := singleUnit{first: i, n: n}
		if n == 1 {
			u.msg = d.singleMsgOf(ctx, metas[i], jobs[i].Job.Payload)
		} else {
			pack := make([]wire.SinglePackJob, n)
			for k := range pack {
				m, j := &metas[i+k], &jobs[i+k].Job
				pack[k] = wire.SinglePackJob{Group: m.Group, Priority: m.Priority, PackJob: wire.PackJob{
					Payload: j.Payload, Require: m.Require, Prefer: m.Prefer, MaxAttempts: m.MaxAttempts, Timeout: m.Timeout, RunAt: m.RunAt}}
			}
			h := nats.Header(wire.SinglePackHeader(n, d.reply))
			h.Set(wire.HdrMsgID, singlePackID(metas[i:i+n]))
			newJobTrace(ctx).set(h)
			u.msg = &nats.Msg{Subject: d.names.SinglesSubject(), Header: h, Data: wire.AppendSinglePack(nil, pack)}
		}
		units = append(units, u)
		i += n
	}
	return units
}

// singlePackID is the dedup ID of a single pack of these jobs: a digest of their groups, in
// order. A job alone without a key is deduplicated by its group ID (wire.JobMeta.Header); a pack
// by the groups it holds, so a SubmitMany submitted again after a failure, which packs the
// remaining jobs as it did the first time, stores each pack once within the dedup window.
func singlePackID(metas []wire.JobMeta) string {
	sum := sha256.New()
	for i := range metas {
		sum.Write([]byte(wire.GroupToken(metas[i].Group)))
		sum.Write([]byte{0})
	}
	return "singles/" + base64.RawURLEncoding.EncodeToString(sum.Sum(nil)[:18])
}

// singleMeta checks job and returns its metadata as a single job of groupID (generated when
// empty: the metadata's Group).
func (d *Dispatcher) singleMeta(groupID string, job *Job, after []wire.After, priority int) (wire.JobMeta, error) {
	if groupID == "" {
		groupID = "job-" + nuid.Next()
	}
	if err := validateGroupID(groupID); err != nil {
		return wire.JobMeta{}, err
	}
	switch {
	case job.Priority == 0:
	case priority == 0:
		priority = job.Priority
	case priority != job.Priority:
		return wire.JobMeta{}, fmt.Errorf("%w of single job %q: Job.Priority %d and the Priority option %d differ (a single job's priority is its group's: give one)", ErrInvalidOption, groupID, job.Priority, priority)
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
		return wire.JobMeta{}, fmt.Errorf("%w (key %q) submitted as group %q: %w", ErrInvalidJob, job.Key, groupID, err)
	}
	return meta, nil
}

// singleMsgOf is the message of a single job alone.
func (d *Dispatcher) singleMsgOf(ctx context.Context, meta wire.JobMeta, payload []byte) *nats.Msg {
	header := meta.Header()
	newJobTrace(ctx).set(header)
	return &nats.Msg{Subject: d.names.JobSubject(wire.GroupToken(meta.Group)), Header: header, Data: payload}
}

// singleHandle returns the Handle of the single job id of group groupID, stored before if
// duplicate; mark is the outcome subscription's state before it was published.
func (d *Dispatcher) singleHandle(groupID string, id uint64, duplicate bool, mark outcomeMark) *Handle {
	h := d.Attach(groupID)
	h.openSeq, h.resolvedAt = id, id // a single job is its own incarnation
	h.firstID, h.lastID = id, id
	if duplicate {
		h.duplicates = 1 // stored before: its outcome may be too
	} else {
		h.accepted = 1
		h.submitted = mark
		h.own = true // a duplicate's outcomes go to the producer that stored it first
	}
	return h
}
