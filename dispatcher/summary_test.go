package dispatcher_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/integration/jstest"
	"github.com/weavejobs/weave/internal/wire"
)

// waiting counts the WaitSummary calls of e's dispatcher that wait on the shared subscription.
type waiting struct {
	mu   sync.Mutex
	n    int
	ch   chan struct{} // closed when n reaches want
	want int
}

// expectWaiting installs a hook on e's dispatcher; the channel it returns is closed once want
// WaitSummary calls wait for a summary not stored yet.
func expectWaiting(e *env, want int) <-chan struct{} {
	w := &waiting{ch: make(chan struct{}), want: want}
	dispatcher.SetWaitHook(e.d, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.n++; w.n == w.want {
			close(w.ch)
		}
	})
	return w.ch
}

func awaitSignal(ctx context.Context, t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-ctx.Done():
		t.Fatalf("%s: %v", what, ctx.Err())
	}
}

type sumAnswer struct {
	sum dispatcher.Summary
	err error
}

func waitSummaryAsync(ctx context.Context, h *dispatcher.Handle) <-chan sumAnswer {
	ch := make(chan sumAnswer, 1)
	go func() {
		sum, err := h.WaitSummary(ctx)
		ch <- sumAnswer{sum, err}
	}()
	return ch
}

// TestWaitSummaryOfFinishedGroupCreatesNoConsumer watches the JetStream consumer API while
// WaitSummary reads a finished group's summary: no consumer is created, none is left.
func TestWaitSummaryOfFinishedGroupCreatesNoConsumer(t *testing.T) {
	t.Parallel()
	e := setup(t, dispatcher.Config{})
	t.Cleanup(e.d.Close)
	ctx := testContext(t)
	h := e.publishABC(ctx, t, "g")
	want := e.finishABC(ctx, t, h)

	// A sniffer sees every consumer API request; a marker published on the dispatcher's
	// connection after WaitSummary arrives after any request WaitSummary made.
	sniffer := jstest.NewConn(t, e.srv.ClientURL())
	seen := make(chan *nats.Msg, 64)
	for _, subj := range []string{"$JS.API.CONSUMER.>", "marker"} {
		if _, err := sniffer.ChanSubscribe(subj, seen); err != nil {
			t.Fatal(err)
		}
	}
	if err := sniffer.FlushWithContext(ctx); err != nil {
		t.Fatal(err)
	}

	for _, h := range []*dispatcher.Handle{h, e.d.Attach("g")} {
		sum, err := h.WaitSummary(ctx)
		if err != nil || sum != want.Summary {
			t.Fatalf("WaitSummary = %+v, %v; want %+v", sum, err, want.Summary)
		}
	}
	if err := e.nc.Publish("marker", nil); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-seen:
		if m.Subject != "marker" {
			t.Fatalf("WaitSummary of a finished group made a consumer request on %s", m.Subject)
		}
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	if n := e.resultsConsumers(ctx, t); n != 0 {
		t.Fatalf("RESULTS has %d consumers", n)
	}
}

// TestWaitSummaryOfRunningGroup waits for a summary written after WaitSummary started, with no
// consumer while it waits; a summary of another group does not end the wait.
func TestWaitSummaryOfRunningGroup(t *testing.T) {
	t.Parallel()
	e := setup(t, dispatcher.Config{})
	t.Cleanup(e.d.Close)
	ctx := testContext(t)
	started := expectWaiting(e, 1)
	e.record(ctx, t, "running", outcomes(wire.Outcome{ID: 1, State: wire.FinalDone}))

	done := waitSummaryAsync(ctx, e.d.Attach("running"))
	awaitSignal(ctx, t, "WaitSummary did not wait", started)
	if n := e.resultsConsumers(ctx, t); n != 0 {
		t.Fatalf("RESULTS has %d consumers while WaitSummary waits", n)
	}
	e.record(ctx, t, "other", summary(9, 9, 0, 0))
	e.record(ctx, t, "running", outcomes(wire.Outcome{ID: 2, State: wire.FinalFailed}), summary(2, 1, 1, 0))
	if a := receive(ctx, t, "WaitSummary", done); a.err != nil || a.sum != (dispatcher.Summary{Jobs: 2, Done: 1, Failed: 1}) {
		t.Fatalf("WaitSummary = %+v, %v", a.sum, a.err)
	}
}

// TestWaitSummaryReadsItsIncarnation publishes a group ID twice: a Handle from Publish ends at
// its own incarnation's summary, whether it waits for it or finds it stored; one from Attach at
// the first summary written while it waits, or the last one stored.
func TestWaitSummaryReadsItsIncarnation(t *testing.T) {
	t.Parallel()
	e := setup(t, dispatcher.Config{})
	dispatcher.SkipRunningCheck(e.d) // stands in for a coordinator that accepted the group again
	t.Cleanup(e.d.Close)
	ctx := testContext(t)
	started := expectWaiting(e, 3)
	first, err := e.d.Publish(ctx, "twice", slices.Values([]dispatcher.Job{{Key: "x"}}))
	if err != nil {
		t.Fatal(err)
	}
	second, err := e.d.Publish(ctx, "twice", slices.Values([]dispatcher.Job{{Key: "y"}}))
	if err != nil {
		t.Fatal(err)
	}
	opens := e.openSeqs(ctx, t, "twice")
	if len(opens) != 2 {
		t.Fatalf("open sequences %v, want 2", opens)
	}
	firstDone := waitSummaryAsync(ctx, first)
	secondDone := waitSummaryAsync(ctx, second)
	attachDone := waitSummaryAsync(ctx, e.d.Attach("twice"))
	awaitSignal(ctx, t, "WaitSummary did not wait", started)

	oldSum := dispatcher.Summary{Jobs: 1, Failed: 1}
	newSum := dispatcher.Summary{Jobs: 1, Done: 1}
	e.recordIncarnation(ctx, t, "twice", opens[0], summary(1, 0, 1, 0))
	e.recordIncarnation(ctx, t, "twice", opens[1], summary(1, 1, 0, 0))
	for _, c := range []struct {
		what string
		ch   <-chan sumAnswer
		want dispatcher.Summary
	}{{"first", firstDone, oldSum}, {"second", secondDone, newSum}, {"attached", attachDone, oldSum}} {
		if a := receive(ctx, t, c.what, c.ch); a.err != nil || a.sum != c.want {
			t.Fatalf("%s WaitSummary = %+v, %v; want %+v", c.what, a.sum, a.err, c.want)
		}
	}

	// Stored now: the last summary is the second incarnation's.
	for _, h := range []*dispatcher.Handle{second, e.d.Attach("twice")} {
		if sum, err := h.WaitSummary(ctx); err != nil || sum != newSum {
			t.Fatalf("WaitSummary = %+v, %v; want %+v", sum, err, newSum)
		}
	}
	if n := e.resultsConsumers(ctx, t); n != 0 {
		t.Fatalf("RESULTS has %d consumers", n)
	}
}

// TestWaitSummaryManyWaiters has more WaitSummary calls wait at once than a stream allows
// consumers (1,000), on groups another producer opened: past maxGroupSubs they share one
// subscription to every outcome, and each returns its own group's summary.
func TestWaitSummaryManyWaiters(t *testing.T) {
	t.Parallel()
	const n = 2000
	e := setup(t, dispatcher.Config{})
	t.Cleanup(e.d.Close)
	ctx := testContext(t)
	started := expectWaiting(e, n)
	base := e.nc.NumSubscriptions()

	answers := make([]<-chan sumAnswer, n)
	for i := range n {
		answers[i] = waitSummaryAsync(ctx, e.d.Attach(fmt.Sprintf("many-%d", i)))
	}
	awaitSignal(ctx, t, "WaitSummary calls did not all wait", started)
	if c := e.resultsConsumers(ctx, t); c != 0 {
		t.Fatalf("RESULTS has %d consumers while %d WaitSummary calls wait", c, n)
	}
	// The reply token's subscription, the one to every outcome, and the request mux's.
	if subs := e.nc.NumSubscriptions(); subs > base+3 {
		t.Fatalf("%d subscriptions while %d WaitSummary calls wait, %d before", subs, n, base)
	}

	futures := make([]jetstream.PubAckFuture, 0, n)
	for i := range n {
		f, err := e.js.PublishAsync(e.names.OutcomeSubject(wire.GroupToken(fmt.Sprintf("many-%d", i))), summary(uint64(i), uint64(i), 0, 0))
		if err != nil {
			t.Fatal(err)
		}
		futures = append(futures, f)
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			t.Fatal(err)
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
	for i, ch := range answers {
		a := receive(ctx, t, fmt.Sprintf("WaitSummary of group %d", i), ch)
		if want := (dispatcher.Summary{Jobs: i, Done: i}); a.err != nil || a.sum != want {
			t.Fatalf("WaitSummary of group %d = %+v, %v; want %+v", i, a.sum, a.err, want)
		}
	}
}

// TestCloseStopsSharedSubscription checks that Close ends the shared subscription, may be called
// again, and leaves WaitSummary working (with a consumer of its own), for a call waiting at the
// time of Close as for a later one.
func TestCloseStopsSharedSubscription(t *testing.T) {
	t.Parallel()
	e := setup(t, dispatcher.Config{})
	ctx := testContext(t)
	started := expectWaiting(e, 1)
	base := e.nc.NumSubscriptions()

	done := waitSummaryAsync(ctx, e.d.Attach("late"))
	awaitSignal(ctx, t, "WaitSummary did not wait", started)
	during := e.nc.NumSubscriptions()
	if during <= base {
		t.Fatalf("%d subscriptions while WaitSummary waits, %d before", during, base)
	}
	e.d.Close()
	e.d.Close()
	// The waiting call now waits with a consumer, which starts at the subject's last message:
	// the summary reaches it whether it is written before the consumer exists or after.
	if subs := e.nc.NumSubscriptions(); subs >= during {
		t.Fatalf("%d subscriptions after Close, %d before", subs, during)
	}
	e.record(ctx, t, "late", summary(1, 1, 0, 0))
	if a := receive(ctx, t, "WaitSummary", done); a.err != nil || a.sum != (dispatcher.Summary{Jobs: 1, Done: 1}) {
		t.Fatalf("WaitSummary = %+v, %v", a.sum, a.err)
	}
	if sum, err := e.d.Attach("late").WaitSummary(ctx); err != nil || sum != (dispatcher.Summary{Jobs: 1, Done: 1}) {
		t.Fatalf("WaitSummary after Close = %+v, %v", sum, err)
	}
	e.d.Close()
}
