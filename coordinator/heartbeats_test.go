package coordinator

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/weavejobs/weave/integration/jstest"
	"github.com/weavejobs/weave/internal/testwait"
	"github.com/weavejobs/weave/internal/wire"
)

// TestJoinProbesTheRunHoldingItsID: a worker asking to join under the ID of a live run (a
// dormant one: silent for up to 90s before the coordinator forgets it) is refused while that run
// listens on its heartbeats' inbox, whether it answers the coordinator's question (this
// release's workers) or not (earlier ones); once that run's connection is gone, it is accepted
// at once.
func TestJoinProbesTheRunHoldingItsID(t *testing.T) {
	const ns = "probe"
	srv, nc, _, ctx := onServer(t, ns)
	names, err := wire.NewNames(ns)
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(nc, Config{Namespace: ns, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		<-done
	})

	hb := func(worker, run string) wire.Heartbeat {
		held := 0
		return wire.Heartbeat{Worker: worker, Pool: wire.PoolKey(nil), Concurrency: 1, Sleeping: 1, Held: &held, IntervalMS: 30_000, Run: run}
	}
	// join asks to join as run of worker, as a worker does, and returns the refusal ("" if
	// accepted).
	join := func(worker, run string) string {
		t.Helper()
		b := hb(worker, run)
		b.Join = true
		m, err := nc.Request(names.JoinSubject(b.Pool, b.Worker), b.Marshal(), 5*time.Second)
		if err != nil {
			t.Fatalf("join as %s: %v", run, err)
		}
		rep, err := wire.ParseHeartbeatReply(m.Data)
		if err != nil {
			t.Fatalf("join as %s: answer %q: %v", run, m.Data, err)
		}
		return rep.Refused
	}
	// live starts run "old" of worker on a connection of its own, beating with an inbox that
	// answers the coordinator's questions if answer is set, and waits until the coordinator
	// knows it, the known'th worker.
	live := func(worker string, answer bool, known int) *nats.Conn {
		t.Helper()
		oc := jstest.NewConn(t, srv.ClientURL())
		inbox := oc.NewRespInbox()
		if _, err := oc.Subscribe(inbox, func(m *nats.Msg) {
			if answer && m.Reply != "" {
				_ = m.Respond(nil)
			}
		}); err != nil {
			t.Fatal(err)
		}
		b := hb(worker, "old")
		// Heartbeats go on until the status shows the run: it does not say when it changes.
		testwait.Seen(t, 15*time.Second, "the coordinator to know the old run", func() (bool, string) {
			if err := oc.PublishRequest(names.HeartbeatSubject(b.Pool, b.Worker), inbox, b.Marshal()); err != nil {
				t.Fatal(err)
			}
			st, err := QueryStatus(ctx, nc, ns)
			if err != nil {
				return false, err.Error()
			}
			return len(st.Workers) == known, fmt.Sprintf("%d workers", len(st.Workers))
		})
		return oc
	}

	answering := live("w1", true, 1)
	if refused := join("w1", "new"); refused == "" {
		t.Fatal("a join under the ID of a live run that answers was accepted")
	}
	live("w2", false, 2)
	if refused := join("w2", "new"); refused == "" {
		t.Fatal("a join under the ID of a live run that does not answer was accepted")
	}
	answering.Close()
	if refused := join("w1", "new"); refused != "" {
		t.Fatalf("a join under the ID of a run whose connection is gone refused: %s", refused)
	}
}
