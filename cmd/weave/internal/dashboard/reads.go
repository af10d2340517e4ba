package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/internal/safetext"
	"github.com/weavejobs/weave/internal/wire"
)

// The read handlers answer with text shown safely (internal/safetext) and of bounded size: a list
// carries each job's error cut to ListedErrorBytes, and a job's whole texts come one job at a
// time, cut to jobTextBytes unless the request asks for them whole (full=1).

// Bounds of the failed jobs' pages.
const (
	defaultPage = 50
	maxPage     = 200
	// maxOffset bounds how far back the pages go: a request keeps offset+limit jobs while it
	// reads, so memory stays bounded (weave failed list has them all).
	maxOffset = 10_000
)

// jobTextBytes bounds a job's result and each of its errors in a lookup, unless full=1.
const jobTextBytes = 64 << 10

// listedJSON is a failed job as a page of the list shows it.
type listedJSON struct {
	Group    string    `json:"group"`
	ID       uint64    `json:"id"`
	Key      string    `json:"key,omitempty"`
	Attempts int       `json:"attempts"`
	Error    string    `json:"error,omitempty"`
	FailedAt time.Time `json:"failed_at,omitzero"`
	// ErrorBytes is the whole error's size when Error was cut (0 when it is whole).
	ErrorBytes int `json:"error_bytes,omitempty"`
}

// jobJSON is a job as a lookup shows it.
type jobJSON struct {
	Group    string        `json:"group"`
	ID       uint64        `json:"id"`
	Key      string        `json:"key,omitempty"`
	State    string        `json:"state"`
	Attempts int           `json:"attempts"`
	Result   string        `json:"result,omitempty"`
	Error    string        `json:"error,omitempty"`
	History  []attemptJSON `json:"history"`
	// ResultBytes and ErrorBytes are the whole texts' sizes when Result or Error was cut.
	ResultBytes int `json:"result_bytes,omitempty"`
	ErrorBytes  int `json:"error_bytes,omitempty"`

	// What a lookup adds (dispatcher.JobInfo): the job's own attempt limit, where a running
	// attempt is, and its times.
	MaxAttempts int       `json:"max_attempts,omitempty"`
	Pool        string    `json:"pool,omitempty"`
	Worker      string    `json:"worker,omitempty"`
	PublishedAt time.Time `json:"published_at,omitzero"`
	StartedAt   time.Time `json:"started_at,omitzero"`
	RetryAt     time.Time `json:"retry_at,omitzero"`
	RunAt       time.Time `json:"run_at,omitzero"`
	EndedAt     time.Time `json:"ended_at,omitzero"`
	Waiting     string    `json:"waiting,omitempty"` // why it does not run (dispatcher.JobInfo.Waiting)
}

type attemptJSON struct {
	At         time.Time `json:"at"`
	Worker     string    `json:"worker"`
	Error      string    `json:"error"`
	ErrorBytes int       `json:"error_bytes,omitempty"`
}

// intParam reads a whole number in lo..hi from the query, def when absent.
func intParam(r *http.Request, name string, def, lo, hi int) (int, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("%s %q: want %d..%d", name, v, lo, hi)
	}
	return n, nil
}

func (s *Server) failed(w http.ResponseWriter, r *http.Request) {
	group := r.URL.Query().Get("group")
	if group != "" {
		if err := wire.ValidateGroupID(group); err != nil {
			writeError(w, http.StatusBadRequest, err)
			return
		}
	}
	limit, err := intParam(r, "limit", defaultPage, 1, maxPage)
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	offset, err := intParam(r, "offset", 0, 0, maxOffset)
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	select {
	case s.scans <- struct{}{}:
		defer func() { <-s.scans }()
	case <-ctx.Done():
		writeError(w, http.StatusServiceUnavailable, errors.New("the dashboard is busy reading the failed jobs for other requests: try again"))
		return
	}
	page, total, err := s.cfg.Backend.Failed(ctx, group, offset, limit)
	if err != nil {
		writeError(w, http.StatusBadGateway, err)
		return
	}
	jobs := make([]listedJSON, 0, len(page))
	for _, j := range page {
		jobs = append(jobs, listedJSON{Group: safetext.Line(j.Group), ID: j.ID, Key: safetext.Line(j.Key), Attempts: j.Attempts,
			Error: safetext.Line(j.Err), ErrorBytes: j.ErrBytes, FailedAt: j.FailedAt})
	}
	writeJSON(w, http.StatusOK, map[string]any{"jobs": jobs, "total": total, "offset": offset, "limit": limit, "max_offset": maxOffset})
}

func (s *Server) job(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query()
	q := Query{Group: v.Get("group"), Key: v.Get("key")}
	if id := v.Get("id"); id != "" {
		n, err := strconv.ParseUint(id, 10, 64)
		if err != nil || n == 0 {
			writeError(w, http.StatusBadRequest, fmt.Errorf("job ID %q: want a number from 1", id))
			return
		}
		q.ID = n
	}
	switch {
	case q.ID == 0 && q.Key == "":
		writeError(w, http.StatusBadRequest, errors.New("give a job ID, or a group and a key"))
		return
	case q.Key != "" && q.Group == "":
		writeError(w, http.StatusBadRequest, errors.New("a key names a job within its group: give the group too"))
		return
	}
	if q.Group != "" {
		if err := wire.ValidateGroupID(q.Group); err != nil {
			writeError(w, http.StatusBadRequest, err)
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	j, err := s.cfg.Backend.Lookup(ctx, q)
	switch {
	case errors.Is(err, dispatcher.ErrJobNotFound):
		writeError(w, http.StatusNotFound, err)
	case err != nil:
		writeError(w, http.StatusBadGateway, err)
	default:
		cut := jobTextBytes
		if v.Get("full") == "1" {
			cut = -1
		}
		writeJSON(w, http.StatusOK, infoJSON(j, cut))
	}
}

// text shows s safely on several lines, cut to cut bytes (none when cut < 0), and returns the
// whole size when it was cut.
func text(s string, cut int) (string, int) {
	if cut < 0 {
		return safetext.Block(s), 0
	}
	head, left := safetext.Cut(s, cut)
	if left == 0 {
		return safetext.Block(s), 0
	}
	return safetext.Block(head), len(s)
}

func infoJSON(i *dispatcher.JobInfo, cut int) jobJSON {
	j := jobJSON{Group: safetext.Line(i.Group), ID: i.ID, Key: safetext.Line(i.Key), State: string(i.State), Attempts: i.Attempts, History: []attemptJSON{},
		MaxAttempts: i.MaxAttempts, Pool: safetext.Line(i.Pool), Worker: safetext.Line(i.Worker), PublishedAt: i.PublishedAt, StartedAt: i.StartedAt, RetryAt: i.RetryAt, RunAt: i.RunAt, EndedAt: i.EndedAt,
		Waiting: safetext.Line(i.Waiting)}
	j.Result, j.ResultBytes = text(string(i.Result), cut)
	j.Error, j.ErrorBytes = text(i.Err, cut)
	for _, a := range i.History {
		e, n := text(a.Err, cut)
		j.History = append(j.History, attemptJSON{At: a.At, Worker: safetext.Line(a.Worker), Error: e, ErrorBytes: n})
	}
	return j
}

// maxEnded bounds the ended groups one request lists.
const maxEnded = 100

func (s *Server) ended(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	groups, err := s.cfg.Backend.Ended(ctx, maxEnded)
	if err != nil {
		writeError(w, http.StatusBadGateway, err)
		return
	}
	if groups == nil {
		groups = []EndedGroup{}
	}
	for i := range groups {
		groups[i].ID = safetext.Line(groups[i].ID)
	}
	writeJSON(w, http.StatusOK, map[string]any{"groups": groups})
}

func (s *Server) schedules(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	infos, err := s.cfg.Backend.Schedules(ctx)
	if err != nil {
		writeError(w, http.StatusBadGateway, err)
		return
	}
	type schedule struct {
		Name      string    `json:"name"`
		When      string    `json:"when"`
		Group     string    `json:"group"`
		Jobs      int       `json:"jobs"`
		Weight    int       `json:"weight,omitempty"`
		LastFired time.Time `json:"last_fired,omitzero"`
		Next      time.Time `json:"next,omitzero"`
		Paused    bool      `json:"paused,omitempty"`
	}
	out := []schedule{}
	for _, i := range infos {
		out = append(out, schedule{Name: safetext.Line(i.Name), When: safetext.Line(i.When()), Group: safetext.Line(i.Group), Jobs: len(i.Jobs),
			Weight: i.Weight, LastFired: i.LastFired, Next: i.Next, Paused: i.Paused})
	}
	writeJSON(w, http.StatusOK, map[string]any{"schedules": out})
}
