package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/weavejobs/weave/internal/leakcheck"
	"github.com/weavejobs/weave/internal/testwait"
	"github.com/weavejobs/weave/spreader"
)

// TestMain checks that Run stops everything it started, as cmd/weave's tests did when the demo
// lived there.
func TestMain(m *testing.M) {
	leakcheck.Main(m)
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

// TestRunPoliteness: each site's limit holds, as the handlers see it: at most SiteConcurrency
// fetches at once and SiteRate starts within any second, with the slack of MostStartsPerSecond.
func TestRunPoliteness(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o := Options{Jobs: 400, Sites: 10, Workers: 2, Concurrency: 4, Seed: 7, Policy: spreader.LeastInFlight, SiteConcurrency: 2, SiteRate: 100, Namespace: "polite"}
	res, err := Run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if p := res.Problems(); len(p) > 0 {
		t.Fatal(p)
	}
	for rank, s := range res.Weave.Sites {
		if s.Peak > o.SiteConcurrency {
			t.Errorf("site %d: %d fetches at once, limit %d", rank, s.Peak, o.SiteConcurrency)
		}
	}
	if res.Weave.MostPerSecond > MostStartsPerSecond(o.SiteRate) || res.Weave.MostPerSecond < o.SiteRate/2 {
		t.Errorf("most fetches of a site within a second: %d, limit %d/s (and the largest site has enough to reach it)", res.Weave.MostPerSecond, o.SiteRate)
	}
}

// TestRunDashboard: with Dashboard set, the crawl runs once a page opened the dashboard's event
// stream (not tested: that it waits for it, which only timing could show), and after the crawl
// the dashboard keeps serving the demo's namespace until ctx ends.
func TestRunDashboard(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	urls := make(chan string, 1)
	crawled := make(chan *Result, 1)
	o := Options{Jobs: 200, Sites: 10, Workers: 2, Concurrency: 2, Seed: 3, Policy: spreader.LeastInFlight, Namespace: "dashdemo",
		Dashboard: "127.0.0.1:0", DashboardOpen: func(url string) { urls <- url }, Crawled: func(r *Result) { crawled <- r }}
	done := make(chan error, 1)
	go func() {
		_, err := Run(ctx, o)
		done <- err
	}()
	var base string
	select {
	case base = <-urls:
	case err := <-done:
		t.Fatalf("Run ended before serving the dashboard: %v", err)
	}
	// Open the event stream, as a page does: the crawl starts.
	resp, err := http.Get(base + "api/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var res *Result
	select {
	case res = <-crawled:
	case err := <-done:
		t.Fatalf("Run ended without the crawl: %v", err)
	}
	if res.Summary.Jobs != 200 || res.Weave.Done != 200 {
		t.Fatalf("crawl: %+v, tracker %+v", res.Summary, res.Weave.Done)
	}
	// The dashboard still serves: the coordinator admitted every page.
	testwait.Seen(t, 30*time.Second, "the dashboard to show every page admitted", func() (bool, string) {
		var snap struct {
			Status *struct {
				Totals struct{ Admitted int } `json:"totals"`
			} `json:"status"`
		}
		r, err := http.Get(base + "api/snapshot")
		if err != nil {
			return false, err.Error()
		}
		defer r.Body.Close()
		if err := json.NewDecoder(r.Body).Decode(&snap); err != nil {
			return false, err.Error()
		}
		return snap.Status != nil && snap.Status.Totals.Admitted == 200, fmt.Sprintf("status %+v", snap.Status)
	})
	select {
	case err := <-done:
		t.Fatalf("Run ended before ctx: %v", err)
	default:
	}
	resp.Body.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
