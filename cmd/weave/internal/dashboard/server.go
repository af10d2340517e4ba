// Package dashboard is weave dashboard: a web app showing a namespace live, served from assets
// embedded in the binary (hand-written HTML, CSS and JavaScript; no build step, nothing fetched at
// run time).
//
// The server polls the coordinator's status about once a second (Server.Run), keeps a few
// minutes of it to draw rates and shares over time, and pushes each new snapshot to the open
// pages with server-sent events; a page closes its stream while it is hidden. The page itself
// comes with the latest snapshot in it, so it shows what is known before its stream opens.
// Reads need only what an observer may read. Actions (retry, cancel) are off unless
// Config.AllowActions, and then each needs Config.Token in the X-Weave-Token header of a POST.
//
// Everything it serves that workers or producers wrote (errors, results, IDs, keys, names) is
// shown with internal/safetext and of bounded size: lists are paged and cut long texts, and a
// job's whole texts come one job at a time. On a loopback address it answers only for loopback
// names; beyond loopback it refuses to start without a read token and the host names it is
// reached by (CheckListener).
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
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/weavejobs/weave/internal/safetext"
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
	// ReadToken, when set, is needed by every request: as the password of HTTP basic
	// authentication (any user name; a browser asks for it) or as a bearer token. Beyond
	// loopback, without it, the action Token guards reads too (with AllowActions).
	ReadToken string
	// HostNames are the names (without port) the dashboard answers for: a request naming
	// another Host is refused, against DNS rebinding. Empty: loopback names on a loopback
	// address. A listener beyond loopback needs them (CheckListener).
	HostNames []string
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

	// loopback and exposed are set by Serve, before it serves: it listens on a loopback
	// address, or on another.
	loopback, exposed bool

	page [2][]byte // index.html split where the boot data goes (see index)

	// scans holds a token while a request reads the failed jobs: a scan reads every outcome
	// stored, so one at a time bounds the memory that many requests at once could take.
	scans chan struct{}
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
		scans:   make(chan struct{}, 1),
	}
	s.latest, _ = json.Marshal(snapshot{Error: "waiting for the first status"})
	mux := http.NewServeMux()
	// The assets by name, so that any other path is a 404 and an action's path with another
	// method a 405.
	for _, p := range []string{"/app.js", "/app.css"} {
		mux.Handle("GET "+p, s.assets)
	}
	if s.page, err = splitPage(sub); err != nil {
		return nil, err
	}
	mux.HandleFunc("GET /{$}", s.index)
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
	h := w.Header()
	// Everything comes from this server; nothing may frame it. Refusals carry these too.
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	if !s.allowed(w, r) {
		return
	}
	s.mux.ServeHTTP(w, r)
}

// Serve runs the poller and serves HTTP on ln until ctx ends; then it closes the open event
// streams and shuts the HTTP server down.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	if err := s.cfg.CheckListener(ln.Addr()); err != nil {
		return err
	}
	s.listening(ln.Addr())
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
			last.Raw, err = safeJSON(last.Raw)
			if err != nil {
				s.log.Debug().Err(err).Msg("status")
				last.Raw = nil
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
	writeJSON(w, http.StatusOK, s.pageConfig())
}

// pageConfig is what the page needs to know of the server's configuration.
func (s *Server) pageConfig() map[string]any {
	return map[string]any{
		"namespace":       safetext.Line(s.cfg.Namespace),
		"actions":         s.cfg.AllowActions,
		"interval_ms":     s.cfg.Interval.Milliseconds(),
		"history_seconds": int(s.cfg.History.Seconds()),
		"token_header":    TokenHeader,
		"page_size":       defaultPage,
	}
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

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers err, shown safely: it can quote what a producer or a worker wrote.
func writeError(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, map[string]string{"error": safetext.Line(err.Error())})
}
