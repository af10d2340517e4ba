package coordinator

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weavejobs/weave/coordinator/internal/engine"
	"github.com/weavejobs/weave/internal/journal"
	"github.com/weavejobs/weave/internal/wire"
)

// TestOutcomesFitting: an outcome message holds at most maxOutcomesPerMsg outcomes and, past
// its first, none that would take it over the server's max payload; a complete group's last
// outcomes that do not fit in one message are written before its summary.
func TestOutcomesFitting(t *testing.T) {
	t.Parallel()
	r := &run{msgBytes: 1 << 20}
	outs := func(n, size int) []wire.Outcome {
		o := make([]wire.Outcome, n)
		for i := range o {
			o[i] = wire.Outcome{ID: uint64(i + 1), Key: "k", State: wire.FinalDone, Attempts: 1, Data: make([]byte, size)}
		}
		return o
	}
	for _, c := range []struct{ n, size, want int }{
		{300, 10, maxOutcomesPerMsg},
		{64, 60 << 10, 17},
		{3, 2 << 20, 1}, // larger than a message: alone (a worker's MaxResultSize prevents it)
		{1, 10, 1},
	} {
		got := r.outcomesFitting(outs(c.n, c.size))
		if got != c.want {
			t.Errorf("%d outcomes of %d bytes: %d fit, want %d", c.n, c.size, got, c.want)
		}
		if o := outs(c.n, c.size)[:got]; got > 1 && len(wire.AppendLast(nil, o, wire.GroupSummary{Jobs: uint64(got), Done: uint64(got)})) > r.msgBytes {
			t.Errorf("%d outcomes of %d bytes: the message is over %d bytes", got, c.size, r.msgBytes)
		}
	}

	// A complete group's last outcomes: with its summary when they fit, before it when not.
	r.writeQ = make(chan writeOp, 16)
	sum := &wire.GroupSummary{Jobs: 8, Done: 8}
	for _, c := range []struct {
		n, size int
		want    string
	}{
		{1, 10, "outcomes+summary"},
		{maxOutcomesPerMsg + 1, 10, "outcomes summary"},
		{8, 150 << 10, "outcomes summary"}, // 1.2 MB in all
	} {
		r.writeOutcomes(context.Background(), []engine.Write{{Group: "g", Tok: "g", OpenSeq: 1, Outcomes: outs(c.n, c.size), EvSeqs: make([]uint64, c.n), Summary: sum}})
		var got []string
		for len(r.writeQ) > 0 {
			op := <-r.writeQ
			switch {
			case op.Summary != nil && len(op.Outcomes) == c.n:
				got = append(got, "outcomes+summary")
			case op.Summary != nil && op.Outcomes == nil:
				got = append(got, "summary")
			case op.Summary == nil && len(op.Outcomes) == c.n:
				got = append(got, "outcomes")
			default:
				got = append(got, fmt.Sprintf("%d outcomes, summary %v", len(op.Outcomes), op.Summary != nil))
			}
		}
		if strings.Join(got, " ") != c.want {
			t.Errorf("%d outcomes of %d bytes with the summary: writes %q, want %q", c.n, c.size, got, c.want)
		}
	}
}

// TestJournalRecordsFit: retry decisions too many for one message go in several journal
// records, each within the server's max payload, in order.
func TestJournalRecordsFit(t *testing.T) {
	t.Parallel()
	names, _ := wire.NewNames("weave")
	e, err := engine.New(engine.Config{}, names, 1)
	if err != nil {
		t.Fatal(err)
	}
	r := &run{e: e, msgBytes: 1 << 20, writeQ: make(chan writeOp, 16)}
	entries := make([]journal.Entry, 100_000)
	for i := range entries {
		entries[i] = journal.Entry{ID: 1<<52 + uint64(i), Attempt: 1 << 20, At: time.Now().Add(time.Hour)}
	}
	r.writeJournal(context.Background(), journal.KindRetry, entries)
	next := uint64(1 << 52)
	records := 0
	for len(r.writeQ) > 0 {
		op := <-r.writeQ
		records++
		if n := len(journal.Append(nil, *op.journal)); n > r.msgBytes {
			t.Fatalf("record %d is %d bytes, over %d", records, n, r.msgBytes)
		}
		for _, e := range op.journal.Entries {
			if e.ID != next {
				t.Fatalf("entry %d where %d was next", e.ID, next)
			}
			next++
		}
	}
	if records < 2 || next != 1<<52+100_000 {
		t.Fatalf("%d records, up to entry %d", records, next)
	}
}
