package engine

import (
	"slices"
	"testing"
	"time"

	"github.com/weavejobs/weave/internal/wire"
)

// TestTakeEffectsHandsValues: what the run gets from TakeEffects names everything by value (a
// release's pool key, job IDs, attempts, the group's token and incarnation; a write's group,
// incarnation, outcomes and summary; an abandon's group and count), in the order the run carries
// it out, and leaves nothing behind for the next call. GroupStored then retains and forgets the
// group.
func TestTakeEffectsHandsValues(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{AbandonAfter: time.Minute})
	te.worker("w", 4)
	open := te.control(wire.GroupControl{Group: "g", Op: wire.OpOpen, Reply: "r1"})
	a, b := te.job(wire.JobMeta{Group: "g"}), te.job(wire.JobMeta{Group: "g"})
	seal := te.control(wire.GroupControl{Group: "g", Op: wire.OpSeal, Count: 2})

	te.e.ReleaseAll()
	out := te.e.TakeEffects(te.now)
	if len(out.Releases) != 1 || out.Releases[0].Pool != "any" {
		t.Fatalf("releases %+v, want one batch for pool any", out.Releases)
	}
	var ids []uint64
	for _, j := range out.Releases[0].Jobs {
		if j.Attempt != 1 || j.Rel != 0 || j.OpenSeq != open || j.Tok != wire.GroupToken("g") || j.After != "" {
			t.Fatalf("released job %+v, want attempt 1 of incarnation %d, group token %s", j, open, wire.GroupToken("g"))
		}
		ids = append(ids, j.ID)
	}
	if !slices.Equal(ids, []uint64{a, b}) {
		t.Fatalf("released %v, want %v", ids, []uint64{a, b})
	}
	if again := te.e.TakeEffects(te.now); !again.Empty() {
		t.Fatalf("effects taken twice: %+v", again)
	}

	for _, id := range ids {
		te.evSeq++
		te.e.Report("any", "w", te.evSeq, proven(te.e, "any", 0, wire.Report{ID: id, Attempt: 1, Status: wire.StatusOK}), te.now)
		te.e.NoteEvent(te.evSeq)
	}
	out = te.e.TakeEffects(te.now)
	if len(out.Writes) != 1 {
		t.Fatalf("writes %+v, want the complete group's summary with its outcomes", out.Writes)
	}
	w := out.Writes[0]
	if w.Group != "g" || w.OpenSeq != open || w.Reply != "r1" || w.Summary == nil || w.Summary.Done != 2 ||
		len(w.Outcomes) != 2 || len(w.EvSeqs) != 2 || !w.Purge || w.LastSeq != seal || w.Single || w.Complete {
		t.Fatalf("summary write %+v", w)
	}

	te.e.GroupStored(open, 7, w.EvSeqs, te.now)
	if groups, inFlight := te.e.Size(); groups != 0 || inFlight != 0 {
		t.Fatalf("after its summary was stored: %d groups, %d jobs in flight tracked", groups, inFlight)
	}
	if rt := &te.e.retention.retained; rt.len() != 1 || rt.at(rt.first).summarySeq != 7 {
		t.Fatalf("retained %+v, want the group with summary 7", rt.chunks[0][:rt.len()])
	}

	// An unsealed group whose producer went silent: the run is asked for its seal, by value.
	te.open("quiet")
	te.job(wire.JobMeta{Group: "quiet"})
	te.now = te.now.Add(2 * time.Minute)
	te.e.Tick(te.now)
	out = te.e.TakeEffects(te.now)
	if len(out.Abandons) != 1 || out.Abandons[0] != (Abandon{Group: "quiet", Tok: wire.GroupToken("quiet"), Count: 1}) {
		t.Fatalf("abandons %+v, want quiet with its 1 job", out.Abandons)
	}
}
