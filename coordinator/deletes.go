package coordinator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/weavejobs/weave/internal/wire"
)

// JOBS messages deleted one at a time by sequence: a complete single job's (its group's only
// message) and every message refused (once its rejection is recorded). One goroutine per term,
// the deleter, sends the delete requests without waiting for each answer, as the writer
// publishes, and sends again those that failed, as retry does. A delete whose message is gone
// already (an earlier term deleted it, or an answer was lost) has done its work.
//
// The deleter does not delete the newest message the loop has read from JOBS until a later one
// is there (it goes with the next delete), or holdNewest has passed. Deleting the last message of the stream's last file-store
// block makes the server replace that block (a new file, a tombstone, the old file removed),
// and with a steady stream of single jobs JOBS would be empty after nearly every delete, making
// the replacement most of a delete's cost. At such rates the next message comes within a
// millisecond; on a quiet stream the delete goes anyway, holdNewest later.

// jobDelete is a JOBS message to delete.
type jobDelete struct {
	seq uint64
	// done, if not nil, is handed to the loop once the message is gone: a complete single job,
	// which the loop forgets then (see purgeComplete for groups).
	done *completedGroup
}

const (
	// holdNewest bounds how long the deleter keeps the newest message of JOBS waiting for a
	// later one (see above).
	holdNewest = 50 * time.Millisecond
	// maxDeletesInFlight bounds the delete requests awaiting their answer; more wait their turn.
	maxDeletesInFlight = 512
	// deleteTick is how often the deleter looks for held deletes, late answers and retries due,
	// while it has any.
	deleteTick = 20 * time.Millisecond
)

// deleting is a delete request sent, or waiting to be sent again.
type deleting struct {
	jobDelete
	at           time.Time // sent: when its answer is late; failed: when to send it again
	wait         time.Duration
	failingSince time.Time
}

// deleteQueue is the deleter's bookkeeping, apart from its I/O so that its decisions can be
// tested on their own: which deletes are held back, ready, in flight (by reply token) or
// waiting to be sent again.
type deleteQueue struct {
	held     []jobDelete // the newest message of JOBS when they came, from heldSince
	ready    []*deleting
	inflight map[string]*deleting
	retries  []*deleting
	next     uint64 // reply tokens
	heldAt   time.Time
}

func newDeleteQueue() *deleteQueue { return &deleteQueue{inflight: map[string]*deleting{}} }

// add queues d, and releases the deletes held for messages older than fed, the newest JOBS
// sequence the loop has read. A held delete goes with the next one, not as soon as a later
// message is read: that is when the coordinator and the server are busy with that message,
// and a delete then made single jobs' start p50 a quarter slower.
func (q *deleteQueue) add(d jobDelete, fed uint64, now time.Time) {
	q.fed(fed)
	if d.seq >= fed {
		if len(q.held) == 0 {
			q.heldAt = now
		}
		q.held = append(q.held, d)
		return
	}
	q.ready = append(q.ready, &deleting{jobDelete: d})
}

// fed releases the held deletes of messages older than fed, the newest JOBS sequence read.
func (q *deleteQueue) fed(fed uint64) {
	kept := q.held[:0]
	for _, d := range q.held {
		if d.seq < fed {
			q.ready = append(q.ready, &deleting{jobDelete: d})
		} else {
			kept = append(kept, d)
		}
	}
	clear(q.held[len(kept):])
	q.held = kept
}

// releaseHeld makes every held delete ready: holdNewest has passed, or the term is ending.
func (q *deleteQueue) releaseHeld() {
	for _, d := range q.held {
		q.ready = append(q.ready, &deleting{jobDelete: d})
	}
	q.held = nil
}

// send takes the next ready delete, if the in-flight bound allows, and records it in flight
// under the token it returns; its answer is late after timeout.
func (q *deleteQueue) send(now time.Time, timeout time.Duration) (tok string, d *deleting, ok bool) {
	if len(q.ready) == 0 || len(q.inflight) >= maxDeletesInFlight {
		return "", nil, false
	}
	d = q.ready[0]
	q.ready[0] = nil
	q.ready = q.ready[1:]
	q.next++
	tok = fmt.Sprint(q.next)
	d.at = now.Add(timeout)
	q.inflight[tok] = d
	return tok, d, true
}

// answered takes the delete whose answer came under tok (nil if none is in flight under it: a
// late answer to a delete sent again since).
func (q *deleteQueue) answered(tok string) *deleting {
	d := q.inflight[tok]
	delete(q.inflight, tok)
	return d
}

// failed schedules d to be sent again, after a wait doubling from retryFirst to retryMax, and
// returns how long it has been failing.
func (q *deleteQueue) failed(d *deleting, now time.Time) time.Duration {
	if d.failingSince.IsZero() {
		d.failingSince, d.wait = now, retryFirst
	} else {
		d.wait = min(2*d.wait, retryMax)
	}
	d.at = now.Add(d.wait)
	q.retries = append(q.retries, d)
	return now.Sub(d.failingSince)
}

// due moves on what time has made due at now: held deletes older than holdNewest become ready,
// retries whose wait is over become ready, and the deletes in flight whose answer is late are
// returned (the caller fails them).
func (q *deleteQueue) due(now time.Time) (late []*deleting) {
	if len(q.held) > 0 && now.Sub(q.heldAt) >= holdNewest {
		q.releaseHeld()
	}
	kept := q.retries[:0]
	for _, d := range q.retries {
		if now.Before(d.at) {
			kept = append(kept, d)
		} else {
			q.ready = append(q.ready, d)
		}
	}
	clear(q.retries[len(kept):])
	q.retries = kept
	for tok, d := range q.inflight {
		if now.After(d.at) {
			delete(q.inflight, tok)
			late = append(late, d)
		}
	}
	return late
}

// idle reports whether nothing is held, ready, in flight or waiting to be sent again.
func (q *deleteQueue) idle() bool {
	return len(q.held) == 0 && len(q.ready) == 0 && len(q.inflight) == 0 && len(q.retries) == 0
}

// deleter deletes the JOBS messages handed to it on r.deletes (see above) until that channel is
// closed and its work is done, or the term ends (then it drops what is left: the next term
// replays those messages and deletes them).
func (r *run) deleter(ctx context.Context) {
	nc := r.c.nc
	prefix := nc.NewInbox() + "."
	// Room for every request in flight and a late answer to each one sent again.
	answers := make(chan *nats.Msg, 2*maxDeletesInFlight)
	sub, err := nc.ChanSubscribe(prefix+"*", answers)
	if err != nil {
		r.log.Error().Err(err).Msg("delete JOBS messages: subscribe to the answers")
		r.fail(fmt.Errorf("weave: subscribe to delete answers: %w", err))
		for range r.deletes {
		}
		return
	}
	defer func() { _ = sub.Unsubscribe() }()

	q := newDeleteQueue()
	in := r.deletes
	var forgets []completedGroup // done, to hand to the loop
	// The ticker runs only while there is something to time: an idle coordinator stays quiet.
	ticker := time.NewTicker(deleteTick)
	ticker.Stop()
	ticking := false
	defer ticker.Stop()
	done, loopGone := r.done, false
	failing := time.Time{} // when deletes started failing, zero while they go through
	fail := func(d *deleting, err error, now time.Time) {
		if failing.IsZero() {
			failing = now
			r.outage.Begin("delete JOBS messages", err, time.Now())
		} else {
			r.outage.Again(err)
		}
		if since := q.failed(d, now); since > r.cfg.LeaseTTL {
			r.fail(fmt.Errorf("%w: delete JOBS message %d failing for over %v: %w", ErrStalled, d.seq, r.cfg.LeaseTTL, err))
		}
	}
	for {
		if ctx.Err() != nil {
			// The term is ending: what is left is deleted by the next one. (in is nil once
			// closed: ranging over it would block for ever.)
			if in != nil {
				for range in {
				}
			}
			if !failing.IsZero() {
				r.outage.End(time.Now())
			}
			return
		}
		now := r.cfg.now()
		for {
			tok, d, ok := q.send(now, requestTimeout)
			if !ok {
				break
			}
			m := r.deleteRequest(d.seq)
			m.Reply = prefix + tok
			if err := nc.PublishMsg(m); err != nil {
				q.answered(tok)
				fail(d, err, now)
			}
		}
		if in == nil && q.idle() && len(forgets) == 0 {
			return
		}
		var tick <-chan time.Time
		switch idle := q.idle(); {
		case !idle && !ticking:
			ticker.Reset(deleteTick)
			ticking = true
		case idle && ticking:
			ticker.Stop()
			ticking = false
		}
		if ticking {
			tick = ticker.C
		}
		var forgetCh chan<- completedGroup
		var forget completedGroup
		if len(forgets) > 0 {
			forgetCh, forget = r.forgetCh, forgets[0]
			forget.at = now
		}
		select {
		case d, ok := <-in:
			if !ok {
				in = nil
				q.releaseHeld() // nothing more is coming: no reason to wait
				continue
			}
			if wire.IsPacked(d.seq) {
				// A single pack's job: its message goes once every job in it is done with it.
				seq, last := r.shared.release(d.seq)
				if !last {
					if d.done != nil && !loopGone {
						forgets = append(forgets, *d.done)
					}
					continue
				}
				d.seq = seq
			} else {
				r.shared.forget(d.seq)
			}
			q.add(d, r.jobsFed.Load(), now)
		case m := <-answers:
			d := q.answered(m.Subject[min(len(prefix), len(m.Subject)):])
			if d == nil {
				continue
			}
			if err := deleteAnswer(m); err != nil {
				fail(d, err, now)
				continue
			}
			if !failing.IsZero() {
				r.outage.End(time.Now())
				failing = time.Time{}
			}
			if d.done != nil && !loopGone {
				forgets = append(forgets, *d.done)
			}
		case forgetCh <- forget:
			forgets = forgets[1:]
		case <-done:
			forgets, loopGone, done = nil, true, nil // the loop reads no more
		case <-tick:
			now := r.cfg.now()
			for _, d := range q.due(now) {
				fail(d, fmt.Errorf("no answer within %v", requestTimeout), now)
			}
		case <-ctx.Done():
		}
	}
}

// deleteNow deletes a JOBS message and returns once it is gone (nil), or the term ends: for a
// delete that something waits for (a redrive refused).
func (r *run) deleteNow(ctx context.Context, seq uint64) error {
	return r.retry(ctx, "delete a JOBS message", func(ctx context.Context) error {
		m, err := r.c.nc.RequestMsgWithContext(ctx, r.deleteRequest(seq))
		if err != nil {
			return err
		}
		return deleteAnswer(m)
	})
}

// deleteRequest is the JetStream API request deleting the JOBS message at seq (as
// jetstream.Stream.DeleteMsg sends it).
func (r *run) deleteRequest(seq uint64) *nats.Msg {
	m := nats.NewMsg("$JS.API.STREAM.MSG.DELETE." + r.names.JobsStream())
	m.Data = fmt.Appendf(nil, `{"seq":%d,"no_erase":true}`, seq)
	return m
}

// deleteAnswer reads the server's answer to a message delete: nil when the message is gone,
// deleted now or before.
func deleteAnswer(m *nats.Msg) error {
	if len(m.Data) == 0 {
		if status := m.Header.Get("Status"); status != "" {
			return fmt.Errorf("status %s %s", status, m.Header.Get("Description")) // 503: no stream leader
		}
	}
	// The common answer; an error's description cannot hold it: its quotes would be escaped.
	if bytes.Contains(m.Data, []byte(`"success":true`)) {
		return nil
	}
	var resp struct {
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil || resp.Error == nil {
		return fmt.Errorf("unexpected answer to a delete: %.200q", m.Data)
	}
	if messageGone(resp.Error) {
		return nil
	}
	return resp.Error
}

// messageGone reports whether a delete's error says the message is not there: "no message
// found" (or "stream store EOF" past the last sequence), or "sequence N not found".
func messageGone(e *jetstream.APIError) bool {
	const sequenceNotFound, deleteFailed = 10043, 10057
	switch e.ErrorCode {
	case sequenceNotFound, jetstream.JSErrCodeMessageNotFound:
		return true
	case deleteFailed:
		return strings.Contains(e.Description, "no message found") || strings.Contains(e.Description, "stream store EOF")
	}
	return false
}
