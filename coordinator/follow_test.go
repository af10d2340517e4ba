package coordinator

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/weavejobs/weave/integration/jstest"
	"github.com/weavejobs/weave/internal/testwait"
)

// followTest is a follower over stream F of a server, as a run starts it, and the loop's side:
// what it applied.
type followTest struct {
	t       *testing.T
	ctx     context.Context
	js      jetstream.JetStream // publishes, on a connection of its own
	f       *follower
	ch      chan streamMsg
	failed  chan error
	applied []uint64 // what the loop applied, as applyFeed does
}

// newFollowTest publishes 5 messages to a new stream F and starts a follower over it on nc,
// which reaches the server at url.
func newFollowTest(t *testing.T, url string, nc *nats.Conn) *followTest {
	js := jstest.NewJetStream(t, jstest.NewConn(t, url))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "F", Subjects: []string{"f.>"}, AllowDirect: true}); err != nil {
		t.Fatal(err)
	}
	ft := &followTest{t: t, ctx: ctx, js: js, ch: make(chan streamMsg, 64), failed: make(chan error, 1)}
	r := &run{
		c: &Coordinator{nc: nc, js: jstest.NewJetStream(t, nc)}, cfg: Config{LeaseTTL: 10 * time.Second}, log: zerolog.Nop(),
		fail: func(err error) { ft.failed <- err }, done: make(chan struct{}),
	}
	t.Cleanup(func() { // as run.shutdown does, for what the test started
		close(r.done)
		for _, stop := range r.stop {
			stop()
		}
		r.wg.Wait()
	})
	ft.publish(5)
	f, last, err := r.follow(ctx, "F", ft.ch)
	if err != nil {
		t.Fatal(err)
	}
	if last != 5 {
		t.Fatalf("follow says the stream ends at %d, want 5", last)
	}
	ft.f = f
	ft.applyUntil(5)
	return ft
}

func (ft *followTest) publish(n int) {
	ft.t.Helper()
	for range n {
		if _, err := ft.js.Publish(ft.ctx, "f.x", []byte("m")); err != nil {
			ft.t.Fatal(err)
		}
	}
}

// applyUntil applies what the follower delivers until sequence want.
func (ft *followTest) applyUntil(want uint64) {
	ft.t.Helper()
	for len(ft.applied) == 0 || ft.applied[len(ft.applied)-1] < want {
		select {
		case m := <-ft.ch:
			if s := seq(m); ft.f.fresh(m, s) {
				ft.applied = append(ft.applied, s)
			}
		case err := <-ft.failed:
			ft.t.Fatalf("the term ended: %v", err)
		case <-ft.ctx.Done():
			ft.t.Fatalf("the loop applied %v, waiting for %d", ft.applied, want)
		}
	}
}

// silence stops the follower's consumer behind its back: it delivers nothing more, and says so
// nowhere.
func (ft *followTest) silence() {
	ft.f.mu.Lock()
	ft.f.cc.Stop()
	ft.f.mu.Unlock()
}

// setFollowIntervals sets the follower's intervals for the test. Tests that call it are not
// parallel: they are package variables.
func setFollowIntervals(t *testing.T, check, stall, stallAlert, window time.Duration) {
	c, s, sr, w := followCheckEvery, followStallAfter, followStallAfterAlert, followAlertWindow
	followCheckEvery, followStallAfter, followStallAfterAlert, followAlertWindow = check, stall, stallAlert, window
	t.Cleanup(func() {
		followCheckEvery, followStallAfter, followStallAfterAlert, followAlertWindow = c, s, sr, w
	})
}

// TestFollowerMendsAStalledRead: a follower whose consumer stops delivering without a word (the
// stall the chaos test caught after a node loss) starts a new consumer after the last message
// the loop applied, once the stream holds more: every message reaches the loop once, in order.
func TestFollowerMendsAStalledRead(t *testing.T) {
	setFollowIntervals(t, 20*time.Millisecond, 200*time.Millisecond, 200*time.Millisecond, time.Second)
	srv := jstest.New(t)
	ft := newFollowTest(t, srv.ClientURL(), jstest.NewConn(t, srv.ClientURL()))

	ft.silence()
	ft.publish(5)
	ft.applyUntil(10)
	if want := []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}; !slices.Equal(ft.applied, want) {
		t.Fatalf("applied %v, want %v", ft.applied, want)
	}
	// A message delivered again (by the stalled consumer, had it woken) is not applied twice.
	if ft.f.fresh(streamMsg{gen: 1}, 7) {
		t.Fatal("sequence 7 applied twice")
	}
}

// TestFollowerChecksSoonAfterAnAlert: in the window after the coordinator's connection
// reconnects, or its consumer reports an error, a read that stalled is mended after
// followStallAfterAlert, not followStallAfter (a node loss paused every job start for the 3 s of
// followStallAfter). Here followStallAfter is a minute: without the shorter wait the test times
// out.
func TestFollowerChecksSoonAfterAnAlert(t *testing.T) {
	for _, alert := range []string{"reconnect", "consumer error"} {
		t.Run(alert, func(t *testing.T) {
			setFollowIntervals(t, 20*time.Millisecond, time.Minute, 100*time.Millisecond, 10*time.Second)
			srv := jstest.New(t)
			proxy, err := jstest.StartProxy(srv.ClientURL())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(proxy.Close)
			nc := jstest.NewConn(t, proxy.URL(), nats.ReconnectWait(10*time.Millisecond), nats.MaxReconnects(-1))
			ft := newFollowTest(t, srv.ClientURL(), nc)

			ft.silence()
			switch alert {
			case "reconnect":
				proxy.Cut()
				testwait.For(t, 30*time.Second, "the connection to reconnect", func() bool {
					return nc.Stats().Reconnects > 0 && nc.IsConnected()
				})
			case "consumer error":
				ft.f.errs.Add(1) // what the consumer's error handler counts (see follower.start)
			}
			start := time.Now()
			ft.publish(5)
			ft.applyUntil(10)
			if want := []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}; !slices.Equal(ft.applied, want) {
				t.Fatalf("applied %v, want %v", ft.applied, want)
			}
			t.Logf("mended %v after the %s", time.Since(start), alert)
		})
	}
}

// TestFollowerIgnoresAReplacedConsumer: once the loop has seen a message of the consumer that
// replaced a stalled one, a message the old consumer was still handing over is ignored, even
// one past the last applied: applying it would skip the new consumer's messages before it.
func TestFollowerIgnoresAReplacedConsumer(t *testing.T) {
	t.Parallel()
	f := &follower{}
	var applied []uint64
	for _, d := range []struct {
		gen uint32
		seq uint64
	}{{1, 1}, {1, 2}, {1, 3}, {2, 3}, {2, 4}, {1, 7}, {2, 5}, {2, 6}, {2, 7}} {
		if f.fresh(streamMsg{gen: d.gen}, d.seq) {
			applied = append(applied, d.seq)
		}
	}
	if want := []uint64{1, 2, 3, 4, 5, 6, 7}; !slices.Equal(applied, want) {
		t.Fatalf("applied %v, want %v", applied, want)
	}
}
