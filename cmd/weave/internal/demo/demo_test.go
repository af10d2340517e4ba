package demo

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weavejobs/weave/spreader"
)

// TestMain checks that Run stops everything it started, as cmd/weave's tests did when the demo
// lived there.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestRunMeasures checks the measurements themselves, with round-robin and a cap per site.
// No page fails: retried jobs are released ahead of the scheduler, outside the cap.
func TestRunMeasures(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o := Options{Jobs: 300, Sites: 20, Workers: 2, Concurrency: 3, Seed: 5, Policy: spreader.RoundRobin, MaxPerSite: 2, Namespace: "capped"}
	res, err := Run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if p := res.Problems(); len(p) > 0 {
		t.Fatal(p)
	}
	if res.Weave.Done != 300 || res.Weave.Attempts != 300 || res.Weave.Retries != 0 {
		t.Fatalf("tracker: %+v", res.Weave)
	}
	for rank, s := range res.Weave.Sites {
		if s.Peak < 1 || s.Peak > o.MaxPerSite {
			t.Errorf("site %d: peak %d with --max-per-site %d", rank, s.Peak, o.MaxPerSite)
		}
	}
	if res.Status == nil || res.Status.Totals.Admitted != 300 {
		t.Errorf("coordinator status: %+v", res.Status)
	}
	if res.FIFO.Sites[0].Peak != 6 {
		t.Errorf("FIFO peak of the largest site %d, want all 6 slots", res.FIFO.Sites[0].Peak)
	}
}
