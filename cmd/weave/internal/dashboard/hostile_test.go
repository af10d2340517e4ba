package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/weavejobs/weave/cmd/weave/internal/dashboard"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/internal/testwait"
)

// hiddenRunes returns the characters of the JSON strings in body that a terminal or a browser
// would interpret or hide: controls (C0, DEL, C1), format characters (bidi, zero-width), line
// separators, and invalid UTF-8.
func hiddenRunes(t *testing.T, body []byte) []string {
	t.Helper()
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("not JSON: %v: %.200s", err, body)
	}
	var found []string
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			for _, c := range v {
				if c == unicode.ReplacementChar || unicode.In(c, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp) {
					found = append(found, fmt.Sprintf("U+%04X in %.60q", c, v))
					return
				}
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		case map[string]any:
			for k, e := range v {
				walk(k)
				walk(e)
			}
		}
	}
	walk(v)
	return found
}

// fetch GETs url and returns its status and body.
func fetch(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// TestHostileWorkerTexts: a worker that fails jobs with escape sequences, C1 controls, bidi and
// zero-width characters and 1 MiB errors, and returns such a result. Every answer of the
// dashboard shows those characters as escapes, the failed list stays small whatever the errors'
// size, and a job's whole error comes when asked for, one job at a time.
func TestHostileWorkerTexts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	payloads := []string{"hostile", "hostile-result"}
	for range 6 {
		payloads = append(payloads, "huge")
	}
	h := e.publish("site-hostile", payloads...)
	if sum, err := h.WaitSummary(ctx); err != nil || sum.Failed != 7 || sum.Done != 1 {
		t.Fatalf("hostile group: %+v, %v", sum, err)
	}
	base, _, errs := e.dashboardAs("observer", dashboard.Config{})

	var list struct {
		Jobs []struct {
			ID         uint64 `json:"id"`
			Key        string `json:"key"`
			Error      string `json:"error"`
			ErrorBytes int    `json:"error_bytes"`
		} `json:"jobs"`
		Total int `json:"total"`
	}
	code, body := fetch(t, base+"api/failed?group=site-hostile")
	if err := json.Unmarshal(body, &list); code != http.StatusOK || err != nil || list.Total != 7 || len(list.Jobs) != 7 {
		t.Fatalf("failed list: %d %v %.300s", code, err, body)
	}
	if hidden := hiddenRunes(t, body); len(hidden) > 0 {
		t.Errorf("the failed list holds raw characters: %v", hidden)
	}
	// Each listed error is at most 512 bytes of the original, each written as at most 6 bytes.
	if len(body) > 7*(6*dashboard.ListedErrorBytes+300) {
		t.Errorf("the failed list of 7 jobs is %d bytes", len(body))
	}
	var hugeID uint64
	for _, j := range list.Jobs {
		switch j.Key {
		case "page-0":
			if !strings.Contains(j.Error, `\x1b[31mRED\x1b[0m`) || !strings.Contains(j.Error, `invoice\u202efdp.exe\u202c zw\u200b\u200d\ufeffend`) ||
				!strings.Contains(j.Error, `\u0085\u009b31m`) || j.ErrorBytes != 0 {
				t.Errorf("hostile error listed as %q (%d bytes)", j.Error, j.ErrorBytes)
			}
		default:
			hugeID = j.ID
			if j.ErrorBytes < 1<<20 || !strings.HasPrefix(j.Error, `\x1b[2J`) {
				t.Errorf("huge error listed as %.40q, %d bytes in all", j.Error, j.ErrorBytes)
			}
		}
	}

	// A lookup cuts it too, and says how big it is; full=1 brings the whole.
	for _, full := range []bool{false, true} {
		url := fmt.Sprintf("%sapi/job?id=%d", base, hugeID)
		if full {
			url += "&full=1"
		}
		code, body := fetch(t, url)
		var j struct {
			Error      string `json:"error"`
			ErrorBytes int    `json:"error_bytes"`
			History    []struct {
				Error string `json:"error"`
			} `json:"history"`
		}
		if err := json.Unmarshal(body, &j); code != http.StatusOK || err != nil {
			t.Fatalf("lookup %s: %d %v", url, code, err)
		}
		if hidden := hiddenRunes(t, body); len(hidden) > 0 {
			t.Errorf("lookup %s holds raw characters: %v", url, hidden)
		}
		whole := strings.Count(j.Error, `\x1b[2J`) == len(hugeText)/4
		if full != whole || full != (j.ErrorBytes == 0) || len(j.History) != 3 {
			t.Errorf("lookup %s: %d bytes of error (%d in all), %d attempts", url, len(j.Error), j.ErrorBytes, len(j.History))
		}
	}
	res, err := e.d.JobByKey(ctx, "site-hostile", "page-1")
	if err != nil || res.State != dispatcher.StateDone {
		t.Fatalf("hostile result: %+v %v", res, err)
	}
	code, body = fetch(t, fmt.Sprintf("%sapi/job?id=%d", base, res.ID))
	if hidden := hiddenRunes(t, body); code != http.StatusOK || len(hidden) > 0 || !strings.Contains(string(body), `PWNED-TITLE\\x07`) {
		t.Errorf("hostile result: %d %v %.300s", code, hidden, body)
	}

	// The snapshot and the ended groups, whatever the coordinator's status quotes.
	testwait.Seen(t, 30*time.Second, "the snapshot to show a status", func() (bool, string) {
		_, body := fetch(t, base+"api/snapshot")
		return strings.Contains(string(body), `"status":`), string(body[:min(len(body), 200)])
	})
	for _, path := range []string{"api/snapshot", "api/ended", "api/config", ""} {
		code, body := fetch(t, base+path)
		if code != http.StatusOK {
			t.Errorf("%s: %d", path, code)
		}
		if path == "" {
			continue // the page: its boot data is the snapshot's
		}
		if hidden := hiddenRunes(t, body); len(hidden) > 0 {
			t.Errorf("%s holds raw characters: %v", path, hidden)
		}
	}
	errs.check(t)
}
