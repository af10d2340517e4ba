package worker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/integration/jstest"
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
	p, err := newPuller(nc, "S", "C", 2, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.close)
	return nc, js, p, ctx
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
	l, err := p.pull(2, 5*time.Second, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var got []workMsg
	n, err := p.collect(ctx, l, 2, time.Second, func(m workMsg) { got = append(got, m) })
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
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := cons.Info(ctx)
		if err == nil && info.AckFloor.Stream == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ack floor not at 2: %+v, %v", info, err)
		}
		time.Sleep(10 * time.Millisecond) // polling the consumer's state, with a deadline
	}
}

// TestPullerEnds: a pull nothing answers ends at its expiry with no error; one to a consumer that
// does not exist ends with no responders; a stale end of a lane's earlier pull does not end the
// lane's next one.
func TestPullerEnds(t *testing.T) {
	t.Parallel()
	nc, js, p, ctx := pullFixture(t)
	l, err := p.pull(1, 300*time.Millisecond, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	first := l.prefix + "1"
	if n, err := p.collect(ctx, l, 1, 100*time.Millisecond, func(workMsg) {}); n != 0 || err != nil {
		t.Fatalf("an expired pull: %d messages, %v; want 0, nil", n, err)
	}

	// The lane's next pull, with a forged end of the first one arriving on the lane.
	l2, err := p.pull(1, 5*time.Second, time.Second)
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
	if n, err := p.collect(ctx, l2, 1, time.Second, func(m workMsg) { got = append(got, m) }); n != 1 || err != nil || string(got[0].Data()) != "x" {
		t.Fatalf("the pull after a stale end: %d messages, %v", n, err)
	}

	missing, err := newPuller(nc, "S", "nobody", 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer missing.close()
	l3, err := missing.pull(1, time.Second, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := missing.collect(ctx, l3, 1, 200*time.Millisecond, func(workMsg) {}); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("a pull to a missing consumer: %v, want no responders", err)
	}
}

// TestPullerAbandon: a pull given up (its context canceled, as on a drain or a reconnect) leaves
// its subscription, so the server, which keeps the request until it expires, skips it and
// delivers the next message to the pull still open on the other lane.
func TestPullerAbandon(t *testing.T) {
	t.Parallel()
	_, js, p, ctx := pullFixture(t)
	abandoned, err := p.pull(1, 30*time.Second, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	open, err := p.pull(1, 3*time.Second, time.Second)
	if err != nil || open == abandoned {
		t.Fatalf("second pull: lane %p, %v", open, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if n, err := p.collect(cctx, abandoned, 1, time.Second, func(workMsg) {}); n != 0 || !errors.Is(err, context.Canceled) {
		t.Fatalf("an abandoned pull: %d messages, %v", n, err)
	}
	if _, err := js.Publish(ctx, "s.y", []byte("y")); err != nil {
		t.Fatal(err)
	}
	var got []workMsg
	if n, err := p.collect(ctx, open, 1, time.Second, func(m workMsg) { got = append(got, m) }); n != 1 || err != nil || string(got[0].Data()) != "y" {
		t.Fatalf("the pull open beside an abandoned one: %d messages, %v", n, err)
	}
}
