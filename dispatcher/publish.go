package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/weavejobs/weave/internal/wire"
)

// Job is one job of a group. Only Payload is needed; every other field is optional.
type Job struct {
	// Key identifies the job within its group. Jobs of a group with the same key are deduplicated
	// by JetStream within the namespace's dedup window (set when its streams are created, default
	// 2 minutes): the second is not stored and is counted as a duplicate. Empty: no deduplication.
	// At most 256 bytes of UTF-8 without control characters.
	Key string

	// Payload is what the worker's handler receives, at most Config.MaxPayload bytes. Publish
	// reads it until the job's publish is acknowledged, so do not modify it after yielding it.
	Payload []byte

	// Require lists resources a worker must hold to run the job; Prefer lists resources the job
	// should run near when a holder is free. At most 64 names each, of 1–128 characters of
	// [A-Za-z0-9_.:/@=+-].
	Require, Prefer []string

	// MaxAttempts is how many times the job may run before it fails: 1–1000, or 0 for the
	// coordinator's default.
	MaxAttempts int

	// Timeout bounds one attempt: up to 7 days, or 0 for the worker's default.
	Timeout time.Duration

	// Delay or RunAt (not both) hold the job back: it is not released before RunAt, or before
	// Delay after it is published, up to 366 days ahead. While it waits it holds no worker slot
	// and no place in the group's turn; when its time comes it joins the end of its group's
	// queue (it starts then if the group has a free share). A RunAt in the past runs at once.
	// Times are the producer's clock, read at millisecond precision.
	Delay time.Duration
	RunAt time.Time

	// Priority (0–9, default 0) puts the job ahead of its group's jobs of lower priorities: of
	// the group's jobs waiting to be released, the highest priority goes first, then the order
	// they were published in. It orders jobs within their group only; the group's place among
	// other groups is its own Priority option. On a single job (Submit) the two are one: the
	// job's priority is its group's.
	Priority int
}

// runAt is when the job may first run, zero for at once, checked against now.
func (j *Job) runAt(now time.Time) (time.Time, error) {
	switch {
	case j.Delay < 0:
		return time.Time{}, fmt.Errorf("Delay %v is negative", j.Delay)
	case j.Delay > 0 && !j.RunAt.IsZero():
		return time.Time{}, errors.New("both Delay and RunAt are set: give one")
	case j.Delay > wire.MaxDelay || !j.RunAt.IsZero() && j.RunAt.Sub(now) > wire.MaxDelay:
		return time.Time{}, fmt.Errorf("delayed more than %v", wire.MaxDelay)
	case j.Delay > 0:
		return now.Add(j.Delay), nil
	case !j.RunAt.IsZero() && j.RunAt.After(now):
		return j.RunAt, nil
	}
	return time.Time{}, nil
}

// Publish announces a group, streams its jobs into Weave and seals it, returning a Handle to wait
// on the group's outcome.
//
// Jobs are pulled from the iterator (nil means none) one at a time, only when they can be
// published: at most Config.MaxPending messages await their acknowledgement at any moment (across
// all Publish calls of d), each holding one job or a pack of up to Config.MaxPack jobs, and at
// most MaxPack more wait to be published, so memory does not grow with the group's size and the
// iterator may be endless. Jobs without a key that are pulled faster than they are published go
// in packs; a job pulled alone goes at once. Publishing
// stops at ctx's end, at the first invalid job (an error wrapping ErrInvalidJob that names the
// job by its rank in the iterator, counted from 1, and its key) or when it learns of a failed publish (jobs already in flight still
// complete and count). An iterator that blocks should watch ctx itself: Publish checks ctx only
// between jobs, and every job pulled before ctx ended is still published and counts.
//
// Publish always seals a group it opened, also when it stops early or the iterator panics: it
// settles the publishes in flight and publishes the seal with the number of jobs accepted, using a
// fresh context bounded by Config.RequestTimeout. So Publish returns both a Handle and an error
// when the group was opened but not every job was published; the Handle's Accepted tells how many
// were. If the seal itself fails, the error also wraps ErrNotSealed. Publish returns a nil Handle
// only when it published nothing: for an invalid group ID (ErrInvalidGroup), a ctx already done,
// streams that cannot be created or reached, or an open that was not stored (ErrNotOpened): then
// it publishes no job and no seal.
//
// The open is tried again while the JOBS stream cannot answer (no leader, as during a cluster's
// leader election, or no answer in time), for up to Config.RequestTimeout and within ctx; the
// tries carry one Nats-Msg-Id, so an open stored although its answer was lost is stored once.
//
// The open of a group ID with no control message stored (a new one, or one whose incarnations
// finished and were purged) is stored on that condition, in one request. Otherwise Publish reads
// the group ID's control messages first: if its latest incarnation is sealed and still running,
// it publishes nothing and returns an error wrapping ErrGroupRunning with a Handle for that
// incarnation.
//
// Publishing a group ID again is allowed, typically to finish a group after the producer crashed:
// the dispatcher does not detect it, jobs whose keys were already accepted within the dedup window
// count as duplicates, and the second call publishes another open (which the coordinator ignores
// for a group it knows) and a seal whose count is the number of jobs that call accepted.
func (d *Dispatcher) Publish(ctx context.Context, groupID string, jobs iter.Seq[Job], opts ...GroupOption) (h *Handle, err error) {
	ctx, endSpan := d.tracePublish(ctx, groupID) // see trace.go
	defer func() { endSpan(h, err) }()
	if err := validateGroupID(groupID); err != nil {
		return nil, err
	}
	var o groupOptions
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(groupID); err != nil {
		return nil, fmt.Errorf("%w of group %q: %w", ErrInvalidOption, groupID, err)
	}
	if err := context.Cause(ctx); err != nil {
		return nil, fmt.Errorf("weave: publish group %q: %w", groupID, err)
	}
	if err := d.ensure(ctx); err != nil {
		return nil, err
	}
	open := wire.GroupControl{Group: groupID, Op: wire.OpOpen, Weight: o.weight, Reply: d.reply, After: o.edges(), Priority: o.priority}
	answers, err := d.openAnswers(open)
	if err != nil {
		return nil, err
	}
	if answers != nil {
		defer func() { _ = answers.Unsubscribe() }()
	}
	// A group ID with no control message stored (new, or its last incarnation finished and
	// purged) is opened in one request: the open is stored only if the group's control subject
	// is still empty, so it starts a new incarnation, nothing can be running, and its Handle
	// knows its incarnation without reading the controls. Otherwise (another incarnation's
	// controls are there, or another producer's open came first) Publish reads them as below.
	ifEmpty := !d.skipRunningCheck
	openSeq, err := d.storeControl(ctx, open, ifEmpty)
	fresh := ifEmpty && err == nil
	if errors.Is(err, errControlsExist) { // only with ifEmpty
		inc, rerr := d.running(ctx, groupID)
		if rerr != nil {
			return nil, rerr
		}
		if inc != 0 {
			h := d.Attach(groupID)
			h.openSeq, h.resolvedAt = inc, inc
			return h, fmt.Errorf("%w: group %q is sealed and still running (its incarnation opened at %s sequence %d); "+
				"the Handle waits for it; publish the group again once it has finished", ErrGroupRunning, groupID, d.names.JobsStream(), inc)
		}
		openSeq, err = d.storeControl(ctx, open, false)
	}
	if err != nil {
		// A seal of a group that is not open is refused, and jobs of it would be: publish none.
		return nil, fmt.Errorf("%w: %w", ErrNotOpened, err)
	}
	if err := d.awaitOpen(ctx, answers, groupID, openSeq); err != nil {
		return nil, err
	}
	h = d.Attach(groupID)
	h.openSeq, h.own = openSeq, true
	if fresh {
		h.resolvedAt = openSeq
	}
	p := &publication{
		d:       d,
		h:       h,
		subject: d.names.JobSubject(h.gtok),
		queue:   make([]inflight, min(d.cfg.MaxPending, initialQueue)),
		trace:   newJobTrace(ctx),
	}
	defer func() {
		// Seal also when the iterator panics, so the coordinator does not wait for the group
		// forever; the panic then continues.
		if v := recover(); v != nil {
			p.finish(ctx, nil)
			panic(v)
		}
	}()
	p.stopKeepAlive = d.keepAlive(groupID)
	if jobs != nil {
		err = p.publishJobs(ctx, jobs)
	}
	if len(o.then) > 0 {
		// Before the seal: the group cannot complete before its follow-ups wait on it. Also when
		// a job could not be published: the group is sealed with the jobs it has, and what
		// follows it still runs after it. When ctx has ended they are stored as the seal is, with
		// a fresh context.
		fctx, cancel := ctx, context.CancelFunc(func() {})
		if ctx.Err() != nil {
			fctx, cancel = d.finishContext(ctx)
		}
		var ferr error
		h.followUps, ferr = d.publishFollowUps(fctx, h, o.then)
		cancel()
		err = errors.Join(err, ferr)
	}
	return h, p.finish(ctx, err)
}

// GroupOption sets an option of a group Publish opens.
type GroupOption func(*groupOptions)

type groupOptions struct {
	weight   int
	priority int
	after    []Dependency
	then     []FollowUp
}

// Weight scales the group's fair share of the worker slots: under the least in-flight policy a
// group of weight 3 holds three times the slots of a group of weight 1 while both have work
// (1–1000; default 1). It does not give the group more feeder slots (a group is active in one
// at a time, which keeps its jobs spread), nor lift the coordinator's MaxInFlightPerGroup. Under
// the round-robin policy it has no effect.
func Weight(w int) GroupOption { return func(o *groupOptions) { o.weight = w } }

// Priority puts the group's jobs ahead of those of groups of lower priority (0, the default, to
// 9): whenever a pool has room, the coordinator releases a job of the highest priority that pool
// can run, and shares the slots fairly (weights, least in-flight) only among groups of one
// priority. Limits and MaxInFlightPerGroup still bound an urgent group; the slots they leave go
// to lower priorities. For urgent work, not for ordering a backlog: groups of a low priority get
// nothing while higher ones have jobs the pool can run.
func Priority(p int) GroupOption { return func(o *groupOptions) { o.priority = p } }

func (o *groupOptions) validate(groupID string) error {
	if o.weight < 0 || o.weight > wire.MaxWeight {
		return fmt.Errorf("weight %d outside 1..%d", o.weight, wire.MaxWeight)
	}
	if err := wire.ValidatePriority(o.priority); err != nil {
		return err
	}
	return o.validateAfter(groupID)
}

// ErrNotOpened reports that Publish could not store the group's open. It published nothing else
// and returned no Handle; publishing the group again is safe.
var ErrNotOpened = errors.New("weave: group not opened")

// storeControl publishes a group control message (the open, the seal) and returns its stream
// sequence, trying again within RequestTimeout while the stream does not answer (no leader, no
// response, a timeout) as opposed to refusing it. Every try carries the same Nats-Msg-Id, so a
// message stored although its acknowledgement was lost is stored once, and the next try learns
// that it was: a seal reported failed while it was stored would have the producer publish the
// group again, and the coordinator refuse those jobs (the chaos run saw it).
//
// With ifEmpty, the message is stored only if the group's control subject holds no message
// (Nats-Expected-Last-Subject-Sequence: 0); otherwise storeControl returns errControlsExist.
// (A try after one stored but unanswered may find its own message there instead of being told
// it is a duplicate: the caller then takes the path of a group with controls, which is right.)
func (d *Dispatcher) storeControl(ctx context.Context, c wire.GroupControl, ifEmpty bool) (uint64, error) {
	msg := &nats.Msg{Subject: d.names.GroupSubject(wire.GroupToken(c.Group)), Header: c.Header()}
	msg.Header.Set(wire.HdrMsgID, string(c.Op)+":"+nuid.Next())
	if ifEmpty {
		msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
	}
	var seq uint64
	err := d.retry(ctx, func(ctx context.Context) error {
		ack, err := d.js.PublishMsg(ctx, msg, jetstream.WithRetryAttempts(noLeaderRetries), jetstream.WithRetryWait(50*time.Millisecond))
		if err == nil {
			seq = ack.Sequence
		}
		return err
	})
	switch {
	case ifEmpty && isWrongLastSequence(err):
		return 0, errControlsExist
	case err != nil:
		return 0, fmt.Errorf("weave: publish %s of group %q: %w", c.Op, c.Group, err)
	}
	return seq, nil
}

// errControlsExist is storeControl's answer to a message it was to store only on an empty
// control subject, when the subject held one.
var errControlsExist = errors.New("weave: the group has control messages")

// noLeaderRetries bounds the retries of a publish that finds no stream leader: 50ms apart,
// a few seconds in all, enough for a leader election.
const noLeaderRetries = 100

// inflight is a message published asynchronously whose acknowledgement is not yet settled: one
// job, or a pack of n jobs.
type inflight struct {
	ack   jetstream.PubAckFuture
	index int // the first job's index in the group
	n     int // jobs in the message
	key   string
}

// publication is the state of one Publish call. The caller's goroutine pulls and checks the jobs
// (publishJobs) and hands them to the publication's sender goroutine (send), which packs what
// it finds waiting and publishes; the queue and the counters are the sender's until it has
// ended, then the caller's again (finish).
type publication struct {
	d       *Dispatcher
	h       *Handle
	subject string

	// queue is a ring of the messages in flight, oldest at head. Acknowledgements of one
	// connection arrive in publish order, so settling the oldest first rarely waits on a later one.
	queue      []inflight
	head, size int

	// failed is the first failed publish; once set, no more jobs are published. stop is
	// closed when the sender ends early (failed, or ctx done), so the caller stops pulling.
	failed error
	stop   chan struct{}

	// stopKeepAlive stops the group's keep-alives (see keepAlive); nil until the open is stored.
	stopKeepAlive func()

	trace jobTrace // the trace context each job carries (trace.go)
}

// checkedJob is a job the caller checked, on its way to the sender.
type checkedJob struct {
	index int
	job   Job
	meta  wire.JobMeta
}

// publishJobs streams the jobs until the iterator ends or an error stops it. It checks each job
// and hands it to the sender goroutine; jobs handed over before an error are still published.
func (p *publication) publishJobs(ctx context.Context, jobs iter.Seq[Job]) (err error) {
	ch := make(chan checkedJob, p.d.cfg.MaxPack)
	p.stop = make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.send(ctx, ch)
	}()
	defer func() {
		close(ch)
		<-done
		if err == nil {
			err = p.failed
		}
	}()
	index := 0
	for job := range jobs {
		if err := context.Cause(ctx); err != nil {
			return fmt.Errorf("weave: publishing group %q stopped before its %s job: %w", p.h.group, ordinal(index+1), err)
		}
		meta := wire.JobMeta{
			Group:       p.h.group,
			Key:         job.Key,
			Require:     job.Require,
			Prefer:      job.Prefer,
			MaxAttempts: job.MaxAttempts,
			Timeout:     job.Timeout,
			Priority:    job.Priority,
		}
		runAt, err := job.runAt(time.Now())
		if err == nil {
			meta.RunAt = runAt
			err = meta.Validate()
		}
		if err != nil {
			return fmt.Errorf("%w: the %s job (key %q) of group %q: %w", ErrInvalidJob, ordinal(index+1), job.Key, p.h.group, err)
		}
		if len(job.Payload) > p.d.cfg.MaxPayload {
			return fmt.Errorf("%w: the %s job (key %q) of group %q: payload is %d bytes, at most %d", ErrInvalidJob, ordinal(index+1), job.Key, p.h.group, len(job.Payload), p.d.cfg.MaxPayload)
		}
		select {
		case ch <- checkedJob{index: index, job: job, meta: meta}:
		case <-p.stop:
			return nil // the sender's error, set by the deferred function
		}
		index++
	}
	return nil
}

// packBytes bounds the encoded size of one pack's jobs, together with Config.MaxPayload (the
// server's max_payload less the room kept for headers): a larger job travels alone.
const packBytes = 64 << 10

// packCost is what a job takes in a pack's body, at most.
func packCost(j *Job) int { return wire.PackedSize(j.Payload, j.Require, j.Prefer) }

// send publishes the jobs from ch until it is closed, or until a publish fails, which it
// records in p.failed before closing p.stop (publishJobs stops handing jobs over at ctx's end).
// Jobs without a key that wait in ch when it takes one go together in one pack (up to MaxPack
// jobs and packBytes; a pack's jobs share one priority, so a change of priority starts the
// next); a keyed job, which JetStream deduplicates by its own Nats-Msg-Id, goes alone, as does a
// job nothing waits behind.
// So a producer that yields jobs faster than they are published gets packs, and a job yielded
// alone is not held back.
func (p *publication) send(ctx context.Context, ch <-chan checkedJob) {
	var (
		batch   []checkedJob
		next    checkedJob // a keyed or large job that ended a pack, to go next
		hasNext bool
	)
	for {
		batch = batch[:0]
		if hasNext {
			batch, hasNext = append(batch, next), false
		} else {
			j, ok := <-ch
			if !ok {
				return
			}
			batch = append(batch, j)
		}
		if batch[0].job.Key == "" {
			size, limit := packCost(&batch[0].job), min(packBytes, p.d.cfg.MaxPayload)
		gather:
			for len(batch) < p.d.cfg.MaxPack && size < limit {
				select {
				case j, ok := <-ch:
					switch {
					case !ok:
						break gather
					case j.job.Key != "" || j.job.Priority != batch[0].job.Priority || size+packCost(&j.job) > limit:
						next, hasNext = j, true
						break gather
					}
					batch = append(batch, j)
					size += packCost(&j.job)
				default:
					break gather
				}
			}
		}
		if err := p.publish(ctx, batch); err != nil {
			if p.failed == nil {
				p.failed = err
			}
		}
		if p.failed != nil {
			close(p.stop)
			for range ch { // let the caller's sends through until it sees stop
			}
			return
		}
	}
}

// publish takes a MaxPending slot and publishes batch: one job in a message of its own, several
// in a pack. Its jobs were handed over before ctx ended (Publish checks ctx between jobs, and the
// iterator has yielded them), so they are published also when ctx ends meanwhile: the wait for a
// slot then goes on within Config.RequestTimeout. It returns an error only when no slot came or
// the publish could not be made.
func (p *publication) publish(ctx context.Context, batch []checkedJob) error {
	err := p.acquire(ctx)
	if err != nil && ctx.Err() != nil {
		fctx, cancel := p.d.finishContext(ctx)
		err = p.acquire(fctx)
		cancel()
	}
	if err != nil {
		return fmt.Errorf("weave: publishing group %q stopped before its %s job: %w", p.h.group, ordinal(batch[0].index+1), err)
	}
	if p.failed != nil {
		<-p.d.slots
		return p.failed
	}
	first := &batch[0]
	msg := &nats.Msg{Subject: p.subject}
	if len(batch) == 1 {
		msg.Header, msg.Data = first.meta.Header(), first.job.Payload
	} else {
		jobs := make([]wire.PackJob, len(batch))
		for i, c := range batch {
			jobs[i] = wire.PackJob{Payload: c.job.Payload, Require: c.meta.Require, Prefer: c.meta.Prefer,
				MaxAttempts: c.meta.MaxAttempts, Timeout: c.meta.Timeout, RunAt: c.meta.RunAt}
		}
		msg.Header, msg.Data = wire.PackHeader(p.h.group, len(batch), first.meta.Priority), wire.AppendPack(nil, jobs)
	}
	p.trace.set(msg.Header)
	// Like the open, retry a while if the stream has no leader (a cluster's leader change).
	ack, err := p.d.js.PublishMsgAsync(msg, jetstream.WithRetryAttempts(noLeaderRetries), jetstream.WithRetryWait(50*time.Millisecond))
	if err != nil {
		<-p.d.slots
		return fmt.Errorf("weave: publish %s of group %q: %w", jobsName(first.index, len(batch), first.job.Key), p.h.group, err)
	}
	p.push(inflight{ack: ack, index: first.index, n: len(batch), key: first.job.Key})
	p.settleReady()
	return nil
}

// jobsName names the jobs of a message in errors, counted from 1 in the order the iterator
// yielded them (the first is the 1st, as the first line of a file is line 1): "its 3rd job (key
// "k")", or "its 3rd to 9th jobs" of a pack.
func jobsName(index, n int, key string) string {
	if n == 1 {
		return fmt.Sprintf("its %s job (key %q)", ordinal(index+1), key)
	}
	return fmt.Sprintf("its %s to %s jobs", ordinal(index+1), ordinal(index+n))
}

// ordinal writes n ≥ 1 as an English ordinal: 1st, 2nd, 3rd, 4th, 11th, 21st.
func ordinal(n int) string {
	suffix := "th"
	if n%100 < 11 || n%100 > 13 {
		switch n % 10 {
		case 1:
			suffix = "st"
		case 2:
			suffix = "nd"
		case 3:
			suffix = "rd"
		}
	}
	return strconv.Itoa(n) + suffix
}

// acquire takes one of the dispatcher's MaxPending slots. When none is free it settles this
// publication's oldest message, which frees a slot; only a publication with nothing in flight
// blocks on the others, so concurrent publications cannot deadlock.
func (p *publication) acquire(ctx context.Context) error {
	for {
		select {
		case p.d.slots <- struct{}{}:
			return nil
		default:
		}
		if p.size == 0 {
			select {
			case p.d.slots <- struct{}{}:
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}
		if err := p.settleOldest(ctx); err != nil {
			return err
		}
	}
}

// initialQueue is the ring's first size; it doubles as publishes pile up, up to MaxPending, so
// a small group does not allocate a ring for MaxPending (512 by default) messages.
const initialQueue = 16

func (p *publication) push(f inflight) {
	if p.size == len(p.queue) { // full: the slot held for f says MaxPending allows one more
		grown := make([]inflight, min(2*len(p.queue), max(p.d.cfg.MaxPending, p.size+1)))
		for i := range p.size {
			grown[i] = p.queue[(p.head+i)%len(p.queue)]
		}
		p.queue, p.head = grown, 0
	}
	p.queue[(p.head+p.size)%len(p.queue)] = f
	p.size++
}

// settleOldest waits for the oldest message's acknowledgement and records it. It returns an
// error only when ctx ends first; a failed publish is recorded in p.failed.
func (p *publication) settleOldest(ctx context.Context) error {
	f := &p.queue[p.head]
	select {
	case ack := <-f.ack.Ok():
		p.record(ack, nil)
	case err := <-f.ack.Err():
		p.record(nil, err)
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	return nil
}

// settleReady records the acknowledgements that have arrived, oldest first, without waiting. It
// keeps Accepted current and notices a failed publish about one round trip after it happened.
func (p *publication) settleReady() {
	for p.size > 0 {
		f := &p.queue[p.head]
		select {
		case ack := <-f.ack.Ok():
			p.record(ack, nil)
		case err := <-f.ack.Err():
			p.record(nil, err)
		default:
			return
		}
	}
}

// record applies the oldest message's acknowledgement (or publish error), removes it from the
// queue and frees its slot.
func (p *publication) record(ack *jetstream.PubAck, err error) {
	f := &p.queue[p.head]
	switch {
	case err != nil:
		if p.failed == nil {
			p.failed = fmt.Errorf("weave: publish %s of group %q: %w", jobsName(f.index, f.n, f.key), p.h.group, err)
		}
	case ack.Duplicate:
		p.h.duplicates += f.n
	default:
		p.h.accepted += f.n
		first, last := ack.Sequence, ack.Sequence // a job stored alone
		if f.n > 1 {
			first, last = wire.PackedJobID(ack.Sequence, 0), wire.PackedJobID(ack.Sequence, f.n-1)
		}
		p.h.firstID = minID(p.h.firstID, first)
		p.h.lastID = max(p.h.lastID, last)
	}
	*f = inflight{}
	p.head = (p.head + 1) % len(p.queue)
	p.size--
	<-p.d.slots
}

// finish settles the jobs in flight and seals the group, with a fresh context so that it happens
// also after ctx ended. It returns err joined with any error of its own.
func (p *publication) finish(ctx context.Context, err error) error {
	if p.stopKeepAlive != nil {
		p.stopKeepAlive() // before the seal: a keep-alive after it would be refused
	}
	fctx, cancel := p.d.finishContext(ctx)
	defer cancel()
	for p.size > 0 {
		if serr := p.settleOldest(fctx); serr != nil {
			// Acknowledgements are overdue: release the slots and seal with what is known.
			err = errors.Join(err, fmt.Errorf("weave: %d publishes of group %q not acknowledged: %w", p.size, p.h.group, serr))
			for ; p.size > 0; p.size-- {
				<-p.d.slots
			}
		}
	}
	if err == nil {
		err = p.failed
	}
	seal := wire.GroupControl{Group: p.h.group, Op: wire.OpSeal, Count: uint64(p.h.accepted)}
	if _, serr := p.d.storeControl(fctx, seal, false); serr != nil {
		err = errors.Join(err, fmt.Errorf("%w: %w", ErrNotSealed, serr))
	}
	p.d.log.Debug().Str("group", p.h.group).Int("accepted", p.h.accepted).Int("duplicates", p.h.duplicates).
		AnErr("error", err).Msg("group published")
	return err
}

// minID is min for job IDs, where 0 means none yet.
func minID(a, b uint64) uint64 {
	if a == 0 {
		return b
	}
	return min(a, b)
}
