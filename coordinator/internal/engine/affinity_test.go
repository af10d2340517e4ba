package engine

import (
	"testing"
	"time"

	"github.com/weavejobs/weave/internal/wire"
)

// TestLearnedAffinity: the pool that ran a job preferring an unheld resource by fallback gets
// the next job preferring it, whichever pool chooses first, while a plain job of another group
// is on offer too; the learning lapses after LearnAffinity.
func TestLearnedAffinity(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{Prefetch: -1, LearnAffinity: time.Minute})
	te.worker("wa", 1, "a")
	te.worker("wb", 1, "b")
	te.open("g")
	te.open("h")
	te.job(wire.JobMeta{Group: "g", Prefer: []string{"site"}})
	var first *job
	for _, js := range te.releases() {
		first = js[0]
	}
	warm := first.pool
	te.report(first, wire.StatusOK, "")
	if _, ok := warm.learned["site"]; !ok {
		t.Fatalf("pool %s ran a job preferring site by fallback and learned %v", warm.key, warm.learned)
	}
	// Twice: the pools take turns to choose first, so without learning one round would fail.
	for round := range 2 {
		te.job(wire.JobMeta{Group: "h"})
		again := te.job(wire.JobMeta{Group: "g", Prefer: []string{"site"}})
		got := te.releases()
		if js := got[warm.key]; len(js) != 1 || js[0].id != again {
			t.Fatalf("round %d: released %v to the warm pool %s, want job %d", round, ids(js), warm.key, again)
		}
		for _, js := range got {
			te.report(js[0], wire.StatusOK, "")
		}
	}
	te.now = te.now.Add(time.Minute + time.Second)
	te.worker("wa", 1, "a")
	te.worker("wb", 1, "b")
	te.e.Tick(te.now)
	if len(warm.learned) != 0 {
		t.Fatalf("pool %s still knows %v after LearnAffinity", warm.key, warm.learned)
	}
}

// TestLearnedAffinityOff: with LearnAffinity negative no pool learns anything.
func TestLearnedAffinityOff(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{LearnAffinity: -1})
	te.worker("wa", 1, "a")
	te.open("g")
	te.job(wire.JobMeta{Group: "g", Prefer: []string{"site"}})
	for _, js := range te.releases() {
		if len(js[0].pool.learned) != 0 {
			t.Fatalf("learned %v with learning off", js[0].pool.learned)
		}
	}
}
