package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/weavejobs/weave/spreader"
)

// TestDemo runs the demo end to end, in-process, on a small workload.
func TestDemo(t *testing.T) {
	t.Parallel()
	code, out, errOut := runCLI(t, "", "demo", "--jobs", "500", "--sites", "40", "--seed", "3", "--log-level", "warn")
	if code != exitOK {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	for _, want := range []string{
		"jobs        500: 500 done, 0 failed, 0 canceled",
		"0 outside their region",
		"site000.example",
		"30 other sites",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errOut, "crawling   500/500 pages") {
		t.Errorf("progress lacks the final line:\n%s", errOut)
	}
}

// TestRunDemoMeasures checks the measurements themselves, with round-robin and a cap per site.
// No page fails: retried jobs are released ahead of the scheduler, outside the cap.
func TestRunDemoMeasures(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o := demoOptions{Jobs: 300, Sites: 20, Workers: 2, Concurrency: 3, Seed: 5, Policy: spreader.RoundRobin, MaxPerSite: 2, Namespace: "capped"}
	res, err := runDemo(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if p := res.problems(); len(p) > 0 {
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
