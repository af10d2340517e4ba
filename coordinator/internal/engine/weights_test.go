package engine

import (
	"testing"

	"github.com/weavejobs/weave/internal/wire"
	"github.com/weavejobs/weave/spreader"
)

// TestWeightScalesTheShare: under least in-flight, groups of weights 3 and 1 with work for all
// slots hold 3/4 and 1/4 of them, and keep those shares as jobs finish and slots are refilled.
func TestWeightScalesTheShare(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{Policy: spreader.LeastInFlight, Prefetch: -1})
	te.control(wire.GroupControl{Group: "heavy", Op: wire.OpOpen, Weight: 3})
	te.open("light")
	for range 200 {
		te.job(wire.JobMeta{Group: "heavy"})
		te.job(wire.JobMeta{Group: "light"})
	}
	te.worker("w", 8)
	running := map[string][]*job{}
	for round := range 50 {
		for _, j := range te.releases()["any"] {
			running[j.g.id] = append(running[j.g.id], j)
		}
		if h, l := len(running["heavy"]), len(running["light"]); h != 6 || l != 2 {
			t.Fatalf("round %d: heavy runs %d and light %d of 8 slots, want 6 and 2", round, h, l)
		}
		// The oldest job of each group in turn finishes.
		g := []string{"heavy", "light"}[round%2]
		te.report(running[g][0], wire.StatusOK, "")
		running[g] = running[g][1:]
	}
}
