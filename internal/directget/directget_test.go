package directget_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/integration/jstest"
	"github.com/weavejobs/weave/internal/directget"
)

func setup(t *testing.T) (*directget.Client, jetstream.JetStream, context.Context) {
	t.Helper()
	s := jstest.New(t)
	nc := jstest.NewConn(t, s.ClientURL())
	js := jstest.NewJetStream(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, AllowDirect: true}); err != nil {
		t.Fatal(err)
	}
	c := directget.New(nc, "S")
	t.Cleanup(c.Close)
	return c, js, ctx
}

func TestGetScanNext(t *testing.T) {
	t.Parallel()
	c, js, ctx := setup(t)
	for i := range 10 {
		if _, err := js.Publish(ctx, fmt.Sprintf("s.%d", i%2), []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	msgs, err := c.Get(ctx, []uint64{3, 99, 7})
	if !errors.Is(err, directget.ErrNotFound) || msgs[1] != nil || string(msgs[0].Data) != "2" || string(msgs[2].Data) != "6" {
		t.Fatalf("Get: %v %+v", err, msgs)
	}
	var seqs []uint64
	if err := c.Scan(ctx, 4, 3, func(m *directget.Msg) error { seqs = append(seqs, m.Seq); return nil }); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(seqs) != "[4 5 6 7 8 9 10]" {
		t.Fatalf("Scan from 4 in batches of 3 read %v", seqs)
	}
	odd, err := c.Next(ctx, "s.1", 3, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(odd) != 3 || odd[0].Seq != 4 || odd[2].Seq != 8 || odd[1].Subject != "s.1" {
		t.Fatalf("Next(s.1, 3, 3) = %+v", odd)
	}
	// A bound on bytes: each message is subject, headers and body; the one that reaches it is the
	// last, and one comes whatever the bound.
	few, err := c.NextUpTo(ctx, "s.1", 1, 5, 7)
	if err != nil || len(few) != 2 || few[0].Seq != 2 || few[1].Seq != 4 {
		t.Fatalf("NextUpTo(s.1, 1, 5, 7 bytes) = %+v, %v; want the messages at 2 and 4", few, err)
	}
	if one, err := c.NextUpTo(ctx, "s.1", 1, 5, 1); err != nil || len(one) != 1 {
		t.Fatalf("NextUpTo with a bound below one message = %+v, %v; want one message", one, err)
	}
	none, err := c.Next(ctx, "s.1", 11, 3)
	if err != nil || len(none) != 0 {
		t.Fatalf("Next past the end = %v, %v", none, err)
	}
}

func TestScanEmptyStream(t *testing.T) {
	t.Parallel()
	c, _, ctx := setup(t)
	n := 0
	if err := c.Scan(ctx, 1, 10, func(*directget.Msg) error { n++; return nil }); err != nil || n != 0 {
		t.Fatalf("Scan of an empty stream: %d messages, %v", n, err)
	}
}

// TestLastBySubject: the leader's last message on a subject, with its headers and data; a
// subject without messages is ErrNotFound.
func TestLastBySubject(t *testing.T) {
	t.Parallel()
	_, js, ctx := setup(t)
	for i := range 4 {
		m := nats.NewMsg(fmt.Sprintf("s.%d", i%2))
		m.Header.Set("N", fmt.Sprint(i))
		m.Data = []byte(fmt.Sprint(i))
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	m, err := directget.LastBySubject(ctx, js.Conn(), "S", "s.0")
	if err != nil {
		t.Fatal(err)
	}
	if m.Seq != 3 || m.Subject != "s.0" || m.Header.Get("N") != "2" || string(m.Data) != "2" {
		t.Fatalf("last on s.0: %+v, want sequence 3 with N=2 and data 2", m)
	}
	if m, err = directget.LastBySubject(ctx, js.Conn(), "S", "s.>"); err != nil || m.Seq != 4 {
		t.Fatalf("last on s.>: %+v, %v; want sequence 4", m, err)
	}
	if _, err := directget.LastBySubject(ctx, js.Conn(), "S", "s.9"); !errors.Is(err, directget.ErrNotFound) {
		t.Fatalf("last on s.9: %v, want ErrNotFound", err)
	}
}

// TestGetEachPipelined: more sequences than requests in flight, some missing, each answered in
// its place; with no stream answering, every error wraps nats.ErrNoResponders; after ctx ends,
// every error wraps ctx's.
func TestGetEachPipelined(t *testing.T) {
	t.Parallel()
	c, js, ctx := setup(t)
	for i := range 200 {
		if _, err := js.PublishAsync(fmt.Sprintf("s.%d", i%3), []byte(fmt.Sprint(i+1))); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	var seqs []uint64
	for s := uint64(1); s <= 230; s += 1 + s%2 { // 1, 2, 4, 5, 7, ... past the last message
		seqs = append(seqs, s)
	}
	msgs, errs := c.GetEach(ctx, seqs)
	for i, s := range seqs {
		switch {
		case s <= 200 && (errs[i] != nil || msgs[i] == nil || string(msgs[i].Data) != fmt.Sprint(s) || msgs[i].Seq != s || msgs[i].Subject != fmt.Sprintf("s.%d", (s-1)%3)):
			t.Fatalf("sequence %d: %+v, %v", s, msgs[i], errs[i])
		case s > 200 && (!errors.Is(errs[i], directget.ErrNotFound) || msgs[i] != nil):
			t.Fatalf("sequence %d past the end: %+v, %v; want ErrNotFound", s, msgs[i], errs[i])
		}
	}

	none := directget.New(js.Conn(), "NOSUCH")
	t.Cleanup(none.Close)
	if _, errs := none.GetEach(ctx, []uint64{1, 2}); !errors.Is(errs[0], nats.ErrNoResponders) || !errors.Is(errs[1], nats.ErrNoResponders) {
		t.Fatalf("a stream nobody serves: %v, want nats.ErrNoResponders", errs)
	}

	ended, cancel := context.WithCancel(ctx)
	cancel()
	if _, errs := c.GetEach(ended, seqs[:100]); !errors.Is(errs[0], context.Canceled) || !errors.Is(errs[99], context.Canceled) {
		t.Fatalf("after ctx ended: %v ... %v, want context.Canceled", errs[0], errs[99])
	}
}
