package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/integration/jstest"
	"github.com/weavejobs/weave/internal/wire"
	"github.com/weavejobs/weave/worker"
)

// Env says where the scenarios run. The zero value runs each scenario on its own embedded
// JetStream server (file storage in a new temporary directory, removed at the end), silently.
type Env struct {
	// Dial connects to an external NATS server, naming the connection after the component that
	// uses it. Nil: every scenario starts its own embedded server.
	Dial func(ctx context.Context, name string) (*nats.Conn, error)

	// Dir is where embedded servers store their data: a new directory inside it per scenario,
	// removed when the scenario ends. Empty: the system's temporary directory.
	Dir string

	// NamespacePrefix starts the name of the fresh namespace each scenario uses (and deletes at
	// its end on an external server): prefix-scenario-random. Default "bench".
	NamespacePrefix string

	// Log receives the components' logs. The zero Logger is silent.
	Log zerolog.Logger

	// Progress receives a line per step of a scenario. Nil: none.
	Progress io.Writer

	// ChildCommand, if set, runs each scale measurement in a fresh process, so that its heap
	// holds nothing but that measurement's deployment: the command (program and arguments) that
	// runs RunScaleChild with the next argument as its spec, as weave bench --scale-child does.
	// Nil: the measurements run in this process.
	ChildCommand []string
	// ChildEnv is added to this process's environment for the child processes (secrets that
	// should not appear on a command line).
	ChildEnv []string
}

func (e *Env) progressf(format string, args ...any) {
	if e.Progress != nil {
		fmt.Fprintf(e.Progress, format+"\n", args...)
	}
}

// Validate checks the namespace prefix: every scenario's namespace must be valid.
func (e *Env) Validate() error {
	prefix := e.NamespacePrefix
	if prefix == "" {
		prefix = "bench"
	}
	if _, err := wire.NewNames(prefix + "-spread-000000"); err != nil {
		return fmt.Errorf("namespace prefix %q: at most 18 characters of [A-Za-z0-9_-]", prefix)
	}
	return nil
}

// External reports whether the scenarios run on an external server.
func (e *Env) External() bool { return e.Dial != nil }

// labeled runs fn with the pprof label component=name; goroutines fn starts inherit it, so a CPU
// profile of a bench run (weave bench --cpuprofile) can be split by component.
func labeled(name string, fn func()) {
	pprof.Do(context.Background(), pprof.Labels("component", name), func(context.Context) { fn() })
}

// deployment is one scenario's Weave: a fresh namespace on a server, the connections and the
// components started in it. close stops everything in reverse order.
type deployment struct {
	env   *Env
	ctx   context.Context
	srv   *jstest.Server // nil on an external server
	dir   string         // store directory to remove after the server stopped, if we made it
	names wire.Names
	admin *nats.Conn // status queries and cleanup

	mu    sync.Mutex
	conns []*nats.Conn
	svcs  []*service
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// deploy starts a server (unless external) and picks a fresh namespace tagged with the scenario.
func (e *Env) deploy(ctx context.Context, tag string) (d *deployment, err error) {
	prefix := e.NamespacePrefix
	if prefix == "" {
		prefix = "bench"
	}
	names, err := wire.NewNames(prefix + "-" + tag + "-" + randomHex(3))
	if err != nil {
		return nil, fmt.Errorf("namespace: %w", err)
	}
	d = &deployment{env: e, ctx: ctx, names: names}
	defer func() {
		if err != nil {
			_ = d.close()
		}
	}()
	if e.Dial == nil {
		var dir string
		if e.Dir != "" {
			if dir, err = os.MkdirTemp(e.Dir, "weave-bench-"+tag+"-"); err != nil {
				return d, fmt.Errorf("store directory: %w", err)
			}
			d.dir = dir
		}
		labeled("server", func() { d.srv, err = jstest.Start(ctx, jstest.Options{Dir: dir}) })
		if err != nil {
			return d, fmt.Errorf("start embedded NATS server: %w", err)
		}
	}
	if d.admin, err = d.connect("bench"); err != nil {
		return d, err
	}
	return d, nil
}

// ns is the deployment's namespace.
func (d *deployment) ns() string { return d.names.Namespace() }

// connect opens a connection for a component, its goroutines labeled with it. On the embedded
// server it is a TCP connection, as a separate process would have.
func (d *deployment) connect(component string) (nc *nats.Conn, err error) {
	labeled(component, func() {
		if d.srv != nil {
			nc, err = nats.Connect(d.srv.ClientURL(), nats.Name("weave bench "+component))
		} else {
			nc, err = d.env.Dial(d.ctx, "bench "+component)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", component, err)
	}
	d.mu.Lock()
	d.conns = append(d.conns, nc)
	d.mu.Unlock()
	return nc, nil
}

// serverVersion is the version of the server the deployment runs on.
func (d *deployment) serverVersion() string { return d.admin.ConnectedServerVersion() }

// service is a component's Run, on its own goroutine and context.
type service struct {
	name     string
	cancel   context.CancelFunc
	done     chan struct{} // closed when run returned; err is set before
	err      error
	stopping atomic.Bool // stop was called: its end is not a failure
	once     sync.Once
	stopErr  error
}

// start runs a component under its pprof label until stop or close.
func (d *deployment) start(name string, run func(context.Context) error) *service {
	ctx, cancel := context.WithCancel(context.Background())
	svc := &service{name: name, cancel: cancel, done: make(chan struct{})}
	labeled(name, func() {
		go func() {
			defer close(svc.done)
			svc.err = run(ctx)
		}()
	})
	d.mu.Lock()
	d.svcs = append(d.svcs, svc)
	d.mu.Unlock()
	return svc
}

// stopTimeout bounds how long a component may take to stop.
const stopTimeout = 30 * time.Second

// stop cancels the component and waits for it; it returns its error, if it failed. Calling it
// again returns the same.
func (s *service) stop() error {
	s.once.Do(func() {
		s.stopping.Store(true)
		s.cancel()
		select {
		case <-s.done:
		case <-time.After(stopTimeout):
			s.stopErr = fmt.Errorf("%s did not stop within %v", s.name, stopTimeout)
			return
		}
		if s.err != nil && !errors.Is(s.err, context.Canceled) {
			s.stopErr = fmt.Errorf("%s: %w", s.name, s.err)
		}
	})
	return s.stopErr
}

// failed returns the error of a component that stopped on its own, if any.
func (d *deployment) failed() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range d.svcs {
		if s.stopping.Load() {
			continue
		}
		select {
		case <-s.done:
			if s.err == nil {
				return fmt.Errorf("%s stopped", s.name)
			}
			return fmt.Errorf("%s stopped: %w", s.name, s.err)
		default:
		}
	}
	return nil
}

// lastClose is when a deployment of this process last closed (UnixNano).
var lastClose atomic.Int64

// closedAgo returns how long ago a deployment of this process last closed, or a day if none did.
func closedAgo() time.Duration {
	if t := lastClose.Load(); t != 0 {
		return time.Since(time.Unix(0, t))
	}
	return 24 * time.Hour
}

// close stops the components in reverse start order (workers before the coordinator), deletes
// the namespace's streams on an external server, closes the connections and stops the embedded
// server. It returns the components' errors.
func (d *deployment) close() error {
	d.mu.Lock()
	svcs, conns := d.svcs, d.conns
	d.svcs, d.conns = nil, nil
	d.mu.Unlock()
	var errs []error
	for _, s := range slices.Backward(svcs) {
		errs = append(errs, s.stop())
	}
	if d.srv == nil && d.admin != nil {
		errs = append(errs, deleteNamespace(d.admin, d.names))
	}
	for _, nc := range conns {
		nc.Close()
	}
	if d.srv != nil {
		d.srv.Shutdown()
	}
	if d.dir != "" {
		_ = os.RemoveAll(d.dir)
	}
	lastClose.Store(time.Now().UnixNano())
	return errors.Join(errs...)
}

// deleteNamespace deletes a namespace's streams and lease bucket, and the reference stream.
func deleteNamespace(nc *nats.Conn, names wire.Names) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	for _, s := range []string{names.JobsStream(), names.WorkStream(), names.EventsStream(), names.ResultsStream(), names.RejectedStream(), rawStream(names)} {
		if err := js.DeleteStream(ctx, s); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			errs = append(errs, fmt.Errorf("delete stream %s: %w", s, err))
		}
	}
	if err := js.DeleteKeyValue(ctx, names.LeaseBucket()); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
		errs = append(errs, fmt.Errorf("delete bucket %s: %w", names.LeaseBucket(), err))
	}
	return errors.Join(errs...)
}

func (d *deployment) logger(component string) zerolog.Logger {
	return d.env.Log.With().Str("component", component).Logger()
}

// coordinator starts a coordinator with cfg in the deployment's namespace and waits until it
// answers status requests.
func (d *deployment) coordinator(cfg coordinator.Config) error {
	nc, err := d.connect("coordinator")
	if err != nil {
		return err
	}
	cfg.Namespace = d.ns()
	cfg.Logger = d.logger("coordinator")
	c, err := coordinator.New(nc, cfg)
	if err != nil {
		return err
	}
	d.start("coordinator", c.Run)
	return d.waitStatus(func(*coordinator.Status) (bool, string) { return true, "" })
}

// worker starts a worker on its own connection, as a separate process would have.
func (d *deployment) worker(cfg worker.Config, h worker.HandlerFunc) (*worker.Worker, *service, error) {
	nc, err := d.connect("worker")
	if err != nil {
		return nil, nil, err
	}
	cfg.Namespace = d.ns()
	cfg.Logger = d.logger("worker")
	w, err := worker.New(nc, cfg, h)
	if err != nil {
		return nil, nil, err
	}
	return w, d.start("worker", w.Run), nil
}

// dispatcher returns a dispatcher on its own connection.
func (d *deployment) dispatcher() (*dispatcher.Dispatcher, error) {
	nc, err := d.connect("dispatcher")
	if err != nil {
		return nil, err
	}
	return dispatcher.New(nc, dispatcher.Config{Namespace: d.ns(), Logger: d.logger("dispatcher")})
}

// status asks the coordinator for its status.
func (d *deployment) status() (*coordinator.Status, error) {
	ctx, cancel := context.WithTimeout(d.ctx, 5*time.Second)
	defer cancel()
	return coordinator.QueryStatus(ctx, d.admin, d.ns())
}

// waitTimeout bounds waitStatus.
const waitTimeout = 60 * time.Second

// waitStatus polls the coordinator's status until ready accepts it, a component fails, the
// scenario's context ends or waitTimeout passes. ready returns false and what it waits for.
func (d *deployment) waitStatus(ready func(*coordinator.Status) (bool, string)) error {
	ctx, cancel := context.WithTimeout(d.ctx, waitTimeout)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	waiting := "the coordinator"
	for {
		if err := d.failed(); err != nil {
			return err
		}
		qctx, qcancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := coordinator.QueryStatus(qctx, d.admin, d.ns())
		qcancel()
		if err == nil {
			var ok bool
			if ok, waiting = ready(st); ok {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", waiting, ctx.Err())
		case <-tick.C:
		}
	}
}

// fleetReady accepts a status once the coordinator counts the given workers and slots.
func fleetReady(workers, slots int) func(*coordinator.Status) (bool, string) {
	return func(st *coordinator.Status) (bool, string) {
		n := 0
		for _, p := range st.Pools {
			n += p.Slots
		}
		return len(st.Workers) == workers && n == slots,
			fmt.Sprintf("the coordinator to know %d workers with %d slots (it knows %d with %d)", workers, slots, len(st.Workers), n)
	}
}
