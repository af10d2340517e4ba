package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/weavejobs/weave/cmd/weave/internal/dashboard"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/internal/testwait"
)

// pagedStatus is the status the page tests' backend answers.
const pagedStatus = `{"namespace":"n","epoch":3,"time":"2026-01-02T03:05:05Z","jobs":{"pending":40,"failed":120},"totals":{},
	"groups":[{"id":"g1","sealed":true,"opened_at":"2026-01-02T03:04:05Z","jobs":{"pending":3,"delayed":2}}]}`

// longKey is a key far wider than its column.
var longKey = "key-" + strings.Repeat("w", 200)

// pagedBackend answers a fixed status and n failed jobs of group "g1", job i (1..n) failed i-th:
// the latest, job n, has longKey and an error holding a bidi override and more than the list
// keeps.
type pagedBackend struct {
	statusBackend
	n int
}

func (b pagedBackend) job(i int) dispatcher.JobOutcome {
	o := dispatcher.JobOutcome{Group: "g1", ID: uint64(i), Key: fmt.Sprintf("page-%d", i), State: dispatcher.StateFailed, Attempts: 2,
		Err:     fmt.Sprintf("error of job %d", i),
		History: []dispatcher.Attempt{{At: time.Unix(1_700_000_000, 0), Worker: "w1", Err: "first"}, {At: time.Unix(1_700_000_001, 0), Worker: "w2", Err: "second"}}}
	if i == b.n {
		o.Key = longKey
		o.Err = "invoice\u202efdp.exe " + strings.Repeat("x", 1000)
	}
	return o
}

func (b pagedBackend) Failed(_ context.Context, _ string, offset, limit int) ([]dashboard.ListedJob, int, error) {
	var page []dashboard.ListedJob
	for i := b.n - offset; i > max(b.n-offset-limit, 0); i-- {
		o := b.job(i)
		page = append(page, dashboard.ListedJob{Group: o.Group, ID: o.ID, Key: o.Key, Attempts: o.Attempts, Err: o.Err[:min(len(o.Err), dashboard.ListedErrorBytes)], ErrBytes: len(o.Err)})
	}
	return page, b.n, nil
}

func (b pagedBackend) Lookup(_ context.Context, q dashboard.Query) (*dispatcher.JobInfo, error) {
	if q.ID == 0 || q.ID > uint64(b.n) {
		return nil, dispatcher.ErrJobNotFound
	}
	o := b.job(int(q.ID))
	return &dispatcher.JobInfo{Group: o.Group, ID: o.ID, Key: o.Key, State: o.State, Attempts: o.Attempts, Err: o.Err, History: o.History}, nil
}

// serveBackend serves a dashboard of cfg over b through wrap (nil: as it is), runs its poller
// until it has read the status, and opens a browser: it returns the dashboard's URL and the
// browser's context. Both end with the test.
func serveBackend(t *testing.T, b dashboard.Backend, cfg dashboard.Config, wrap func(http.Handler) http.Handler) (string, context.Context) {
	t.Helper()
	cfg.Backend, cfg.Interval = b, 100*time.Millisecond
	srv, err := dashboard.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var h http.Handler = srv
	if wrap != nil {
		h = wrap(srv)
	}
	ts := httptest.NewServer(h)
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
	testwait.Seen(t, 30*time.Second, "the first status", func() (bool, string) {
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/snapshot", nil))
		return strings.Contains(rec.Body.String(), `"status":`), rec.Body.String()
	})
	return ts.URL, ctx
}

// TestFailedPagesInBrowser: the Failed view shows a page of failed jobs at a time, the latest
// first, with the pages before and after one click away; a listed error is cut and its
// characters shown as escapes; a long key stays in its column; opening a job fetches its
// attempts and its whole error on request.
func TestFailedPagesInBrowser(t *testing.T) {
	t.Parallel()
	url, ctx := serveBackend(t, pagedBackend{statusBackend: statusBackend{raw: pagedStatus}, n: 120}, dashboard.Config{}, nil)
	page := func(first, last int, newer, older bool) chromedp.Action[chromedp.Void] {
		return poll(fmt.Sprintf(`(() => { const c = document.querySelector('#failed-count').textContent;
			return c === '%d–%d of 120 failed jobs, latest first' && document.querySelectorAll('#failed-list details').length === %d &&
				document.querySelector('#failed-list details').dataset.job === '%d' &&
				document.querySelector('#failed-newer').disabled === %v && document.querySelector('#failed-older').disabled === %v &&
				!document.querySelector('#failed-pager').hidden; })()`, first, last, last-first+1, 121-first, !newer, !older))
	}
	run(t, ctx, "the first page",
		chromedp.Navigate(url+"/#failed"),
		page(1, 50, false, true),
		// The latest job's error, cut, its bidi override written as an escape.
		poll(`(() => { const e = document.querySelector('details[data-job="120"] .err').textContent;
			return e.startsWith('invoice\\u202efdp.exe xxx') && !e.includes('\u202e') && e.length < 600; })()`),
		// Its long key is cut at its column's edge, not drawn over the next.
		poll(`(() => { const s = document.querySelector('details[data-job="120"] summary'), k = s.querySelector('.key'), next = k.nextElementSibling;
			return k.textContent.length > 200 && k.getBoundingClientRect().right <= next.getBoundingClientRect().left + 1 && k.scrollWidth > k.clientWidth; })()`),
	)
	run(t, ctx, "the older pages", chromedp.Click(`#failed-older`), page(51, 100, true, true), chromedp.Click(`#failed-older`), page(101, 120, true, false))
	run(t, ctx, "back to the newest", chromedp.Click(`#failed-newer`), page(51, 100, true, true), chromedp.Click(`#failed-newer`), page(1, 50, false, true))
	run(t, ctx, "a job opened shows its attempts and, on request, its whole error",
		chromedp.Click(`details[data-job="120"] summary`),
		chromedp.WaitVisible(`details[data-job="120"] tr[data-attempt="2"]`),
		poll(`document.querySelector('details[data-job="120"] .body pre').textContent.length === 'invoice\\u202efdp.exe '.length + 1000`),
	)
}

// TestImmediateRenderInBrowser: the page renders the snapshot it came with, before and without
// its event stream or any other request to the API (here all refused), as a plain screenshot of
// the page as loaded would show it.
func TestImmediateRenderInBrowser(t *testing.T) {
	t.Parallel()
	refuseAPI := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasPrefix(r.URL.Path, "/api/") {
				http.Error(w, "refused by the test", http.StatusServiceUnavailable)
				return
			}
			h.ServeHTTP(w, r)
		})
	}
	url, ctx := serveBackend(t, statusBackend{raw: pagedStatus}, dashboard.Config{Namespace: "n"}, refuseAPI)
	run(t, ctx, "open the overview", chromedp.Navigate(url+"/"))
	shown, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.getElementById('count-pending') || {}).textContent + '|' + document.getElementById('namespace').textContent`))
	if err != nil || shown != "40|n" {
		t.Fatalf("at load the page shows pending %q (%v), want 40|n", shown, err)
	}
	run(t, ctx, "the groups view from the same snapshot, delayed jobs coloured",
		chromedp.KeyEvent("2"),
		poll(`document.querySelector('tr[data-group="g1"] .seg.delayed') !== null && getComputedStyle(document.querySelector('.legend .sw.delayed')).backgroundColor !== 'rgba(0, 0, 0, 0)'`),
	)
}

// TestMalformedTokenFragmentInBrowser: a #token= fragment with a bad %-escape is dropped from
// the address with a note, and the page runs on; a good one fills the token field.
func TestMalformedTokenFragmentInBrowser(t *testing.T) {
	t.Parallel()
	url, ctx := serveBackend(t, statusBackend{raw: pagedStatus}, dashboard.Config{AllowActions: true, Token: "t0ken"}, nil)
	run(t, ctx, "a malformed fragment",
		chromedp.Navigate(url+"/#token=%E0%A4%A"),
		poll(`document.querySelector('#toast').textContent.includes('malformed')`),
		poll(`location.hash === '#overview' && document.getElementById('count-pending')?.textContent === '40' && document.getElementById('token').value === ''`),
		poll(`document.getElementById('conn-text').textContent === 'live'`),
	)
	run(t, ctx, "a good one",
		chromedp.Navigate(url+"/#failed&token=t0%20ken"),
		poll(`location.hash === '#failed' && document.getElementById('token').value === 't0 ken' && !document.querySelector('#view-failed').hidden`),
	)
}
