package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/weavejobs/weave/internal/safetext"
	"github.com/weavejobs/weave/internal/wire"
)

// connFlags are the flags every command that talks to a NATS server shares: where the server
// is, how to authenticate, and the Weave namespace.
type connFlags struct {
	url       string
	creds     string
	nkey      string
	user      string
	password  string
	token     string
	tlsCert   string
	tlsKey    string
	tlsCA     string
	inbox     string
	namespace string
	// timeout bounds each wait of a short-lived command on the server or the coordinator
	// (connecting, a request, an acknowledgement, an answer); 0 for long-running commands.
	timeout time.Duration
}

// defaultTimeout is --timeout of the commands that make a few requests: status, cancel, failed
// list, init. Commands that publish many jobs (submit, failed retry) default to the dispatcher's
// DefaultRequestTimeout.
const defaultTimeout = 5 * time.Second

// registerTimeout adds --timeout to a short-lived command's flags.
func (f *connFlags) registerTimeout(fs *pflag.FlagSet, def time.Duration) {
	fs.DurationVar(&f.timeout, "timeout", def, "how long to wait for each answer of the NATS server or the coordinator (connecting included)")
}

// register adds the connection flags to fs. The server URL and namespace default to $NATS_URL
// and $WEAVE_NAMESPACE when set.
func (f *connFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.url, "nats", envOr("NATS_URL", nats.DefaultURL), "NATS server URL(s), comma-separated ($NATS_URL)")
	fs.StringVar(&f.creds, "creds", "", "NATS credentials file (JWT and NKey seed)")
	fs.StringVar(&f.nkey, "nkey", "", "NATS NKey seed file")
	fs.StringVar(&f.user, "user", "", "NATS user name")
	fs.StringVar(&f.password, "password", "", "NATS password")
	fs.StringVar(&f.token, "token", "", "NATS authentication token")
	fs.StringVar(&f.tlsCert, "tlscert", "", "TLS client certificate file")
	fs.StringVar(&f.tlsKey, "tlskey", "", "TLS client private key file")
	fs.StringVar(&f.tlsCA, "tlsca", "", "TLS certificate authority file to verify the server")
	fs.StringVar(&f.inbox, "inbox-prefix", "", "prefix of this client's reply subjects (default _INBOX); weave auth gives each role its own")
	registerNamespace(fs, &f.namespace)
}

func registerNamespace(fs *pflag.FlagSet, ns *string) {
	fs.StringVar(ns, "namespace", envOr("WEAVE_NAMESPACE", wire.DefaultNamespace), "Weave namespace: 1-32 characters of [A-Za-z0-9_-] ($WEAVE_NAMESPACE)")
}

// validate checks the flags that can be checked without connecting.
func (f *connFlags) validate() error {
	if _, err := wire.NewNames(f.namespace); err != nil {
		return usageError{err}
	}
	if (f.tlsCert == "") != (f.tlsKey == "") {
		return usageErrorf("--tlscert and --tlskey go together")
	}
	if f.password != "" && f.user == "" {
		return usageErrorf("--password needs --user")
	}
	return nil
}

// connect opens a connection named after the command. A long-running command (coordinator,
// worker) keeps reconnecting for as long as it runs, and waits until ctx is done for a server
// that is not up yet.
func (f *connFlags) connect(ctx context.Context, name string, longRunning bool, log zerolog.Logger) (*nats.Conn, error) {
	if err := f.validate(); err != nil {
		return nil, err
	}
	opts := []nats.Option{nats.Name("weave " + name)}
	if f.timeout > 0 {
		opts = append(opts, nats.Timeout(f.timeout))
	}
	if f.creds != "" {
		opts = append(opts, nats.UserCredentials(f.creds))
	}
	if f.nkey != "" {
		o, err := nats.NkeyOptionFromSeed(f.nkey)
		if err != nil {
			return nil, fmt.Errorf("nkey %s: %w", f.nkey, err)
		}
		opts = append(opts, o)
	}
	if f.user != "" {
		opts = append(opts, nats.UserInfo(f.user, f.password))
	}
	if f.token != "" {
		opts = append(opts, nats.Token(f.token))
	}
	if f.tlsCert != "" {
		opts = append(opts, nats.ClientCert(f.tlsCert, f.tlsKey))
	}
	if f.tlsCA != "" {
		opts = append(opts, nats.RootCAs(f.tlsCA))
	}
	if f.inbox != "" {
		opts = append(opts, nats.CustomInboxPrefix(f.inbox))
	}
	connected := make(chan struct{})
	var disconnectedAt time.Time // written and read by the client's handlers, one goroutine
	if longRunning {
		opts = append(opts,
			nats.MaxReconnects(-1),
			nats.RetryOnFailedConnect(true),
			// Called only when the first connection succeeds after a failed attempt.
			nats.ConnectHandler(func(*nats.Conn) { close(connected) }),
			// A lost connection that the client mends is logged at info, when it is lost and
			// when it is back (the client calls both handlers from one goroutine).
			nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
				if err != nil { // nil: we closed the connection
					disconnectedAt = time.Now()
					log.Info().Err(err).Msg("disconnected from NATS; reconnecting")
				}
			}),
			nats.ReconnectHandler(func(nc *nats.Conn) {
				e := log.Info().Str("url", nc.ConnectedUrlRedacted())
				if !disconnectedAt.IsZero() {
					e = e.Stringer("after", time.Since(disconnectedAt).Round(time.Millisecond))
				}
				e.Msg("reconnected to NATS")
			}),
		)
	}
	nc, err := nats.Connect(f.url, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", f.url, err)
	}
	if longRunning && !nc.IsConnected() {
		log.Warn().Str("url", f.url).Msg("NATS server not reachable yet, waiting for it")
		select {
		case <-connected:
		case <-ctx.Done():
			nc.Close()
			return nil, fmt.Errorf("connect to NATS at %s: %w", f.url, context.Cause(ctx))
		}
	}
	return nc, nil
}

// cmdConn is a short-lived command's connection. Its context ends, with the server's error as
// its cause, as soon as the server refuses something the command did for lack of permission: the
// server answers a refused publish or subscription only with an asynchronous error, and the
// request behind it would otherwise wait for its timeout (or for ever) and then say nothing of
// the reason.
type cmdConn struct {
	ctx    context.Context
	nc     *nats.Conn
	cancel context.CancelCauseFunc
}

// open connects a short-lived command (see cmdConn).
func (f *connFlags) open(ctx context.Context, name string, log zerolog.Logger) (*cmdConn, error) {
	nc, err := f.connect(ctx, name, false, log)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			cancel(err)
		}
	})
	return &cmdConn{ctx: ctx, nc: nc, cancel: cancel}, nil
}

// close drains and closes the connection.
func (s *cmdConn) close() {
	closeConn(s.nc)
	s.cancel(nil)
}

// explain returns err, adding the server's refusal if one ended the connection's context.
func (s *cmdConn) explain(err error) error {
	cause := context.Cause(s.ctx)
	if err == nil || cause == nil || !errors.Is(cause, nats.ErrPermissionViolation) || errors.Is(err, nats.ErrPermissionViolation) {
		return err
	}
	return fmt.Errorf("%w: refused by the NATS server: %w", err, cause)
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// newLogger returns a human-readable logger writing to w at the named level.
func newLogger(w io.Writer, level string) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(strings.ToLower(level))
	if err != nil || level == "" {
		return zerolog.Nop(), fmt.Errorf("--log-level %q: want debug, info, warn, error or disabled", level)
	}
	color := isTerminal(w)
	cw := zerolog.ConsoleWriter{Out: w, TimeFormat: "15:04:05.000", NoColor: !color}
	// Messages and fields quote group IDs, keys and errors: shown safely, never interpreted by
	// the terminal.
	cw.FormatMessage = func(i any) string {
		if i == nil {
			return ""
		}
		return safetext.Line(fmt.Sprint(i))
	}
	cw.FormatFieldValue = func(i any) string { return safetext.Line(fmt.Sprintf("%s", i)) }
	cw.FormatErrFieldValue = func(i any) string {
		if !color {
			return safetext.Line(fmt.Sprintf("%s", i))
		}
		return "\x1b[31m" + safetext.Line(fmt.Sprintf("%s", i)) + "\x1b[0m" // red, as zerolog's own
	}
	return zerolog.New(cw).Level(lvl).With().Timestamp().Logger(), nil
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// signalContext returns a context canceled by the first SIGINT or SIGTERM. After that the
// signals get their default behavior back, so a second one ends the process at once.
func signalContext(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop()
	}()
	return ctx, stop
}

// contextWithTimeout is context.WithTimeout, except that a timeout of 0 means none.
func contextWithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

// closeConn drains nc, so that messages it has buffered are sent, and closes it.
func closeConn(nc *nats.Conn) {
	done := make(chan struct{})
	nc.SetClosedHandler(func(*nats.Conn) { close(done) })
	if err := nc.Drain(); err != nil {
		nc.Close()
		return
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		nc.Close()
	}
}

// checkGroupFlag checks a required --group flag, as a usage error.
func checkGroupFlag(group string) error {
	if group == "" {
		return usageErrorf("--group is required")
	}
	if err := wire.ValidateGroupID(group); err != nil {
		return usageErrorf("--group: %v", err)
	}
	return nil
}
