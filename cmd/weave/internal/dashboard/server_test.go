package dashboard_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/weavejobs/weave/cmd/weave/internal/dashboard"
	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/internal/testwait"
)

// get fetches url and decodes its JSON body into v, returning the status code.
func get(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode
}

// post sends an action and returns the status code and the body's error or result.
func post(t *testing.T, url, token, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set(dashboard.TokenHeader, token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

type jobJSON struct {
	Group    string `json:"group"`
	ID       uint64 `json:"id"`
	Key      string `json:"key"`
	State    string `json:"state"`
	Attempts int    `json:"attempts"`
	Result   string `json:"result"`
	Error    string `json:"error"`
	// PublishedAt is known for every job the inspection API finds in JOBS.
	PublishedAt time.Time `json:"published_at"`
	History     []struct {
		Worker string `json:"worker"`
		Error  string `json:"error"`
	} `json:"history"`
}

// TestReadsAsObserver runs the dashboard with the observer's permissions only: its snapshot
// matches the coordinator's status, the failed list and lookups work, its event stream pushes
// snapshots, actions are refused (they are off), and the server refused nothing it asked.
func TestReadsAsObserver(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	failed := e.standardGroups(2)
	base, _, errs := e.dashboardAs("observer", dashboard.Config{})

	// The snapshot is the coordinator's status: with the gated group's jobs held, nothing moves.
	testwait.Seen(t, 30*time.Second, "the dashboard's snapshot to show the coordinator's counts", func() (bool, string) {
		var snap struct {
			Status *coordinator.Status `json:"status"`
			Error  string              `json:"error"`
		}
		get(t, base+"api/snapshot", &snap)
		st, err := e.dep.Status()
		if err != nil || snap.Status == nil {
			return false, fmt.Sprint(err, snap.Error)
		}
		return maps.Equal(snap.Status.Jobs, st.Jobs) && len(snap.Status.Groups) == len(st.Groups) && len(snap.Status.Workers) == 2,
			fmt.Sprintf("dashboard %v, coordinator %v", snap.Status.Jobs, st.Jobs)
	})

	var list struct {
		Jobs  []jobJSON
		Total int
	}
	if code := get(t, base+"api/failed", &list); code != http.StatusOK || len(list.Jobs) != 1 || list.Total != 1 {
		t.Fatalf("failed list: %d %+v", code, list)
	}
	if j := list.Jobs[0]; j.ID != failed.ID || j.Group != "site-bad" || j.Key != "page-1" || j.Attempts != 3 || !strings.Contains(j.Error, "attempt 3") {
		t.Errorf("failed job %+v, want %+v", j, failed)
	}
	// Its attempts come with the job itself, one job at a time.
	var one jobJSON
	if code := get(t, fmt.Sprintf("%sapi/job?id=%d", base, failed.ID), &one); code != http.StatusOK || len(one.History) != 3 ||
		!strings.Contains(one.History[2].Error, "attempt 3") || one.History[0].Worker == "" {
		t.Errorf("failed job looked up: %d %+v", code, one)
	}

	for _, tc := range []struct {
		query, state, text string
	}{
		{"group=site-bad&key=page-1", "failed", "503 Service Unavailable (attempt 3)"},
		{fmt.Sprintf("id=%d", failed.ID), "failed", "503"},
		{"group=site-blog&key=page-2", "done", "fetched page-2"},
	} {
		var j jobJSON
		if code := get(t, base+"api/job?"+tc.query, &j); code != http.StatusOK || j.State != tc.state || !strings.Contains(j.Error+j.Result, tc.text) {
			t.Errorf("lookup %s: %d %+v, want %s with %q", tc.query, code, j, tc.state, tc.text)
		}
	}
	// A job of an open group has not ended: the coordinator describes it.
	var open jobJSON
	if code := get(t, base+"api/job?group="+gated+"&key=page-0", &open); code != http.StatusOK || (open.State != "pending" && open.State != "running") || open.PublishedAt.IsZero() {
		t.Errorf("lookup of a job that has not ended: %d %+v", code, open)
	}

	// The ended groups, from their summaries.
	var ended struct{ Groups []dashboard.EndedGroup }
	if code := get(t, base+"api/ended", &ended); code != http.StatusOK || len(ended.Groups) != 3 {
		t.Fatalf("ended: %d %+v", code, ended)
	}
	byID := map[string]dashboard.EndedGroup{}
	for _, g := range ended.Groups {
		byID[g.ID] = g
	}
	if g := byID["site-bad"]; g.Jobs != 3 || g.Done != 2 || g.Failed != 1 || g.EndedAt.IsZero() {
		t.Errorf("site-bad ended as %+v", g)
	}
	if g := byID["site-eu-news"]; g.Jobs != 5 || g.Done != 5 {
		t.Errorf("site-eu-news ended as %+v", g)
	}

	for query, want := range map[string]int{
		"id=999999":                   http.StatusNotFound,
		"group=site-blog&key=page-99": http.StatusNotFound,
		"":                            http.StatusBadRequest,
		"id=x":                        http.StatusBadRequest,
		"key=page-1":                  http.StatusBadRequest, // a key needs its group
		"group=bad%01id&key=k":        http.StatusBadRequest, // a control character
	} {
		var body map[string]string
		if code := get(t, base+"api/job?"+query, &body); code != want || body["error"] == "" {
			t.Errorf("lookup %q: %d %v, want %d with an error", query, code, body, want)
		}
	}

	// The event stream pushes snapshots.
	resp, err := http.Get(base + "api/events")
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(resp.Body)
	for range 2 { // the current snapshot, then the next one
		line, err := r.ReadString('\n')
		if err != nil || line != "event: snapshot\n" {
			t.Fatalf("event stream: %q %v", line, err)
		}
		data, _ := r.ReadString('\n')
		if !strings.HasPrefix(data, `data: {"time":`) {
			t.Fatalf("event data %q", data)
		}
		_, _ = r.ReadString('\n')
	}
	resp.Body.Close()

	// A request for another host name is refused (DNS rebinding): the dashboard listens on
	// 127.0.0.1.
	for host, want := range map[string]int{"evil.example:80": http.StatusMisdirectedRequest, "localhost": http.StatusOK, "[::1]:9": http.StatusOK} {
		req, _ := http.NewRequest(http.MethodGet, base+"api/config", nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Host %s: %s, want %d", host, resp.Status, want)
		}
	}

	// Actions are off: refused, whatever the token.
	for _, token := range []string{"", "anything"} {
		if code, body := post(t, base+"api/retry", token, `{"group":"site-bad"}`); code != http.StatusForbidden || !strings.Contains(fmt.Sprint(body), "actions are off") {
			t.Errorf("retry with actions off: %d %v", code, body)
		}
	}
	errs.check(t)
}

// TestActions: with --allow-actions, retry and cancel need the token in the header: without it,
// or with a wrong one, they are refused and nothing happens; with it, they do what weave failed
// retry and weave cancel do.
func TestActions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	failed := e.standardGroups(2)
	base, srv, errs := e.dashboardAs("producer", dashboard.Config{AllowActions: true, Token: "s3cret"})
	if srv.Token() != "s3cret" {
		t.Fatalf("token %q", srv.Token())
	}
	retry := base + "api/retry"
	body := fmt.Sprintf(`{"group":"site-bad","ids":[%d]}`, failed.ID)
	for _, token := range []string{"", "s3cre", "s3cret!", "S3CRET"} {
		if code, res := post(t, retry, token, body); code != http.StatusForbidden || !strings.Contains(fmt.Sprint(res), "token") {
			t.Errorf("retry with token %q: %d %v, want 403", token, code, res)
		}
	}
	// GET is not an action.
	if resp, err := http.Get(retry); err != nil {
		t.Errorf("GET %s: %v", retry, err)
	} else if resp.Body.Close(); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET %s: %v", retry, resp.Status)
	}
	for _, bad := range []string{`{}`, `{"group":"site-bad","ids":[0]}`, `{"group":"site-bad","extra":1}`, `not json`} {
		if code, res := post(t, retry, "s3cret", bad); code != http.StatusBadRequest {
			t.Errorf("retry %s: %d %v, want 400", bad, code, res)
		}
	}
	// Nothing was published by the refused requests: the group's latest incarnation is the one
	// that failed, so the retry publishes its failed job (a retry published before would make
	// the group run again, and this one would be refused as running).
	code, res := post(t, retry, "s3cret", body)
	if code != http.StatusOK || res["published"] != 1.0 {
		t.Fatalf("retry with the token: %d %v", code, res)
	}
	// The retry fails in its turn: it is listed, in place of the job it ran again.
	testwait.Seen(t, 30*time.Second, "the retried job to fail again", func() (bool, string) {
		var ids []uint64
		for o, err := range e.d.Failed(context.Background(), "site-bad") {
			if err != nil {
				return false, err.Error()
			}
			if o.Key == "page-1" {
				ids = append(ids, o.ID)
			}
		}
		return len(ids) == 1 && ids[0] != failed.ID, fmt.Sprintf("failed jobs of page-1 %v (the first was %d)", ids, failed.ID)
	})

	// Cancel the gated group, whose jobs are held: they end canceled.
	if code, res := post(t, base+"api/cancel", "", `{"group":"`+gated+`"}`); code != http.StatusForbidden {
		t.Fatalf("cancel without the token: %d %v", code, res)
	}
	if code, res := post(t, base+"api/cancel", "s3cret", `{"group":"`+gated+`"}`); code != http.StatusOK {
		t.Fatalf("cancel: %d %v", code, res)
	}
	sum, err := e.d.Attach(gated).WaitSummary(t.Context())
	if err != nil || sum.Canceled == 0 {
		t.Fatalf("gated group after the cancel: %+v %v", sum, err)
	}
	// Cancel one job of a group: it ends canceled, and so does its group.
	h := e.publish("site-gpu-one", "ok")
	if code, res := post(t, base+"api/cancel", "s3cret", fmt.Sprintf(`{"group":"site-gpu-one","ids":[%d]}`, h.FirstID())); code != http.StatusOK {
		t.Fatalf("cancel of a job: %d %v", code, res)
	}
	if sum, err := h.WaitSummary(t.Context()); err != nil || sum.Canceled != 1 {
		t.Fatalf("site-gpu-one after the cancel of its job: %+v %v", sum, err)
	}
	// Cancel of a group that has ended: the coordinator's refusal comes back.
	if code, res := post(t, base+"api/cancel", "s3cret", `{"group":"site-blog"}`); code != http.StatusConflict || !strings.Contains(fmt.Sprint(res), "not open") {
		t.Errorf("cancel of an ended group: %d %v", code, res)
	}
	errs.check(t)
}

// TestActionToken: a generated token is long and random, and the assets come with a policy
// that forbids other origins' scripts and framing.
func TestActionToken(t *testing.T) {
	t.Parallel()
	var tokens []string
	for range 2 {
		srv, err := dashboard.New(dashboard.Config{Backend: nopBackend{}, AllowActions: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(srv.Token()) < 32 {
			t.Fatalf("token %q", srv.Token())
		}
		tokens = append(tokens, srv.Token())
		ts := handlerOnly(t, srv)
		resp, err := http.Get(ts.URL + "/")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), `<script src="app.js"`) || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'") {
			t.Errorf("index: %s %v", b[:min(len(b), 80)], resp.Header)
		}
		if resp, err := http.Get(ts.URL + "/nothing-here"); err != nil {
			t.Errorf("unknown path: %v", err)
		} else if resp.Body.Close(); resp.StatusCode != http.StatusNotFound {
			t.Errorf("unknown path: %v", resp.Status)
		}
	}
	if tokens[0] == tokens[1] {
		t.Error("two dashboards generated the same token")
	}
	srv, _ := dashboard.New(dashboard.Config{Backend: nopBackend{}, Token: "unused"})
	if srv.Token() != "" {
		t.Errorf("token %q with actions off", srv.Token())
	}
}

// nopBackend is a Backend for tests of what does not reach it.
type nopBackend struct{}

func (nopBackend) Status(context.Context) (*dashboard.Status, error) {
	return nil, errors.New("no coordinator")
}
func (nopBackend) Failed(context.Context, string, int, int) ([]dashboard.ListedJob, int, error) {
	return nil, 0, nil
}
func (nopBackend) Lookup(context.Context, dashboard.Query) (*dispatcher.JobInfo, error) {
	return nil, dispatcher.ErrJobNotFound
}
func (nopBackend) Ended(context.Context, int) ([]dashboard.EndedGroup, error) { return nil, nil }
func (nopBackend) Schedules(context.Context) ([]dispatcher.ScheduleInfo, error) {
	return nil, nil
}
func (nopBackend) Retry(context.Context, string, []uint64) (int, error) { return 0, nil }
func (nopBackend) Cancel(context.Context, string, []uint64) error       { return nil }
