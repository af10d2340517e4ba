package dispatcher

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/weavejobs/weave/integration/jstest"
	"github.com/weavejobs/weave/internal/wire"
)

// TestSummaryThatWentByJustBefore: a summary the shared subscription delivered before a waiter
// registered (the server had not stored it yet, so the waiter's read could not find it) reaches
// a WaitSummary registered after it, if it is of its incarnation, and makes a follower read again
// soon; an outcome batch makes a WaitJob read again soon; the subscription remembers at most
// recentGroups groups.
func TestSummaryThatWentByJustBefore(t *testing.T) {
	t.Parallel()
	srv := jstest.New(t)
	nc := jstest.NewConn(t, srv.ClientURL())
	d, err := New(nc, Config{Namespace: "recent"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	summary := func(gtok string, incarnation uint64, done int) *nats.Msg {
		m := nats.NewMsg(d.names.OutcomeSubject(gtok))
		m.Header.Set(wire.HdrGroupSeq, fmt.Sprint(incarnation))
		m.Data = wire.AppendSummary(nil, wire.GroupSummary{Jobs: uint64(done), Done: uint64(done)})
		return m
	}
	// Start the subscription, then deliver a summary nobody waits for yet.
	if ok, _, err := d.watchGroup("other", true, make(chan struct{}, 1)); !ok || err != nil {
		t.Fatal(ok, err)
	}
	d.routeOutcomes(summary("g", 7, 3))

	w, err := d.watchSummary("g", true, 7)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-w.ch:
		if n.err != nil || n.sum.Done != 3 {
			t.Fatalf("note %+v, want the summary with 3 done", n)
		}
	default:
		t.Fatal("a waiter registered just after its summary went by was not told of it")
	}
	if w2, _ := d.watchSummary("g", true, 8); len(w2.ch) != 0 {
		t.Fatal("a waiter of another incarnation was told of incarnation 7's summary")
	}
	if _, recent, _ := d.watchGroup("g", true, make(chan struct{}, 1)); !recent {
		t.Fatal("a follower registered just after its group's summary went by was not told to read again soon")
	}
	if _, recent, _ := d.watchGroup("quiet", true, make(chan struct{}, 1)); recent {
		t.Fatal("a follower of a group without a recent summary was told to hurry")
	}

	// An outcome batch makes a job waiter registering just after it read again soon, and does
	// not replace a summary remembered for the group.
	batch := nats.NewMsg(d.names.OutcomeSubject("b"))
	batch.Data = wire.AppendOutcomes(nil, []wire.Outcome{{ID: 5, State: wire.FinalDone}})
	d.routeOutcomes(batch)
	if _, hurry, _, _ := d.watchJob("b", true, &jobWaiter{id: 5, ch: make(chan jobNote, 1)}, outcomeMark{}); !hurry {
		t.Fatal("a job waiter registered just after an outcome batch of its group went by was not told to read again soon")
	}
	if _, hurry, _, _ := d.watchJob("quiet", true, &jobWaiter{id: 5, ch: make(chan jobNote, 1)}, outcomeMark{}); hurry {
		t.Fatal("a job waiter of a quiet group was told to hurry")
	}
	gb := nats.NewMsg(d.names.OutcomeSubject("g"))
	gb.Data = batch.Data
	d.routeOutcomes(gb)
	if w3, _ := d.watchSummary("g", true, 7); len(w3.ch) != 1 {
		t.Fatal("an outcome batch after the summary made the subscription forget the summary")
	}

	// Quiet since a mark: nothing of the group delivered after it, nothing dropped after it.
	mark := d.outcomeMark()
	if mark.at.IsZero() {
		t.Fatal("no mark with the subscription live")
	}
	quiet := func(gtok string, mark outcomeMark) bool {
		_, _, q, _ := d.watchJob(gtok, true, &jobWaiter{id: 5, ch: make(chan jobNote, 1)}, mark)
		return q
	}
	switch {
	case !quiet("s", mark):
		t.Fatal("a group nothing was delivered of since the mark is not quiet")
	case !quiet("b", mark):
		t.Fatal("a group last delivered before the mark is not quiet")
	case quiet("s", outcomeMark{}):
		t.Fatal("a zero mark is quiet")
	case quiet("s", outcomeMark{at: mark.at, reconnects: mark.reconnects + 1}):
		t.Fatal("quiet across a reconnect (messages published while disconnected are lost)")
	}
	d.routeOutcomes(batch)
	if quiet("b", mark) {
		t.Fatal("a group delivered after the mark is quiet")
	}

	// Bounded: the oldest is forgotten first.
	for i := range recentGroups {
		d.routeOutcomes(summary(fmt.Sprint("x", i), 1, 1))
	}
	d.sumMu.Lock()
	_, kept := d.recent["g"]
	n := len(d.recent)
	d.sumMu.Unlock()
	if kept || n != recentGroups {
		t.Fatalf("after %d more summaries: g kept %v, %d remembered; want g forgotten and %d", recentGroups, kept, n, recentGroups)
	}
	// Groups delivered after the mark were forgotten: no group is quiet since it any more.
	if quiet("s", mark) {
		t.Fatal("quiet since a mark although groups delivered after it were forgotten")
	}
}
