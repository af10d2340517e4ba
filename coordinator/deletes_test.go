package coordinator

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/weavejobs/weave/internal/wire"
)

// TestDeleteQueueHoldsNewest: a delete of the newest message read from JOBS waits until a later
// one is read and another delete comes, or holdNewest; older ones are ready at once.
func TestDeleteQueueHoldsNewest(t *testing.T) {
	q := newDeleteQueue()
	t0 := time.Unix(1000, 0)
	q.add(jobDelete{seq: 4}, 5, t0)
	q.add(jobDelete{seq: 5}, 5, t0)
	if len(q.ready) != 1 || q.ready[0].seq != 4 || len(q.held) != 1 || q.held[0].seq != 5 {
		t.Fatalf("ready %v, held %v: want 4 ready and 5 (the newest) held", q.ready, q.held)
	}
	q.add(jobDelete{seq: 3}, 5, t0) // nothing later read yet
	if len(q.held) != 1 || len(q.ready) != 2 {
		t.Fatalf("ready %v, held %v: want 4 and 3 ready, 5 held", q.ready, q.held)
	}
	q.add(jobDelete{seq: 6}, 7, t0)
	if len(q.held) != 0 || len(q.ready) != 4 || q.ready[2].seq != 5 || q.ready[3].seq != 6 {
		t.Fatalf("after a later message: ready %v, held %v", q.ready, q.held)
	}

	q = newDeleteQueue()
	q.add(jobDelete{seq: 9}, 9, t0)
	if late := q.due(t0.Add(holdNewest - time.Millisecond)); len(late) != 0 || len(q.held) != 1 {
		t.Fatal("released before holdNewest")
	}
	q.due(t0.Add(holdNewest))
	if len(q.held) != 0 || len(q.ready) != 1 {
		t.Fatalf("after holdNewest: ready %v, held %v", q.ready, q.held)
	}
}

// TestDeleteQueueRetries: at most maxDeletesInFlight go out; a late answer fails its delete,
// which goes again after a wait doubling up to retryMax; an answer under a token no longer in
// flight is nobody's.
func TestDeleteQueueRetries(t *testing.T) {
	q := newDeleteQueue()
	t0 := time.Unix(1000, 0)
	for i := range maxDeletesInFlight + 1 {
		q.add(jobDelete{seq: uint64(i + 1)}, 1<<40, t0)
	}
	var toks []string
	for {
		tok, _, ok := q.send(t0, time.Second)
		if !ok {
			break
		}
		toks = append(toks, tok)
	}
	if len(toks) != maxDeletesInFlight || len(q.ready) != 1 {
		t.Fatalf("sent %d with %d ready, want %d and 1", len(toks), len(q.ready), maxDeletesInFlight)
	}
	if d := q.answered(toks[0]); d == nil || d.seq != 1 {
		t.Fatalf("answer to the first: %+v", d)
	}
	if d := q.answered(toks[0]); d != nil {
		t.Fatal("a second answer under one token taken")
	}
	if late := q.due(t0.Add(time.Second)); len(late) != 0 {
		t.Fatal("late at the deadline itself")
	}
	late := q.due(t0.Add(time.Second + time.Millisecond))
	if len(late) != maxDeletesInFlight-1 || len(q.inflight) != 0 {
		t.Fatalf("%d late, %d in flight", len(late), len(q.inflight))
	}
	d := late[0]
	now := t0.Add(2 * time.Second)
	var waits []time.Duration
	for range 7 {
		q.failed(d, now)
		waits = append(waits, d.at.Sub(now))
		q.retries = q.retries[:0]
		now = d.at
	}
	for i, w := 0, retryFirst; i < len(waits); i, w = i+1, min(2*w, retryMax) {
		if waits[i] != w {
			t.Fatalf("waits %v: the wait doubles from %v to %v", waits, retryFirst, retryMax)
		}
	}
	if waits[len(waits)-1] != retryMax {
		t.Fatalf("waits %v never reach %v", waits, retryMax)
	}
	if since := q.failed(d, now); since != now.Sub(t0.Add(2*time.Second)) {
		t.Fatalf("failing for %v", since)
	}
	q.due(d.at)
	if q.ready[len(q.ready)-1] != d {
		t.Fatal("a retry due was not made ready")
	}
}

// TestDeleter: on a real server the deleter deletes what it is handed, holding the newest
// message read from JOBS until a later one is read and the next delete comes; a message gone already counts as deleted
// (the server answers "sequence not found", which must not be tried again until the term
// stalls); a complete single job's group goes to the loop once its message is gone.
func TestDeleter(t *testing.T) {
	t.Parallel()
	_, nc, js, ctx := onServer(t, "del")
	names, _ := wire.NewNames("del")
	jobs, err := js.Stream(ctx, names.JobsStream())
	if err != nil {
		t.Fatal(err)
	}
	pub := func(key string) uint64 {
		ack, err := js.PublishMsg(ctx, &nats.Msg{Subject: names.JobSubject("g"), Header: wire.JobMeta{Group: "g", Key: key, Single: true}.Header()})
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
	tctx, cancel := context.WithCancelCause(ctx)
	// The deleter's clock stands still: a held delete waits for a later message, however slow
	// the test runs (and no answer is ever late).
	t0 := time.Now()
	cfg := Config{LeaseTTL: time.Minute, now: func() time.Time { return t0 }}
	r := &run{c: &Coordinator{nc: nc, js: js}, cfg: cfg, names: names, log: zerolog.Nop(), fail: cancel,
		deletes: make(chan jobDelete, 16), forgetCh: make(chan completedGroup, 16), done: make(chan struct{})}
	ended := make(chan struct{})
	go func() { defer close(ended); r.deleter(tctx) }()
	feed := r.jobsFed.Store // the loop read the message at seq
	gone := func(seq uint64) bool {
		_, err := jobs.GetMsg(ctx, seq)
		return errors.Is(err, jetstream.ErrMsgNotFound)
	}
	forgotten := func(want uint64) {
		t.Helper()
		select {
		case f := <-r.forgetCh:
			if f.openSeq != want || f.summarySeq != 7 {
				t.Fatalf("forgot %+v, want the group handed with summary 7", f)
			}
		case <-ctx.Done():
			t.Fatal("the group was not handed to the loop")
		}
	}

	a, b := pub("a"), pub("b")
	feed(a)
	feed(b)
	r.deletes <- jobDelete{seq: a, done: &completedGroup{openSeq: a, summarySeq: 7}}
	forgotten(a)
	if !gone(a) {
		t.Fatal("message a not deleted before its group was handed on")
	}

	// b is the newest read: it stays until a later message is read.
	r.deletes <- jobDelete{seq: b, done: &completedGroup{openSeq: b, summarySeq: 7}}
	// A delete of a message gone already, handed after b's, goes through while b is held.
	gx := uint64(1 << 40)
	r.deletes <- jobDelete{seq: a, done: &completedGroup{openSeq: gx, summarySeq: 7}}
	forgotten(gx)
	if gone(b) {
		t.Fatal("the newest message deleted before a later one was read")
	}
	c := pub("c")
	feed(c)
	r.deletes <- jobDelete{seq: c}
	forgotten(b)
	if !gone(b) || gone(c) {
		t.Fatalf("after a later message and delete: b gone %v, c gone %v; want true, false", gone(b), gone(c))
	}

	// Closing the input releases what is held: nothing more would come.
	close(r.deletes)
	select {
	case <-ended:
	case <-ctx.Done():
		t.Fatal("the deleter did not end with its input closed")
	}
	if !gone(c) {
		t.Fatal("the held delete was dropped at the end")
	}
	if err := context.Cause(tctx); err != nil {
		t.Fatalf("the term ended: %v", err)
	}
}

// TestDeleteNow: a delete something waits for returns once the message is gone, and at once
// for a message gone already.
func TestDeleteNow(t *testing.T) {
	t.Parallel()
	_, nc, js, ctx := onServer(t, "delnow")
	names, _ := wire.NewNames("delnow")
	ack, err := js.PublishMsg(ctx, &nats.Msg{Subject: names.JobSubject("g"), Header: wire.JobMeta{Group: "g", Key: "a", Single: true}.Header()})
	if err != nil {
		t.Fatal(err)
	}
	r := &run{c: &Coordinator{nc: nc, js: js}, cfg: Config{LeaseTTL: time.Minute}, names: names, log: zerolog.Nop(), fail: func(error) {}}
	for range 2 {
		if err := r.deleteNow(ctx, ack.Sequence); err != nil {
			t.Fatal(err)
		}
	}
	jobs, err := js.Stream(ctx, names.JobsStream())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jobs.GetMsg(ctx, ack.Sequence); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("the message: %v, want not found", err)
	}
}

// TestDeleteAnswer: the server's answers to a delete, and what they mean.
func TestDeleteAnswer(t *testing.T) {
	for _, c := range []struct {
		data   string
		status string
		ok     bool
	}{
		{`{"type":"io.nats.jetstream.api.v1.stream_msg_delete_response","success":true}`, "", true},
		{`{"type":"io.nats.jetstream.api.v1.stream_msg_delete_response","error":{"code":400,"err_code":10043,"description":"sequence 9 not found"},"success":false}`, "", true},
		{`{"type":"io.nats.jetstream.api.v1.stream_msg_delete_response","error":{"code":500,"err_code":10057,"description":"no message found"}}`, "", true},
		{`{"type":"io.nats.jetstream.api.v1.stream_msg_delete_response","error":{"code":500,"err_code":10057,"description":"stream store EOF"}}`, "", true},
		{`{"error":{"code":503,"err_code":10008,"description":"JetStream system temporarily unavailable"}}`, "", false},
		{`{"error":{"code":500,"err_code":10057,"description":"message delete failed: \"success\":true"}}`, "", false},
		{``, "503", false},
		{`not json`, "", false},
		{`{}`, "", false},
	} {
		m := nats.NewMsg("reply")
		m.Data = []byte(c.data)
		if c.status != "" {
			m.Header.Set("Status", c.status)
		}
		if err := deleteAnswer(m); (err == nil) != c.ok {
			t.Errorf("%q (status %q): %v, want ok %v", c.data, c.status, err, c.ok)
		}
	}
}

// TestDeleterEndsWithTheTerm: a deleter whose input is closed while a delete is still in flight
// returns when the term ends, without its answer (shutdown waits for it).
func TestDeleterEndsWithTheTerm(t *testing.T) {
	t.Parallel()
	srv, nc, js, ctx := onServer(t, "delend")
	names, _ := wire.NewNames("delend")
	tctx, cancel := context.WithCancelCause(ctx)
	t0 := time.Now()
	// The deleter reads its clock once per turn of its loop: the third turn comes after it has
	// taken the delete, then the end of its input, and sent the request.
	var turns atomic.Int32
	third := make(chan struct{})
	now := func() time.Time {
		if turns.Add(1) == 3 {
			close(third)
		}
		return t0
	}
	r := &run{c: &Coordinator{nc: nc, js: js}, cfg: Config{LeaseTTL: time.Minute, now: now}, names: names,
		log: zerolog.Nop(), fail: cancel, deletes: make(chan jobDelete, 1), forgetCh: make(chan completedGroup, 1), done: make(chan struct{})}
	srv.Shutdown() // no answer will come
	ended := make(chan struct{})
	go func() { defer close(ended); r.deleter(tctx) }()
	r.deletes <- jobDelete{seq: 1}
	close(r.deletes)
	select {
	case <-third:
	case <-ctx.Done():
		t.Fatal("the deleter did not take its input")
	}
	cancel(errors.New("the term ends"))
	select {
	case <-ended:
	case <-ctx.Done():
		t.Fatal("the deleter did not return when the term ended")
	}
}
