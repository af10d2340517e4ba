package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/internal/directget"
	"github.com/weavejobs/weave/internal/wire"
)

// Dead letters. A job that failed (permanently, or out of attempts) stays inspectable after its
// group finished: its outcome, with the history of its attempts, is in RESULTS and its message
// (payload and options) in JOBS until the result retention has passed. Failed lists
// those outcomes; Redrive publishes the jobs again, rebuilt from their messages, as a new
// incarnation of the group.
//
// Both read RESULTS and JOBS with direct get rather than a consumer: they read what is stored and
// stop, so there is no consumer to create, and none to clean up when the caller stops early.
// (Only REJECTED, which does not allow direct get, is read with a consumer; see rejected.)

const (
	// scanPage is how many messages one batch direct get request reads. It bounds the outcome
	// messages Failed and Redrive hold at once.
	scanPage = 32
	// jobPage is how many job messages Redrive reads at once (concurrent direct gets). It
	// bounds the payloads Redrive holds beside those Publish has in flight.
	jobPage = 32
	// maxNamed bounds the job IDs an error names; it gives the count of the others.
	maxNamed = 20
)

// Failed lists the failed jobs whose outcomes the RESULTS stream still holds: those of groupID,
// or of every group when groupID is "". Each comes with its Group, its last error and its
// History. Failed reads what is stored when it is called and ends: it does not wait for jobs
// that fail later. Jobs come in the order their outcomes were recorded, so the jobs of different
// groups interleave.
//
// The list is every failed outcome stored, whatever happened since: a failed job of a group
// that is still running appears as soon as it failed, and a job that Redrive published again
// appears both as its old failed outcome (until ResultRetention has passed) and, under its new
// ID, in the new incarnation's outcomes if it fails again. A job may appear twice if the
// coordinator repeated its record after a crash.
//
// The sequence is lazy: it reads the stream a page of messages at a time, so memory does not
// depend on the number of failed jobs, and breaking out of the loop stops reading. A message
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
		for m, err := range d.scanOutcomes(ctx, subject, 1, upTo, nil) {
			if err != nil {
				if !yield(JobOutcome{}, err) {
					return
				}
				continue
			}
			for i := range m.outs {
				if m.outs[i].State == wire.FinalFailed && !yield(jobOutcome(m.group, &m.outs[i]), nil) {
					return
				}
			}
		}
	}
}

// Redrive publishes failed jobs of groupID again, as a new incarnation of the group, and returns
// its Handle: with no ids, every failed job of the group's latest finished incarnation; else only
// the given IDs, each of which must be a failed job of that incarnation (an error wrapping
// ErrNotFailed names those that are not). The latest finished incarnation is the one whose
// summary is the last message on the group's outcome subject; redriving again after the new
// incarnation finished redrives the jobs that failed in it.
//
// Each job is rebuilt from its message in the JOBS stream, which the coordinator keeps for a
// finished group with failed jobs until the result retention has passed: the same
// payload, key, required and preferred resources, MaxAttempts and Timeout (other headers a
// producer may have added are not copied), under a new ID. Its dedup ID is "redrive:<group
// token>/<old ID>" instead of the key's: the key's own ID is still in the dedup window when a
// job is redriven soon after it failed, and JetStream would drop the job. The new ID is
// distinct from every key's dedup ID (a group token never contains ':') and the same for every
// redrive of one failed job: a job whose failure the coordinator recorded twice (see Failed) is
// stored once, the repeat counted in Handle.Duplicates, and so is a job two racing Redrive
// calls both publish within the dedup window.
//
// Redrive checks everything before it publishes, because its open makes the new incarnation the
// group's latest: failing halfway would hide the jobs not yet published from a later Redrive.
// So it returns a nil Handle and publishes nothing when
//
//   - an incarnation of the group has not finished: ErrGroupRunning. The group is running when
//     its outcome subject does not end with a summary (outcomes of an unfinished incarnation
//     follow it, or there are no outcomes but the group has control messages in JOBS), or when
//     JOBS holds an open of the group after the seal of the incarnation the summary names, which
//     is how a new incarnation starts. An open the coordinator rejected (published while that
//     incarnation was still running) does not count: Redrive finds its rejection in the REJECTED
//     stream. Should that record be missing, the open counts, and Redrive refuses until the
//     coordinator deletes the open with the group's messages at the end of the retention;
//   - there is nothing to redrive, or an ID is not a failed job of the incarnation: ErrNotFailed;
//   - the message of a job is gone: ErrJobGone, naming the jobs;
//   - an outcome message of the incarnation cannot be decoded: ErrMalformedOutcome;
//   - a payload exceeds Config.MaxPayload: ErrInvalidJob.
//
// Once the new incarnation is open, Redrive behaves like Publish (it always seals the group;
// see Publish for the Handle it returns with an error). A job whose message disappears between
// the check and the publication is skipped and named in an error wrapping ErrJobGone, returned
// with the Handle.
//
// To check before publishing, Redrive reads the incarnation's failed outcomes and job messages
// twice; it holds a page of them at a time, so memory does not depend on the number of failed
// jobs (the set of ids given aside). Concurrent Redrive or Publish calls for the same group ID
// are not coordinated beyond what the coordinator and the dedup IDs provide: publish a group ID
// from one place at a time.
func (d *Dispatcher) Redrive(ctx context.Context, groupID string, ids ...uint64) (*Handle, error) {
	if err := validateGroupID(groupID); err != nil {
		return nil, err
	}
	if err := context.Cause(ctx); err != nil {
		return nil, fmt.Errorf("weave: redrive group %q: %w", groupID, err)
	}
	if err := d.ensure(ctx); err != nil {
		return nil, err
	}
	r := &redrive{
		d:     d,
		group: groupID,
		gtok:  wire.GroupToken(groupID),
		get:   directget.New(d.nc, d.names.JobsStream()),
	}
	defer r.get.Close()
	if len(ids) > 0 {
		r.want = make(map[uint64]bool, len(ids))
		for _, id := range ids {
			r.want[id] = false
		}
	}
	if err := r.findIncarnation(ctx); err != nil {
		return nil, err
	}
	n, err := r.check(ctx)
	if err != nil {
		return nil, err
	}
	d.log.Debug().Str("group", groupID).Uint64("incarnation", r.openSeq).Int("jobs", n).Msg("redriving failed jobs")

	var (
		gone    idList
		iterErr error
	)
	h, err := d.publish(ctx, groupID, r.jobs(ctx, &gone, &iterErr))
	if iterErr != nil {
		err = errors.Join(iterErr, err)
	}
	if gone.n > 0 {
		err = errors.Join(err, fmt.Errorf("%w: group %q: %d failed jobs disappeared from %s while they were redriven: %s",
			ErrJobGone, groupID, gone.n, d.names.JobsStream(), &gone))
	}
	return h, err
}

// redrive is the state of one Redrive call.
type redrive struct {
	d           *Dispatcher
	group, gtok string
	get         *directget.Client // of the JOBS stream

	// want holds the IDs asked for, true once met among the failed outcomes; nil means all.
	want map[uint64]bool

	// The incarnation redriven, from its summary.
	openSeq    uint64 // its open's JOBS sequence
	groupSeq   string // openSeq as its outcomes' Weave-Group-Seq header carries it
	summarySeq uint64 // its summary's RESULTS sequence: its outcomes come before
	failed     int    // failed jobs, as the summary counts them
}

// findIncarnation finds the group's latest finished incarnation and checks that no later one is
// running.
func (r *redrive) findIncarnation(ctx context.Context) error {
	results, err := r.d.js.Stream(ctx, r.d.names.ResultsStream())
	if err != nil {
		return fmt.Errorf("weave: redrive group %q: %w", r.group, err)
	}
	last, err := results.GetLastMsgForSubject(ctx, r.d.names.OutcomeSubject(r.gtok))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		jobs, err := r.d.js.Stream(ctx, r.d.names.JobsStream())
		if err != nil {
			return fmt.Errorf("weave: redrive group %q: %w", r.group, err)
		}
		_, err = jobs.GetLastMsgForSubject(ctx, r.d.names.GroupSubject(r.gtok))
		switch {
		case err == nil:
			return fmt.Errorf("%w: group %q has been published but has no outcomes yet", ErrGroupRunning, r.group)
		case errors.Is(err, jetstream.ErrMsgNotFound):
			return fmt.Errorf("%w: no outcome of group %q is stored (an unknown group, or one that finished longer ago than the result retention)", ErrNotFailed, r.group)
		default:
			return fmt.Errorf("weave: redrive group %q: read its control messages: %w", r.group, err)
		}
	}
	if err != nil {
		return fmt.Errorf("weave: redrive group %q: read its latest outcome: %w", r.group, err)
	}
	_, sum, err := wire.DecodeOutcomeMsg(last.Data)
	if err != nil {
		return fmt.Errorf("%w: group %q, %s sequence %d: %w", ErrMalformedOutcome, r.group, r.d.names.ResultsStream(), last.Sequence, err)
	}
	if sum == nil {
		return fmt.Errorf("%w: group %q has outcomes of an incarnation that has not finished", ErrGroupRunning, r.group)
	}
	r.groupSeq = last.Header.Get(wire.HdrGroupSeq)
	r.openSeq, err = strconv.ParseUint(r.groupSeq, 10, 64)
	if err != nil || r.openSeq == 0 {
		return fmt.Errorf("%w: group %q, %s sequence %d: summary without a valid %s header (%q)",
			ErrMalformedOutcome, r.group, r.d.names.ResultsStream(), last.Sequence, wire.HdrGroupSeq, r.groupSeq)
	}
	r.summarySeq, r.failed = last.Sequence, int(sum.Failed)
	newer, err := r.newerOpen(ctx)
	if err != nil {
		return err
	}
	if newer != 0 {
		return fmt.Errorf("%w: group %q was opened again (%s sequence %d) after its incarnation opened at sequence %d finished, and has not finished since",
			ErrGroupRunning, r.group, r.d.names.JobsStream(), newer, r.openSeq)
	}
	if r.failed == 0 {
		return fmt.Errorf("%w: the latest incarnation of group %q (opened at %s sequence %d) finished with no failed job",
			ErrNotFailed, r.group, r.d.names.JobsStream(), r.openSeq)
	}
	return nil
}

// newerOpen returns the JOBS sequence of an open of the group that starts an incarnation after
// the finished one, or 0. It reads the group's control messages after that incarnation's open.
// The first seal among them is the incarnation's own (the coordinator rejects a second seal);
// an open before it resumed the incarnation, an open after it started a new one, unless the
// coordinator rejected it (see rejected). When no seal is left (the coordinator purged the
// finished incarnation's messages, seal included), every open found is a new one. Messages that
// do not parse were rejected and changed nothing.
func (r *redrive) newerOpen(ctx context.Context) (uint64, error) {
	subject := r.d.names.GroupSubject(r.gtok)
	var (
		sealed uint64
		open   *directget.Msg // an open before any seal
	)
	for from := r.openSeq + 1; ; {
		rctx, cancel := r.d.requestContext(ctx)
		msgs, err := r.get.Next(rctx, subject, from, scanPage)
		cancel()
		if err != nil {
			return 0, fmt.Errorf("weave: redrive group %q: read its control messages: %w", r.group, err)
		}
		if len(msgs) == 0 {
			break
		}
		for _, m := range msgs {
			from = m.Seq + 1
			c, err := wire.ParseGroupControl(m.Header)
			if err != nil || c.Group != r.group {
				continue
			}
			switch {
			case c.Op == wire.OpSeal && sealed == 0:
				sealed, open = m.Seq, nil // the opens before it resumed the incarnation
			case c.Op == wire.OpOpen && sealed != 0:
				rejected, err := r.rejected(ctx, m)
				if err != nil {
					return 0, err
				}
				if !rejected {
					return m.Seq, nil
				}
			case c.Op == wire.OpOpen && open == nil:
				open = m
			}
		}
	}
	if open == nil {
		return 0, nil
	}
	rejected, err := r.rejected(ctx, open)
	if err != nil || rejected {
		return 0, err
	}
	return open.Seq, nil
}

// hdrTimeStamp is the header of a direct get answer holding when the message was stored.
const hdrTimeStamp = "Nats-Time-Stamp"

// rejectMargin is how long before an open was stored in JOBS rejected starts looking for its
// rejection in REJECTED: the two streams may have different leaders, whose clocks may differ.
const rejectMargin = time.Minute

// rejected reports whether the coordinator recorded the rejection of the control message m in
// the REJECTED stream. An open published while the group was sealed and still running is
// rejected; without this check it would look like a new incarnation that never finishes, and
// Redrive would refuse the group until the coordinator deletes the open (at the end of the
// retention). It reads the rejections recorded since m was stored, headers only, with one
// ephemeral pull consumer (REJECTED does not allow direct get) that it deletes before returning.
// (Not an ordered consumer: that one replaces its server-side consumer on every fetch and
// deletes the old one in the background, so consumers would outlive the call.) A rejection not
// found (not recorded, or already gone from REJECTED) leaves the open counted as a new
// incarnation: refusing is the safe mistake.
func (r *redrive) rejected(ctx context.Context, m *directget.Msg) (bool, error) {
	stored, err := time.Parse(time.RFC3339Nano, m.Header.Get(hdrTimeStamp))
	if err != nil {
		return false, nil
	}
	start := stored.Add(-rejectMargin)
	stream := r.d.names.RejectedStream()
	cons, err := r.d.js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{
		FilterSubject:     r.d.names.RejectSubject(),
		DeliverPolicy:     jetstream.DeliverByStartTimePolicy,
		OptStartTime:      &start,
		AckPolicy:         jetstream.AckNonePolicy,
		HeadersOnly:       true,
		MemoryStorage:     true,
		Replicas:          1,
		InactiveThreshold: time.Minute, // a backstop: deleted below
	})
	if err != nil {
		return false, fmt.Errorf("weave: redrive group %q: read %s: %w", r.group, stream, err)
	}
	defer func() {
		fctx, cancel := r.d.finishContext(ctx)
		defer cancel()
		name := cons.CachedInfo().Name
		if err := r.d.js.DeleteConsumer(fctx, stream, name); err != nil {
			r.d.log.Debug().Err(err).Str("consumer", name).Msg("delete rejections consumer")
		}
	}()
	subject, seq := r.d.names.GroupSubject(r.gtok), strconv.FormatUint(m.Seq, 10)
	for {
		batch, err := cons.FetchNoWait(256)
		if err != nil {
			return false, fmt.Errorf("weave: redrive group %q: read %s: %w", r.group, stream, err)
		}
		n := 0
		for msg := range batch.Messages() {
			n++
			if h := msg.Headers(); h.Get(wire.HdrSubject) == subject && h.Get(wire.HdrSeq) == seq {
				return true, nil
			}
		}
		if err := batch.Error(); err != nil {
			return false, fmt.Errorf("weave: redrive group %q: read %s: %w", r.group, stream, err)
		}
		if n == 0 {
			return false, nil
		}
	}
}

// eachFailed calls fn with the IDs of the incarnation's failed jobs (those in want, if set), a
// page at a time, in the order they were recorded. fn must not keep the page.
func (r *redrive) eachFailed(ctx context.Context, fn func(page []uint64) error) error {
	page := make([]uint64, 0, jobPage)
	keep := func(groupSeq string) bool { return groupSeq == r.groupSeq }
	for m, err := range r.d.scanOutcomes(ctx, r.d.names.OutcomeSubject(r.gtok), 1, r.summarySeq, keep) {
		if err != nil {
			// A malformed message of the incarnation may hold failed jobs: redriving the others
			// would hide them from a later Redrive.
			return fmt.Errorf("weave: redrive group %q: %w", r.group, err)
		}
		for i := range m.outs {
			o := &m.outs[i]
			if o.State != wire.FinalFailed {
				continue
			}
			if r.want != nil {
				if _, ok := r.want[o.ID]; !ok {
					continue
				}
				r.want[o.ID] = true
			}
			if page = append(page, o.ID); len(page) == cap(page) {
				if err := fn(page); err != nil {
					return err
				}
				page = page[:0]
			}
		}
	}
	if len(page) > 0 {
		return fn(page)
	}
	return nil
}

// check verifies, before anything is published, that every job to redrive can be: it is a
// failed job of the incarnation, and its message is stored, readable and within MaxPayload. It
// returns how many jobs there are (a job recorded twice counts twice).
func (r *redrive) check(ctx context.Context) (int, error) {
	var (
		n    int
		gone idList
	)
	err := r.eachFailed(ctx, func(page []uint64) error {
		msgs, err := r.fetch(ctx, page)
		if err != nil {
			return err
		}
		for i, m := range msgs {
			job, ok := r.job(m)
			switch {
			case !ok:
				gone.add(page[i])
			case len(job.Payload) > r.d.cfg.MaxPayload:
				return fmt.Errorf("%w: job %d of group %q has a %d byte payload, at most %d (Config.MaxPayload)",
					ErrInvalidJob, page[i], r.group, len(job.Payload), r.d.cfg.MaxPayload)
			default:
				n++
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	var missing idList
	for _, id := range slices.Sorted(maps.Keys(r.want)) {
		if !r.want[id] {
			missing.add(id)
		}
	}
	switch {
	case missing.n > 0:
		return 0, fmt.Errorf("%w: not failed jobs of the latest incarnation of group %q (opened at %s sequence %d): %s",
			ErrNotFailed, r.group, r.d.names.JobsStream(), r.openSeq, &missing)
	case gone.n > 0:
		return 0, fmt.Errorf("%w: group %q: %s no longer holds %d of the failed jobs: %s",
			ErrJobGone, r.group, r.d.names.JobsStream(), gone.n, &gone)
	case n == 0:
		return 0, fmt.Errorf("%w: group %q: the summary of its latest incarnation counts %d failed jobs, but their outcomes are no longer stored",
			ErrJobGone, r.group, r.failed)
	}
	return n, nil
}

// jobs yields the jobs to redrive with their dedup IDs, reading them again. A job whose message
// has gone since check is added to gone and skipped; a read error ends the sequence and is
// stored in *err.
func (r *redrive) jobs(ctx context.Context, gone *idList, errp *error) iter.Seq2[Job, string] {
	stop := errors.New("stop")
	return func(yield func(Job, string) bool) {
		err := r.eachFailed(ctx, func(page []uint64) error {
			msgs, err := r.fetch(ctx, page)
			if err != nil {
				return err
			}
			for i, m := range msgs {
				job, ok := r.job(m)
				if !ok {
					gone.add(page[i])
					continue
				}
				if !yield(job, "redrive:"+r.gtok+"/"+strconv.FormatUint(page[i], 10)) {
					return stop
				}
			}
			return nil
		})
		if err != nil && !errors.Is(err, stop) {
			*errp = err
		}
	}
}

// fetch reads the job messages with the given IDs; out[i] is nil when IDs[i] is not stored.
func (r *redrive) fetch(ctx context.Context, ids []uint64) ([]*directget.Msg, error) {
	rctx, cancel := r.d.requestContext(ctx)
	msgs, err := r.get.Get(rctx, ids)
	cancel()
	if err == nil {
		return msgs, nil
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, err := range errs {
		if !errors.Is(err, directget.ErrNotFound) {
			return nil, fmt.Errorf("weave: redrive group %q: read job messages: %w", r.group, err)
		}
	}
	return msgs, nil
}

// job rebuilds a job from its stored message. It reports false when the message is not the
// group's job: missing, on another subject, or not parseable (the coordinator would have
// rejected it, so it never ran); each means the failed job's message is gone.
func (r *redrive) job(m *directget.Msg) (Job, bool) {
	if m == nil || m.Subject != r.d.names.JobSubject(r.gtok) {
		return Job{}, false
	}
	meta, err := wire.ParseJobMeta(m.Header)
	if err != nil || meta.Group != r.group {
		return Job{}, false
	}
	return Job{
		Key:         meta.Key,
		Payload:     m.Data,
		Require:     meta.Require,
		Prefer:      meta.Prefer,
		MaxAttempts: meta.MaxAttempts,
		Timeout:     meta.Timeout,
	}, true
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
			msgs, err := d.results.Next(rctx, subject, from, scanPage)
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

// idList counts job IDs and keeps the first maxNamed (sorted when printed), for errors.
type idList struct {
	n   int
	ids []uint64
}

func (l *idList) add(id uint64) {
	l.n++
	if len(l.ids) < maxNamed {
		l.ids = append(l.ids, id)
	}
}

func (l *idList) String() string {
	ids := slices.Clone(l.ids)
	slices.Sort(ids)
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.FormatUint(id, 10)
	}
	s := strings.Join(parts, ", ")
	if more := l.n - len(ids); more > 0 {
		s += fmt.Sprintf(" and %d more", more)
	}
	return s
}
