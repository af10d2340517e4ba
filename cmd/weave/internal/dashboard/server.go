// Package dashboard is weave dashboard: a web app showing a namespace live, served from assets
// embedded in the binary (hand-written HTML, CSS and JavaScript; no build step, nothing fetched at
// run time).
//
// The server polls the coordinator's status about once a second (Server.Run), keeps a few
// minutes of it to draw rates and shares over time, and pushes each new snapshot to the open
// pages with server-sent events; a page closes its stream while it is hidden. Reads need only
// what an observer may read. Actions (retry, cancel) are off unless Config.AllowActions, and then
// each needs Config.Token in the X-Weave-Token header of a POST.
package dashboard

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/internal/wire"
)

//go:embed static
var static embed.FS

// Defaults of Config.
const (
	DefaultInterval = time.Second
	DefaultHistory  = 5 * time.Minute
)

// TokenHeader carries the action token. A header, not a cookie: a page of another site can
// neither read it nor make the browser send it, so a cross-site request cannot act (and one that
// sets a custom header needs a CORS preflight, which this server never grants).
const TokenHeader = "X-Weave-Token"

// Config configures a Server.
type Config struct {
	Backend   Backend
	Namespace string
	Log       zerolog.Logger
	// AllowActions turns on retry and cancel; each request then needs Token.
	AllowActions bool
	// Token is the action token; empty with AllowActions: New generates one (Server.Token).
	Token string
	// Interval is how often the coordinator's status is read and pushed; default DefaultInterval.
	Interval time.Duration
	// History is how long the rates and shares are kept; default DefaultHistory.
	History time.Duration
}

// Server serves the dashboard. Run polls the status; the handlers only read what it rendered.
type Server struct {
	cfg    Config
	log    zerolog.Logger
	assets http.Handler
	mux    *http.ServeMux

	// mu guards latest, status and changed, written by the poller (Run) and read by the
	// handlers. changed is closed, and replaced, each time latest changes.
	mu      sync.Mutex
	latest  []byte  // the last snapshot, as JSON
	status  *Status // the last status read; nil before the first
	changed chan struct{}

	watched     chan struct{} // closed when the first event stream opens (see Watched)
	watchedOnce sync.Once

	// loopback is set by Serve, before it serves, when it listens on a loopback address.
	loopback bool
}

// New returns a Server; it does no I/O.
func New(cfg Config) (*Server, error) {
	if cfg.Backend == nil {
		return nil, errors.New("dashboard: no backend")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.History <= 0 {
		cfg.History = DefaultHistory
	}
	if cfg.AllowActions && cfg.Token == "" {
		b := make([]byte, 16)
		_, _ = rand.Read(b) // never fails (crypto/rand)
		cfg.Token = hex.EncodeToString(b)
	}
	sub, err := fs.Sub(static, "static")
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg:     cfg,
		log:     cfg.Log.With().Str("component", "dashboard").Logger(),
		assets:  http.FileServerFS(sub),
		changed: make(chan struct{}),
		watched: make(chan struct{}),
	}
	s.latest, _ = json.Marshal(snapshot{Error: "waiting for the first status"})
	mux := http.NewServeMux()
	// The assets by name, so that any other path is a 404 and an action's path with another
	// method a 405.
	for _, p := range []string{"/{$}", "/app.js", "/app.css"} {
		mux.Handle("GET "+p, s.assets)
	}
	mux.HandleFunc("GET /api/config", s.config)
	mux.HandleFunc("GET /api/snapshot", s.snapshot)
	mux.HandleFunc("GET /api/events", s.events)
	mux.HandleFunc("GET /api/failed", s.failed)
	mux.HandleFunc("GET /api/job", s.job)
	mux.HandleFunc("GET /api/ended", s.ended)
	mux.HandleFunc("GET /api/schedules", s.schedules)
	mux.HandleFunc("POST /api/retry", s.action("retry", s.retry))
	mux.HandleFunc("POST /api/cancel", s.action("cancel", s.cancel))
	s.mux = mux
	return s, nil
}

// Token returns the action token ("" when actions are off).
func (s *Server) Token() string {
	if !s.cfg.AllowActions {
		return ""
	}
	return s.cfg.Token
}

// Watched is closed when a page first opens its event stream: someone is looking. The demo
// waits for it before it crawls.
func (s *Server) Watched() <-chan struct{} { return s.watched }

// ServeHTTP serves the app and its API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// A dashboard on a loopback address answers only requests naming a loopback host: a page of
	// another site whose name an attacker points at 127.0.0.1 (DNS rebinding) could otherwise
	// read it as its own origin.
	if s.loopback && !loopbackHost(r.Host) {
		writeError(w, http.StatusMisdirectedRequest, fmt.Errorf("host %q: this dashboard listens on a loopback address and answers only for localhost or a loopback IP", r.Host))
		return
	}
	h := w.Header()
	// Everything comes from this server; nothing may frame it.
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	s.mux.ServeHTTP(w, r)
}

// Serve runs the poller and serves HTTP on ln until ctx ends; then it closes the open event
// streams and shuts the HTTP server down.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	if a, ok := ln.Addr().(*net.TCPAddr); ok && a.IP.IsLoopback() {
		s.loopback = true
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	hs := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx }, // ends the event streams
	}
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		s.Run(ctx)
	}()
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	var err error
	select {
	case <-ctx.Done():
	case err = <-served:
		cancel()
	}
	sctx, stop := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer stop()
	if serr := hs.Shutdown(sctx); err == nil && serr != nil {
		err = serr
	}
	<-polled
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// loopbackHost reports whether the Host header names localhost or a loopback IP.
func loopbackHost(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport // no port
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// snapshot is what the page receives each interval.
type snapshot struct {
	Time   time.Time       `json:"time"`
	Status json.RawMessage `json:"status,omitempty"` // the last status read (may be older than Time on Error)
	Error  string          `json:"error,omitempty"`  // why the last read failed
	Series *series         `json:"series,omitempty"`
}

// Run reads the status every Interval until ctx ends and publishes each snapshot. It owns the
// history.
func (s *Server) Run(ctx context.Context) {
	h := &history{keep: s.cfg.History}
	var last *Status
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, max(s.cfg.Interval, 2*time.Second))
		st, err := s.cfg.Backend.Status(rctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		now := time.Now()
		snap := snapshot{Time: now}
		if err != nil {
			snap.Error = err.Error()
			s.log.Debug().Err(err).Msg("status")
		} else {
			last = st
			if last.Raw == nil {
				last.Raw, _ = json.Marshal(st)
			}
			h.add(sampleOf(now, st))
		}
		if last != nil {
			snap.Status = last.Raw
		}
		ser := h.series()
		snap.Series = &ser
		b, err := json.Marshal(snap)
		if err == nil {
			s.publish(b, last)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Server) publish(b []byte, st *Status) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.latest, s.status = b, st
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *Server) current() ([]byte, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.latest, s.changed
}

func (s *Server) config(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"namespace":       s.cfg.Namespace,
		"actions":         s.cfg.AllowActions,
		"interval_ms":     s.cfg.Interval.Milliseconds(),
		"history_seconds": int(s.cfg.History.Seconds()),
		"token_header":    TokenHeader,
	})
}

func (s *Server) snapshot(w http.ResponseWriter, _ *http.Request) {
	b, _ := s.current()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(b)
}

// events streams each snapshot as a server-sent event "snapshot", the current one first.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s.watchedOnce.Do(func() { close(s.watched) })
	for {
		b, changed := s.current()
		if _, err := fmt.Fprintf(w, "event: snapshot\ndata: %s\n\n", b); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-changed:
		}
	}
}

// maxListed bounds the failed jobs one request lists.
const maxListed = 500

// jobJSON is a job outcome as the page reads it.
type jobJSON struct {
	Group    string        `json:"group"`
	ID       uint64        `json:"id"`
	Key      string        `json:"key,omitempty"`
	State    string        `json:"state"`
	Attempts int           `json:"attempts"`
	Result   string        `json:"result,omitempty"`
	Error    string        `json:"error,omitempty"`
	History  []attemptJSON `json:"history"`

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
	At     time.Time `json:"at"`
	Worker string    `json:"worker"`
	Error  string    `json:"error"`
}

func (s *Server) failed(w http.ResponseWriter, r *http.Request) {
	group := r.URL.Query().Get("group")
	if group != "" {
		if err := wire.ValidateGroupID(group); err != nil {
			writeError(w, http.StatusBadRequest, err)
			return
		}
	}
	limit := maxListed
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxListed {
			writeError(w, http.StatusBadRequest, fmt.Errorf("limit %q: want 1..%d", v, maxListed))
			return
		}
		limit = n
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	outs, err := s.cfg.Backend.Failed(ctx, group, limit)
	if err != nil {
		writeError(w, http.StatusBadGateway, err)
		return
	}
	jobs := make([]jobJSON, 0, len(outs))
	for i := len(outs) - 1; i >= 0; i-- { // the latest first
		jobs = append(jobs, toJSON(&outs[i]))
	}
	writeJSON(w, http.StatusOK, map[string]any{"jobs": jobs, "limit": limit})
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
		writeJSON(w, http.StatusOK, infoJSON(j))
	}
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
		out = append(out, schedule{Name: i.Name, When: i.When(), Group: i.Group, Jobs: len(i.Jobs), Weight: i.Weight, LastFired: i.LastFired, Next: i.Next, Paused: i.Paused})
	}
	writeJSON(w, http.StatusOK, map[string]any{"schedules": out})
}

// actionRequest is the body of a retry or cancel: one group, and some of its jobs or none
// (all).
type actionRequest struct {
	Group string   `json:"group"`
	IDs   []uint64 `json:"ids,omitempty"`
}

// action wraps an action handler (a POST: the mux answers other methods with 405): only with actions on, only with the token; each
// attempt is logged, refused or not.
func (s *Server) action(name string, do func(context.Context, actionRequest) (map[string]any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		log := s.log.With().Str("action", name).Str("remote", r.RemoteAddr).Logger()
		if !s.cfg.AllowActions {
			log.Warn().Msg("dashboard action refused: actions are off")
			writeError(w, http.StatusForbidden, errors.New("actions are off: start weave dashboard with --allow-actions"))
			return
		}
		if subtle.ConstantTimeCompare([]byte(r.Header.Get(TokenHeader)), []byte(s.cfg.Token)) != 1 {
			log.Warn().Msg("dashboard action refused: missing or wrong token")
			writeError(w, http.StatusForbidden, errors.New("missing or wrong action token"))
			return
		}
		var req actionRequest
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeError(w, http.StatusBadRequest, fmt.Errorf("body: %w", err))
			return
		}
		if err := wire.ValidateGroupID(req.Group); err != nil {
			writeError(w, http.StatusBadRequest, err)
			return
		}
		if slices.Contains(req.IDs, 0) {
			writeError(w, http.StatusBadRequest, errors.New("job ID 0: IDs start at 1"))
			return
		}
		log = log.With().Str("group", req.Group).Uints64("jobs", req.IDs).Logger()
		ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
		defer cancel()
		res, err := do(ctx, req)
		if err != nil {
			log.Error().Err(err).Msg("dashboard action failed")
			writeError(w, http.StatusConflict, err)
			return
		}
		log.Info().Fields(res).Msg("dashboard action done")
		writeJSON(w, http.StatusOK, res)
	}
}

func (s *Server) retry(ctx context.Context, req actionRequest) (map[string]any, error) {
	n, err := s.cfg.Backend.Retry(ctx, req.Group, req.IDs)
	if err != nil {
		return nil, err
	}
	return map[string]any{"published": n}, nil
}

func (s *Server) cancel(ctx context.Context, req actionRequest) (map[string]any, error) {
	if err := s.cfg.Backend.Cancel(ctx, req.Group, req.IDs); err != nil {
		return nil, err
	}
	return map[string]any{"canceled": true}, nil
}

func toJSON(o *dispatcher.JobOutcome) jobJSON {
	j := jobJSON{Group: o.Group, ID: o.ID, Key: o.Key, State: string(o.State), Attempts: o.Attempts, Result: string(o.Result), Error: o.Err, History: []attemptJSON{}}
	for _, a := range o.History {
		j.History = append(j.History, attemptJSON{At: a.At, Worker: a.Worker, Error: a.Err})
	}
	return j
}

func infoJSON(i *dispatcher.JobInfo) jobJSON {
	j := jobJSON{Group: i.Group, ID: i.ID, Key: i.Key, State: string(i.State), Attempts: i.Attempts, Result: string(i.Result), Error: i.Err, History: []attemptJSON{},
		MaxAttempts: i.MaxAttempts, Pool: i.Pool, Worker: i.Worker, PublishedAt: i.PublishedAt, StartedAt: i.StartedAt, RetryAt: i.RetryAt, RunAt: i.RunAt, EndedAt: i.EndedAt, Waiting: i.Waiting}
	for _, a := range i.History {
		j.History = append(j.History, attemptJSON{At: a.At, Worker: a.Worker, Error: a.Err})
	}
	return j
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, map[string]string{"error": err.Error()})
}
