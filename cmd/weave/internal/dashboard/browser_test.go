package dashboard_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/weavejobs/weave/cmd/weave/internal/dashboard"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/internal/testwait"
)

var updateScreenshots = flag.Bool("update-screenshots", false, "write the browser test's screenshots of each view to docs/")

// chromiumEnv names a Chromium (or Chrome) binary for the browser test, overriding the search.
const chromiumEnv = "WEAVE_CHROMIUM"

// chromium finds a browser, or skips the test saying how to get one.
func chromium(t *testing.T) string {
	if p := os.Getenv(chromiumEnv); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skipf("no browser found (looked for chromium, chromium-browser, google-chrome on $PATH): install Debian's chromium package (.ci/run does), or set $%s", chromiumEnv)
	return ""
}

// browser starts a headless Chromium for the test and returns a context of one tab in it.
func browser(t *testing.T) context.Context {
	opts := append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]),
		chromedp.ExecPath(chromium(t)),
		chromedp.WindowSize(1360, 900),
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run as root with its sandbox
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	tab, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(cancelTab)
	// The first call starts the browser, for as long as its context lives: no deadline on it.
	if err := chromedp.Do(tab); err != nil {
		t.Fatalf("start %s: %v", chromium(t), err)
	}
	// Every wait in the page has this deadline.
	ctx, cancel := context.WithTimeout(tab, 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func run(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// poll waits until the JavaScript expression is true in the page.
func poll(expr string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(30*time.Second))
}

// screenshot saves the page as docs/dashboard-<name>.png with -update-screenshots.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	if !*updateScreenshots {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join("..", "..", "..", "..", "docs", "dashboard-"+name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", path)
}

// TestDashboardInBrowser opens the dashboard in headless Chromium, with the observer's
// permissions: the counts it shows are the coordinator's, a group's progress bar advances as its
// jobs end, a failed job's attempts are listed, lookup finds a job; then a dashboard with actions
// on refuses a retry without the token and does it with the token. Views are switched with the
// keyboard. With -update-screenshots it writes a screenshot of each view to docs/.
func TestDashboardInBrowser(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	e := newEnv(t)
	failed := e.standardGroups(6) // 4 of the gated group's 6 jobs run, held; 2 pending
	base, _, errs := e.dashboardAs("observer", dashboard.Config{})

	// Overview: the counts shown are the coordinator's. The gated jobs are held, but the
	// coordinator may still forget an ended group meanwhile: compare with a fresh status until
	// the page shows exactly what it says.
	run(t, ctx, "open the overview", chromedp.Navigate(base), chromedp.WaitVisible(`#count-pending`))
	testwait.Seen(t, 30*time.Second, "the overview to show the coordinator's counts", func() (bool, string) {
		st, err := e.dep.Status()
		if err != nil {
			t.Fatal(err)
		}
		var conds []string
		for state, n := range st.Jobs {
			conds = append(conds, fmt.Sprintf("count(%q) === %d", state, n))
		}
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err = chromedp.Do(pctx, poll(`(() => {
			const count = (s) => { const el = document.getElementById('count-' + s); return el ? Number(el.textContent.replaceAll(',', '')) : -1; };
			return `+strings.Join(conds, " && ")+`; })()`))
		cancel()
		if err == nil {
			return true, ""
		}
		shown, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('state-cards').textContent`))
		return false, fmt.Sprintf("the overview shows %q, the coordinator %v", shown, st.Jobs)
	})
	run(t, ctx, "the overview draws rates and charts",
		// Rates need two samples of the same coordinator.
		poll(`document.getElementById('rate-in').textContent !== '–'`),
		poll(`document.querySelector('#chart-states path.line') !== null`),
	)

	// Groups, with key 2: the gated group's progress advances when one of its jobs ends.
	ended := func(n int) chromedp.Action[chromedp.Void] {
		return poll(fmt.Sprintf(`(() => { const c = document.querySelector('tr[data-group=%q] td[data-ended]');
			return c !== null && c.dataset.ended === '%d' && c.dataset.total === '6' &&
				(%d === 0 || document.querySelector('tr[data-group=%q] .seg.done').style.width === '%.2f%%'); })()`, gated, n, n, gated, 100*float64(n)/6))
	}
	// Two schedules, neither firing during the test: one yearly, one paused.
	for _, sc := range []dispatcher.Schedule{
		{Name: "yearly", Cron: "@yearly", Jobs: []dispatcher.Job{{Key: "report"}}},
		{Name: "poll", Every: time.Hour, Group: "poller", Jobs: []dispatcher.Job{{Key: "a"}, {Key: "b"}}},
	} {
		if err := e.d.AddSchedule(t.Context(), sc); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.d.PauseSchedule(t.Context(), "poll"); err != nil {
		t.Fatal(err)
	}
	// A group that runs after the gated one: it waits, and the chain shows on both rows.
	if _, err := e.d.Publish(t.Context(), "index", slices.Values(jobsOf("index", []string{"ok"})),
		dispatcher.After(dispatcher.Dependency{Group: gated})); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, "the groups view shows the gated group, nothing ended",
		chromedp.KeyEvent("2"),
		poll(`(() => { const w = document.querySelector('tr[data-group="index"] [data-chain="waits"]'),
			f = document.querySelector('tr[data-group="`+gated+`"] [data-chain="then"]');
			return w !== null && w.textContent === 'waits for `+gated+` (success, incarnation ' + w.textContent.split('incarnation ')[1] &&
				f !== null && f.textContent === '→ index'; })()`),
		// The filter of groups waiting for others shows it alone.
		poll(`(() => { const s = document.getElementById('group-state'); s.value = 'waiting'; s.dispatchEvent(new Event('change'));
			const rows = document.querySelectorAll('#groups-table tr[data-group]');
			return rows.length === 1 && rows[0].dataset.group === 'index'; })()`),
		poll(`(() => { const s = document.getElementById('group-state'); s.value = ''; s.dispatchEvent(new Event('change'));
			return document.querySelectorAll('#groups-table tr[data-group]').length > 1; })()`),
		// The schedules, the paused one flagged.
		poll(`(() => { const y = document.querySelector('tr[data-schedule="yearly"]'), p = document.querySelector('tr[data-schedule="poll"]');
			return y !== null && y.textContent.includes('@yearly') && y.querySelector('.flag') === null &&
				p !== null && p.textContent.includes('poller@…') && p.textContent.includes('every 1h0m0s') && p.querySelector('.flag').textContent === 'paused'; })()`),
		chromedp.WaitVisible(`#view-groups tr[data-group="`+gated+`"]`),
		ended(0),
		// The groups that ended, with their outcome.
		chromedp.WaitVisible(`#ended-table tr[data-ended="site-bad"]`),
		poll(`document.querySelector('tr[data-ended="site-bad"] .seg.failed').dataset.value === '1'`),
	)
	e.release()
	run(t, ctx, "the progress bar advances to 1 of 6", ended(1))
	e.release()
	run(t, ctx, "the progress bar advances to 2 of 6", ended(2),
		// The only group in flight holds all of the fleet's jobs in flight.
		poll(`document.querySelector('#legend-shares').textContent.includes('`+gated+` 4 (100%)')`))

	// Resources, limits and pools, with key 3. A limit on a resource no job names, paused, as an
	// operator sets them.
	op, err := e.dep.Dispatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	if err := op.SetLimit(t.Context(), dispatcher.Limit{Kind: dispatcher.LimitResource, Name: "payments", Concurrency: 2, Rate: 5, Per: time.Second}); err != nil {
		t.Fatal(err)
	}
	if err := op.Pause(t.Context(), dispatcher.LimitResource, "payments"); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, "resources view",
		chromedp.KeyEvent("3"),
		chromedp.WaitVisible(`#view-resources tr[data-resource="eu"]`),
		poll(`(() => { const r = document.querySelector('tr[data-limit="resource/payments"]');
			return r !== null && r.querySelector('.flag') !== null && r.textContent.includes('paused, 2 at once, 5 per 1s (burst 1)'); })()`),
		poll(`document.querySelector('tr[data-resource="eu"]').textContent.includes('worker-eu')`),
		poll(`document.querySelectorAll('#workers-table tr[data-worker]').length === 2`),
		poll(`document.querySelector('tr[data-resource="gpu"]').textContent.includes('1 wait: no live holder')`),
	)

	// Failed jobs, with key 4: the failed job's three attempts, with worker and error.
	job := fmt.Sprintf(`details[data-job="%d"]`, failed.ID)
	run(t, ctx, "failed view shows the job's attempts",
		chromedp.KeyEvent("4"),
		chromedp.WaitVisible(job+" summary"),
		chromedp.Click(job+" summary"),
		chromedp.WaitVisible(job+` tr[data-attempt="3"]`),
	)
	attempts, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('`+job+` tr[data-attempt]')].map((r) => r.textContent)`))
	if err != nil {
		t.Fatal(err)
	}
	if len(attempts) != 3 {
		t.Fatalf("attempts shown: %q", attempts)
	}
	for i, a := range attempts {
		h := failed.History[i]
		if !strings.Contains(a, h.Worker) || !strings.Contains(a, h.Err) || !strings.Contains(a, fmt.Sprintf("(attempt %d)", i+1)) {
			t.Errorf("attempt %d shown as %q, want worker %s and error %q", i+1, a, h.Worker, h.Err)
		}
	}

	// Job lookup, with key 5, by group and key.
	run(t, ctx, "lookup finds the failed job",
		chromedp.KeyEvent("5"),
		chromedp.WaitVisible(`#lookup-group`),
		chromedp.SendKeys(`#lookup-group`, "site-bad"),
		chromedp.SendKeys(`#lookup-key`, "page-1"+kb.Enter),
		chromedp.WaitVisible(`#lookup-job[data-state="failed"]`),
		poll(`document.querySelector('#lookup-job').textContent.includes('`+fmt.Sprint(failed.ID)+`') && document.querySelectorAll('#lookup-job tr[data-attempt]').length === 3`),
	)
	// A job that has not ended (one of the gated group's, held until released; which ones the
	// two releases let end is up to the workers): the coordinator describes it through the
	// inspection API.
	held := e.heldKey()
	lookupPending := []chromedp.Action[chromedp.Void]{
		chromedp.SetValue(`#lookup-group`, gated),
		chromedp.SetValue(`#lookup-key`, held[:len(held)-1]),
		chromedp.SendKeys(`#lookup-key`, held[len(held)-1:]+kb.Enter),
		poll(`['running', 'pending'].includes(document.querySelector('#lookup-job')?.dataset.state) && document.querySelector('#lookup-job').textContent.includes('Published')`),
	}
	if err := chromedp.Do(ctx, lookupPending...); err != nil {
		out, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('#lookup-result').textContent`))
		t.Fatalf("lookup describes a job that has not ended: %v; the page shows %q", err, out)
	}
	errs.check(t)

	// Actions: a dashboard with actions on (a producer's permissions). Retry without the token
	// is refused; with it, the job is published again, and fails again (once the gated group's
	// last jobs free the slots).
	for range 4 {
		e.release()
	}
	abase, _, aerrs := e.dashboardAs("producer", dashboard.Config{AllowActions: true, Token: "t0ken"})
	retryButton := job + ` summary button`
	run(t, ctx, "retry without the token is refused",
		chromedp.Navigate(abase+"#failed"),
		chromedp.WaitVisible(retryButton),
		chromedp.Click(retryButton),
		poll(`document.querySelector('#toast').textContent.includes('refused: missing or wrong action token')`),
	)
	failedOutcomes := func() []uint64 {
		var ids []uint64
		for o, err := range e.d.Failed(t.Context(), "site-bad") {
			if err != nil {
				t.Fatal(err)
			}
			if o.Key == "page-1" {
				ids = append(ids, o.ID)
			}
		}
		return ids
	}
	first := failedOutcomes()
	if len(first) != 1 {
		t.Fatalf("failed jobs of page-1 after a refused retry: %v, want 1", first)
	}
	run(t, ctx, "retry with the token is done",
		chromedp.SendKeys(`#token`, "t0ken"),
		chromedp.Click(retryButton),
		poll(`document.querySelector('#toast').textContent.includes('1 job published again')`),
	)
	// The retry fails in its turn: it is listed, in place of the job it ran again.
	testwait.Seen(t, 30*time.Second, "the retried job to fail again", func() (bool, string) {
		ids := failedOutcomes()
		return len(ids) == 1 && ids[0] != first[0], fmt.Sprintf("failed jobs of page-1 %v (the first was %d)", ids, first[0])
	})

	// The groups table is rebuilt with each snapshot; a keyboard user's focus on a row's Cancel
	// button stays on it.
	gpuRow := `#groups-table tr[data-group="site-gpu-render"]`
	run(t, ctx, "focus survives the live updates",
		chromedp.KeyEvent("2"),
		chromedp.WaitVisible(gpuRow+` button`),
		// Focused from the page's own script, in one step: a chromedp.Focus looks the node up,
		// then focuses it, and a live update that rebuilds the table in between leaves it a node
		// that no longer exists ("Could not find node with given id", seen in CI).
		poll(`(() => { const b = document.querySelector('`+gpuRow+` button'); if (!b) return false; b.focus();
			return document.activeElement === b && (window.focusedRow = b.closest('tr')) !== null })()`),
		poll(`!window.focusedRow.isConnected`), // the row was rebuilt
		poll(`document.activeElement.matches('`+gpuRow+` button')`),
	)
	aerrs.check(t)
}

// TestDashboardScreenshots regenerates docs/dashboard-*.png, the screenshots of docs/operating.md, from a
// busier namespace than the tests': 2 workers of 6 slots and a stream of groups of jobs that take
// 20–120 ms. It runs only when asked:
//
//	go test ./cmd/weave/internal/dashboard -run TestDashboardScreenshots -update-screenshots
func TestDashboardScreenshots(t *testing.T) {
	if !*updateScreenshots {
		t.Skip("generates the screenshots in docs/ with -update-screenshots")
	}
	ctx := browser(t)
	e := newEnvSlots(t, 6)
	failed := e.standardGroups(6)
	for range 6 {
		e.release() // the gated group ends; its slots go to the stream of groups
	}
	base, _, _ := e.dashboardAs("observer", dashboard.Config{Interval: 500 * time.Millisecond, History: time.Minute})
	abase, _, _ := e.dashboardAs("producer", dashboard.Config{AllowActions: true, Token: "t0ken", Interval: 500 * time.Millisecond})
	// Limits, as an operator sets them: the eu region's jobs four at a time, and a payments
	// service paused for an outage.
	op, err := e.dep.Dispatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	for _, l := range []dispatcher.Limit{
		{Kind: dispatcher.LimitResource, Name: "eu", Concurrency: 4},
		{Kind: dispatcher.LimitResource, Name: "payments", Concurrency: 8, Rate: 20, Per: time.Second},
	} {
		if err := op.SetLimit(t.Context(), l); err != nil {
			t.Fatal(err)
		}
	}
	if err := op.Pause(t.Context(), dispatcher.LimitResource, "payments"); err != nil {
		t.Fatal(err)
	}
	// Schedules: a nightly report, and an hourly poll paused.
	for _, sc := range []dispatcher.Schedule{
		{Name: "nightly-report", Cron: "0 3 * * *", Jobs: []dispatcher.Job{{Key: "report"}}},
		{Name: "poll-feeds", Every: time.Hour, Jobs: []dispatcher.Job{{Key: "a"}, {Key: "b"}, {Key: "c"}}},
	} {
		if err := op.AddSchedule(t.Context(), sc); err != nil {
			t.Fatal(err)
		}
	}
	if err := op.PauseSchedule(t.Context(), "poll-feeds"); err != nil {
		t.Fatal(err)
	}

	// A stream of sites of skewed sizes, four open at a time, until the screenshots are taken.
	stop := make(chan struct{})
	var streams sync.WaitGroup
	names := []string{"news", "shop", "wiki", "blog", "docs", "forum", "maps", "video", "mail", "photos"}
	sizes := []int{240, 60, 30, 120, 20, 45, 90, 25, 35, 150}
	for w := range 4 {
		streams.Go(func() {
			for i := w; ; i += 4 {
				select {
				case <-stop:
					return
				default:
				}
				name := "site-" + names[i%len(names)] + "-" + strconv.Itoa(i/len(names))
				if i%5 == 1 {
					name = "site-eu-" + names[i%len(names)] + "-" + strconv.Itoa(i/len(names))
				}
				payloads := make([]string, sizes[i%len(sizes)])
				for k := range payloads {
					payloads[k] = "work:" + strconv.Itoa(20+(k*37+i*11)%100)
				}
				h, err := e.d.Publish(t.Context(), name, slices.Values(jobsOf(name, payloads)))
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := h.WaitSummary(t.Context()); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	defer func() {
		close(stop)
		streams.Wait()
	}()
	testwait.Seen(t, 30*time.Second, "40 seconds of history", func() (bool, string) {
		var snap struct {
			Series struct{ Times []int64 } `json:"series"`
		}
		get(t, base+"api/snapshot", &snap)
		return len(snap.Series.Times) >= 80, fmt.Sprint(len(snap.Series.Times), " samples")
	})
	run(t, ctx, "overview", chromedp.Navigate(base), poll(`document.querySelector('#chart-rates path.line') !== null`))
	screenshot(t, ctx, "overview")
	run(t, ctx, "groups", chromedp.KeyEvent("2"), chromedp.WaitVisible(`#groups-table tr[data-group]`),
		chromedp.WaitVisible(`#schedules-table tr[data-schedule="poll-feeds"]`))
	screenshot(t, ctx, "groups")
	run(t, ctx, "resources", chromedp.KeyEvent("3"), chromedp.WaitVisible(`#resources-table tr[data-resource]`))
	screenshot(t, ctx, "resources")
	job := fmt.Sprintf(`details[data-job="%d"]`, failed.ID)
	run(t, ctx, "failed", chromedp.Navigate(abase+"#failed"), chromedp.WaitVisible(job+" summary"),
		chromedp.Click(job+" summary"), chromedp.WaitVisible(job+` tr[data-attempt="3"]`), chromedp.SendKeys(`#token`, "t0ken"))
	screenshot(t, ctx, "failed")
	run(t, ctx, "lookup", chromedp.Navigate(base+"#lookup"), chromedp.WaitVisible(`#lookup-group`),
		chromedp.SendKeys(`#lookup-group`, "site-bad"), chromedp.SendKeys(`#lookup-key`, "page-1"+kb.Enter),
		chromedp.WaitVisible(`#lookup-job`))
	screenshot(t, ctx, "lookup")

	// The overview again, in the system's dark mode.
	run(t, ctx, "dark mode",
		chromedp.Func(func(ctx context.Context, tgt *chromedp.Target) error {
			_, err := cdp.Call(ctx, tgt, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
				Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}},
			})
			return err
		}),
		chromedp.Navigate(base+"#groups"), chromedp.WaitVisible(`#groups-table tr[data-group]`),
		poll(`getComputedStyle(document.documentElement).backgroundColor === 'rgb(18, 21, 27)'`))
	screenshot(t, ctx, "groups-dark")
}

// statusBackend answers a fixed status JSON (and nothing else): the page's rendering of fields
// this branch's coordinator does not send yet (alarms, standbys, the oldest pending job).
type statusBackend struct {
	nopBackend
	raw string
}

func (b statusBackend) Status(context.Context) (*dashboard.Status, error) {
	var st dashboard.Status
	if err := json.Unmarshal([]byte(b.raw), &st); err != nil {
		return nil, err
	}
	st.Raw = json.RawMessage(b.raw)
	return &st, nil
}

// serveStatusJSON serves the dashboard of a backend whose status is raw, and opens a browser: it
// returns the dashboard's URL and the browser's context. Both end with the test.
func serveStatusJSON(t *testing.T, raw string) (string, context.Context) {
	t.Helper()
	srv, err := dashboard.New(dashboard.Config{Backend: statusBackend{raw: raw}, Interval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// Closed after the browser (cleanups run last registered first): Close waits for the page's
	// event stream to end.
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	ctx := browser(t)
	pollCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Run(pollCtx)
	}()
	t.Cleanup(func() {
		stop()
		<-done
	})
	return ts.URL, ctx
}

// TestAlarmsAndStandbysInBrowser: the overview renders the status's alarms, whatever their
// values, and its standby coordinators (which process, how long it has waited, when it was last
// heard; no raw timestamps), from the JSON as the coordinator sends it.
func TestAlarmsAndStandbysInBrowser(t *testing.T) {
	t.Parallel()
	url, ctx := serveStatusJSON(t, `{"namespace":"n","epoch":7,"time":"2026-01-02T03:05:05Z",
		"jobs":{"pending":40},"totals":{},"oldest_pending":"2026-01-02T03:04:05Z",
		"alarms":[{"name":"pending_growth","raised_at":"2026-01-02T03:04:35Z","message":"PENDING grows: add capacity","values":{"rate_in":12.5,"suggested_slots":8}}],
		"standbys":[{"holder":"host-b/41","since":"2026-01-02T03:00:00.123456789Z","last_seen":"2026-01-02T03:05:04.987654321Z"},{"holder":"host-c/42","since":"2026-01-02T03:01:00Z","last_seen":"2026-01-02T03:05:04Z"}]}`)
	run(t, ctx, "alarms and standbys shown",
		chromedp.Navigate(url+"/"),
		chromedp.WaitVisible(`.alarm[data-alarm="pending_growth"]`),
		poll(`(() => { const a = document.querySelector('.alarm[data-alarm="pending_growth"]').textContent;
			return a.includes('PENDING grows: add capacity') && a.includes('raised 30s ago') && a.includes('rate_in12.5') &&
				a.includes('suggested_slots8.0'); })()`),
		poll(`(() => { const s = document.querySelector('#standby-list').textContent;
			return s.includes('host-b/41 waiting since') && s.includes('(5m 5s), last heard 0s ago') && s.includes('host-c/42 waiting since') &&
				!s.includes('2026-01-02T') && !s.includes('123456789'); })()`),
		poll(`document.querySelector('#coordinator').textContent.includes('Oldest pending job1m')`),
	)
}

// TestCutListsInBrowser: when the coordinator's status answer had to cut its lists to fit the
// server's max payload, the overview counts from the full counts and the resources view says
// how many of how many it lists.
func TestCutListsInBrowser(t *testing.T) {
	t.Parallel()
	url, ctx := serveStatusJSON(t, `{"namespace":"n","epoch":3,"time":"2026-01-02T03:05:05Z",
		"jobs":{"pending":6000},"totals":{},"cut":true,"open_groups":250,"worker_count":5000,"resource_count":6000,"pool_count":1,"limit_count":0,
		"groups":[{"id":"g1","sealed":true,"opened_at":"2026-01-02T03:04:05Z","jobs":{"pending":3}}],
		"resources":[{"name":"customer-00000","holders":0,"required":{"pending":1},"preferred":{}}],
		"pools":[{"key":"any","workers":5000,"slots":40000,"outstanding":0}],
		"workers":[{"id":"w0","pool":"any","concurrency":8,"busy":0,"sleeping":8,"last_seen":"2026-01-02T03:05:04Z"}]}`)
	run(t, ctx, "cut lists counted and noted",
		chromedp.Navigate(url+"/"),
		poll(`(() => { const c = document.querySelector('#coordinator').textContent;
			return c.includes('Open groups250') && c.includes('Workers5,000 live, 40,000 slots') && c.includes('(of the workers listed)'); })()`),
		chromedp.KeyEvent("3"),
		chromedp.WaitVisible(`#resources-cut`),
		poll(`document.querySelector('#resources-cut').textContent.includes('the first 1 of 6,000 resources, the first 1 of 5,000 workers')`),
	)
}
