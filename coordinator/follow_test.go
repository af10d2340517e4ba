package coordinator

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/weavejobs/weave/integration/jstest"
)

// TestFollowerMendsAStalledRead: a follower whose consumer stops delivering without a word (the
// stall the chaos test caught after a node loss) starts a new consumer after the last message
// the loop applied, once the stream holds more: every message reaches the loop once, in order.
// Not parallel: it shortens the follower's intervals, which are package variables.
func TestFollowerMendsAStalledRead(t *testing.T) {
	check, stall := followCheckEvery, followStallAfter
	followCheckEvery, followStallAfter = 20*time.Millisecond, 200*time.Millisecond
	t.Cleanup(func() { followCheckEvery, followStallAfter = check, stall })

	srv := jstest.New(t)
	nc := jstest.NewConn(t, srv.ClientURL())
	js := jstest.NewJetStream(t, nc)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "F", Subjects: []string{"f.>"}, AllowDirect: true}); err != nil {
		t.Fatal(err)
	}
	publish := func(n int) {
		for range n {
			if _, err := js.Publish(ctx, "f.x", []byte("m")); err != nil {
				t.Fatal(err)
			}
		}
	}
	failed := make(chan error, 1)
	r := &run{
		c: &Coordinator{nc: nc, js: js}, cfg: Config{LeaseTTL: 10 * time.Second}, log: zerolog.Nop(),
		fail: func(err error) { failed <- err }, done: make(chan struct{}),
	}
	defer func() { // as run.shutdown does, for what the test started
		close(r.done)
		for _, stop := range r.stop {
			stop()
		}
		r.wg.Wait()
	}()

	publish(5)
	ch := make(chan streamMsg, 64)
	f, last, err := r.follow(ctx, "F", ch)
	if err != nil {
		t.Fatal(err)
	}
	if last != 5 {
		t.Fatalf("follow says the stream ends at %d, want 5", last)
	}
	var applied []uint64 // what the loop applies, as applyFeed does
	applyUntil := func(want uint64) {
		t.Helper()
		for len(applied) == 0 || applied[len(applied)-1] < want {
			select {
			case m := <-ch:
				if s := seq(m); f.fresh(m, s) {
					applied = append(applied, s)
				}
			case err := <-failed:
				t.Fatalf("the term ended: %v", err)
			case <-ctx.Done():
				t.Fatalf("the loop applied %v, waiting for %d", applied, want)
			}
		}
	}
	applyUntil(5)

	// The consumer goes silent behind the follower's back; the stream takes more.
	f.mu.Lock()
	f.cc.Stop()
	f.mu.Unlock()
	publish(5)
	applyUntil(10)
	if want := []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}; !slices.Equal(applied, want) {
		t.Fatalf("applied %v, want %v", applied, want)
	}
	// A message delivered again (by the stalled consumer, had it woken) is not applied twice.
	if f.fresh(streamMsg{gen: 1}, 7) {
		t.Fatal("sequence 7 applied twice")
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
