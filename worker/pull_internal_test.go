package worker

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/integration/jstest"
	"github.com/weavejobs/weave/internal/testwait"
)

// pullFixture is a stream "S" on subject "s.>" with a pull consumer "C", and a puller of two lanes.
func pullFixture(t *testing.T) (*nats.Conn, jetstream.JetStream, *puller, context.Context) {
	t.Helper()
	srv := jstest.New(t)
	nc := jstest.NewConn(t, srv.ClientURL())
	js := jstest.NewJetStream(t, nc)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, "S", jetstream.ConsumerConfig{Durable: "C", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	p, err := newPuller(nc, time.Now, "S", "C", 2, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.close)
	return nc, js, p, ctx
}

// collect reads lane l's open pull as the shepherd does (puller.receive; overdue once per
// heartbeat; abandon when ctx ends) until the pull ends, and returns how many work batches it
// delivered and how it ended.
func collect(ctx context.Context, p *puller, l *lane, heartbeat time.Duration, deliver func(workMsg)) (int, error) {
	check := time.NewTicker(heartbeat)
	defer check.Stop()
	for {
		select {
		case m := <-l.msgs:
			w, ended, err := p.receive(l, m)
			if w != nil {
				deliver(w)
			}
			if ended {
				return l.received, err
			}
		case <-check.C:
			if give, err := p.overdue(l, time.Now()); give {
				p.abandon(l, deliver)
				return l.received, err
			}
		case <-ctx.Done():
			p.abandon(l, deliver)
			return l.received, ctx.Err()
		}
	}
}

// TestPullerDeliversAndAcks: a pull gets the messages it asked for, with their own subject, and
// acknowledging them through the puller's messages moves the consumer on.
func TestPullerDeliversAndAcks(t *testing.T) {
	t.Parallel()
	_, js, p, ctx := pullFixture(t)
	for _, s := range []string{"s.a", "s.b", "s.c"} {
		if _, err := js.Publish(ctx, s, []byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	l, err := p.pull(2, 5*time.Second, time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []workMsg
	n, err := collect(ctx, p, l, time.Second, func(m workMsg) { got = append(got, m) })
	if err != nil || n != 2 || got[0].Subject() != "s.a" || string(got[1].Data()) != "s.b" {
		t.Fatalf("collect: %d messages, %v", n, err)
	}
	md, err := got[0].Metadata()
	if err != nil || md.Sequence.Stream != 1 || md.NumDelivered != 1 {
		t.Fatalf("metadata %+v, %v", md, err)
	}
	for _, m := range got {
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	cons, err := js.Consumer(ctx, "S", "C")
	if err != nil {
		t.Fatal(err)
	}
	testwait.Seen(t, 10*time.Second, "the ack floor at 2", func() (bool, string) {
		info, err := cons.Info(ctx)
		if err != nil {
			return false, err.Error()
		}
		return info.AckFloor.Stream == 2, fmt.Sprintf("%+v", info.AckFloor)
	})
}

// TestPullerEnds: a pull nothing answers ends at its expiry with no error; one to a consumer that
// does not exist ends with no responders; a stale end of a lane's earlier pull does not end the
// lane's next one.
func TestPullerEnds(t *testing.T) {
	t.Parallel()
	nc, js, p, ctx := pullFixture(t)
	l, err := p.pull(1, 300*time.Millisecond, 100*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	first := l.prefix + "1"
	if n, err := collect(ctx, p, l, 100*time.Millisecond, func(workMsg) {}); n != 0 || err != nil {
		t.Fatalf("an expired pull: %d messages, %v; want 0, nil", n, err)
	}

	// The lane's next pull, with a forged end of the first one arriving on the lane.
	l2, err := p.pull(1, 5*time.Second, time.Second, nil)
	if err != nil || l2 != l {
		t.Fatalf("next pull on lane %p (want %p): %v", l2, l, err)
	}
	stale := &nats.Msg{Subject: first, Header: nats.Header{"Status": []string{"408"}}}
	if err := nc.PublishMsg(stale); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "s.x", []byte("x")); err != nil {
		t.Fatal(err)
	}
	var got []workMsg
	if n, err := collect(ctx, p, l2, time.Second, func(m workMsg) { got = append(got, m) }); n != 1 || err != nil || string(got[0].Data()) != "x" {
		t.Fatalf("the pull after a stale end: %d messages, %v", n, err)
	}

	missing, err := newPuller(nc, time.Now, "S", "nobody", 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer missing.close()
	l3, err := missing.pull(1, time.Second, 200*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := collect(ctx, missing, l3, 200*time.Millisecond, func(workMsg) {}); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("a pull to a missing consumer: %v, want no responders", err)
	}
}

// TestPullerAbandon: a pull given up (its context canceled, as on a drain or a reconnect) leaves
// its subscription, so the server, which keeps the request until it expires, skips it and
// delivers the next message to the pull still open on the other lane.
func TestPullerAbandon(t *testing.T) {
	t.Parallel()
	_, js, p, ctx := pullFixture(t)
	abandoned, err := p.pull(1, 30*time.Second, time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	open, err := p.pull(1, 3*time.Second, time.Second, nil)
	if err != nil || open == abandoned {
		t.Fatalf("second pull: lane %p, %v", open, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if n, err := collect(cctx, p, abandoned, time.Second, func(workMsg) {}); n != 0 || !errors.Is(err, context.Canceled) {
		t.Fatalf("an abandoned pull: %d messages, %v", n, err)
	}
	if _, err := js.Publish(ctx, "s.y", []byte("y")); err != nil {
		t.Fatal(err)
	}
	var got []workMsg
	if n, err := collect(ctx, p, open, time.Second, func(m workMsg) { got = append(got, m) }); n != 1 || err != nil || string(got[0].Data()) != "y" {
		t.Fatalf("the pull open beside an abandoned one: %d messages, %v", n, err)
	}
}

// TestLaneStampCoversSilence: a message read on a lane is stamped with its receipt, unless the
// lane heard nothing for longer than two heartbeats before it (the process could not read: it
// was stopped or starved), when it and the rest of the pull are stamped with the last thing read
// before the silence, the latest moment the server can be sure to have delivered them after.
// A new pull starts afresh.
func TestLaneStampCoversSilence(t *testing.T) {
	t0 := time.Now()
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	l := &lane{heartbeat: time.Second, seen: t0}
	for _, c := range []struct {
		now, want time.Duration
	}{
		{1500 * time.Millisecond, 1500 * time.Millisecond}, // a heartbeat's gap: normal
		{3500 * time.Millisecond, 3500 * time.Millisecond}, // two heartbeats exactly: normal
		{6 * time.Second, 3500 * time.Millisecond},         // silence: from the last thing read
		{6001 * time.Millisecond, 3500 * time.Millisecond}, // the rest of the pull too
	} {
		if got := l.stamp(at(c.now)); !got.Equal(at(c.want)) {
			t.Fatalf("read at %v: stamped %v, want %v", c.now, got.Sub(t0), c.want)
		}
	}
	l.seen, l.silence = at(10*time.Second), time.Time{} // a new pull (puller.pull)
	if got := l.stamp(at(10500 * time.Millisecond)); !got.Equal(at(10500 * time.Millisecond)) {
		t.Fatalf("a new pull's message stamped %v", got.Sub(t0))
	}
	l.heartbeat = 0 // a pull without heartbeats tells nothing by its silence
	if got := l.stamp(at(time.Minute)); !got.Equal(at(time.Minute)) {
		t.Fatalf("a message of a pull without heartbeats stamped %v", got.Sub(t0))
	}
}

// TestLeaseKeeperAnswers: on a live server, the answer to an extension sent as InProgress with
// the keeper's reply subject confirms it, and a status on that subject (503: nobody took the
// extension) does not. Answers reach the keeper's one subscription in order, so once a later
// extension is confirmed the status before it has been handled.
func TestLeaseKeeperAnswers(t *testing.T) {
	nc, js, p, ctx := pullFixture(t)
	k := newLeaseKeeper(time.Minute, time.Now)
	if err := k.listen(nc); err != nil {
		t.Fatal(err)
	}
	defer k.close()
	if _, err := js.Publish(ctx, "s.1", []byte("x")); err != nil {
		t.Fatal(err)
	}
	l, err := p.pull(1, 5*time.Second, time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	var msgs []workMsg
	if n, err := collect(ctx, p, l, time.Second, func(m workMsg) { msgs = append(msgs, m) }); n != 1 || err != nil {
		t.Fatalf("pulled %d, %v", n, err)
	}
	now := time.Now()
	noone := &batch{received: now, leaseFrom: now}
	real := &batch{msg: msgs[0], received: now, leaseFrom: now}
	k.add(noone)
	k.add(real)
	defer k.stop()
	sent := now.Add(time.Millisecond)
	k.mu.Lock()
	k.asked[1], k.asked[2] = asked{b: noone, at: sent}, asked{b: real, at: sent}
	k.mu.Unlock()
	// Nobody listens on this ack subject: the server answers 503.
	if err := nc.PublishRequest("$JS.ACK.S.nobody.1.1.1.0.0", k.replyTo(1), []byte("+WPI")); err != nil {
		t.Fatal(err)
	}
	if err := real.msg.InProgress(k.replyTo(2)); err != nil {
		t.Fatal(err)
	}
	confirmed := func(b *batch) bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.leaseFrom.Equal(sent)
	}
	testwait.For(t, 10*time.Second, "the server's answer to InProgress to confirm the extension", func() bool { return confirmed(real) })
	if confirmed(noone) {
		t.Fatal("a 503 status confirmed an extension")
	}
}

// TestPullOverdue: an open pull is given up once the server has sent nothing for two heartbeats
// (errMissedHeartbeats), or once it outlived its expiry by a second without the server's end
// (no error, as for that end); not before.
func TestPullOverdue(t *testing.T) {
	t0 := time.Now()
	now := t0
	p := &puller{now: func() time.Time { return now }}
	l := &lane{busy: true, requested: 4, started: t0, expires: 10 * time.Second, heartbeat: time.Second, seen: t0}
	for _, c := range []struct {
		at, seen time.Duration
		give     bool
		err      error
	}{
		{2 * time.Second, 0, false, nil},                                // two heartbeats exactly
		{2001 * time.Millisecond, 0, true, errMissedHeartbeats},         // silence
		{10500 * time.Millisecond, 10 * time.Second, false, nil},        // heard from, not expired yet
		{11001 * time.Millisecond, 10500 * time.Millisecond, true, nil}, // past its expiry by a second
	} {
		now, l.seen = t0.Add(c.at), t0.Add(c.seen)
		if give, err := p.overdue(l, now); give != c.give || !errors.Is(err, c.err) {
			t.Fatalf("at %v, last heard at %v: give up %v, %v; want %v, %v", c.at, c.seen, give, err, c.give, c.err)
		}
	}
	l.heartbeat, l.seen = 0, t0 // a pull without heartbeats: only its expiry counts
	if give, _ := p.overdue(l, t0.Add(5*time.Second)); give {
		t.Fatal("a pull without heartbeats given up for its silence")
	}
}
