// Package inproc runs a whole Weave deployment inside this process, for weave demo and the
// scenarios of weave bench: a JetStream server (embedded, or an external one reached through
// Options.Dial), one namespace on it, and the components (coordinator, workers, dispatchers),
// each on its own NATS connection as a separate process would have, and each Run on its own
// goroutine and context. Close stops the components in reverse start order (workers before the
// coordinator, so that their last reports reach it), then the connections and the server.
//
// Every goroutine of a component runs under the pprof label component=<name>, so that a CPU
// profile (weave bench --cpuprofile) can be split by component.
package inproc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/integration/jstest"
	"github.com/weavejobs/weave/internal/config"
	"github.com/weavejobs/weave/internal/topology"
	"github.com/weavejobs/weave/internal/wire"
	"github.com/weavejobs/weave/worker"
)

// Options say where a Deployment runs.
type Options struct {
	// Namespace is the deployment's namespace ("" is the default namespace). On an external
	// server Close deletes its streams and lease bucket.
	Namespace string
	// Streams are more streams the caller creates (a reference's, say): on an external server
	// Close deletes them too.
	Streams []string

	// Name names the deployment's connections: "weave <Name> <component>" on the embedded
	// server, and Dial receives "<Name> <component>".
	Name string

	// Dial connects to an external NATS server. Nil: New starts an embedded server.
	Dial func(ctx context.Context, name string) (*nats.Conn, error)

	// Dir is where the embedded server stores its data: a new directory inside it, removed by
	// Close. Empty: a new temporary directory, removed too.
	Dir string

	// Joined: the namespace belongs to another deployment (in another process, say), so on an
	// external server Close leaves its streams and lease bucket to their owner.
	Joined bool

	// InProcess connects the components to the embedded server in process rather than over
	// TCP (as separate processes would).
	InProcess bool

	// Log receives the components' logs, with a "component" field. The zero Logger is silent.
	Log zerolog.Logger

	// ServerLog receives the embedded server's log. The zero Logger is silent.
	ServerLog zerolog.Logger
}

// Deployment is one namespace on a server, the connections opened in it and the components
// started in it. Its methods may be called from any goroutine.
type Deployment struct {
	opts  Options
	ctx   context.Context // bounds connecting and status queries
	srv   *jstest.Server  // nil on an external server
	dir   string          // store directory to remove after the server stopped, if New made it
	names wire.Names
	admin *nats.Conn // status queries and cleanup

	mu     sync.Mutex // guards the fields below
	conns  []*nats.Conn
	svcs   []*Service
	closed bool
}

// New starts a server (unless Options.Dial is set) and connects to it. ctx bounds the
// deployment's connecting and status queries, not the components, which run until Close.
func New(ctx context.Context, o Options) (d *Deployment, err error) {
	names, err := wire.NewNames(o.Namespace)
	if err != nil {
		return nil, fmt.Errorf("namespace: %w", err)
	}
	d = &Deployment{opts: o, ctx: ctx, names: names}
	defer func() {
		if err != nil {
			_ = d.Close()
		}
	}()
	if o.Dial == nil {
		var dir string
		if o.Dir != "" {
			if dir, err = os.MkdirTemp(o.Dir, "weave-"+names.Namespace()+"-"); err != nil {
				return d, fmt.Errorf("store directory: %w", err)
			}
			d.dir = dir
		}
		Labeled("server", func() { d.srv, err = jstest.Start(ctx, jstest.Options{Dir: dir, Logger: o.ServerLog}) })
		if err != nil {
			return d, fmt.Errorf("start embedded NATS server: %w", err)
		}
	}
	if d.admin, err = d.Connect(o.Name); err != nil {
		return d, err
	}
	return d, nil
}

// Labeled runs fn with the pprof label component=name; goroutines fn starts inherit it.
func Labeled(name string, fn func()) {
	pprof.Do(context.Background(), pprof.Labels("component", name), func(context.Context) { fn() })
}

// Namespace is the deployment's namespace.
func (d *Deployment) Namespace() string { return d.names.Namespace() }

// Names are the namespace's stream, subject and bucket names.
func (d *Deployment) Names() wire.Names { return d.names }

// External reports whether the deployment runs on an external server.
func (d *Deployment) External() bool { return d.srv == nil }

// ServerVersion is the version of the server the deployment runs on.
func (d *Deployment) ServerVersion() string { return d.admin.ConnectedServerVersion() }

// Connect opens a connection for a component, its goroutines labeled with it. Close closes it.
func (d *Deployment) Connect(component string) (nc *nats.Conn, err error) {
	Labeled(component, func() {
		switch {
		case d.srv == nil:
			nc, err = d.opts.Dial(d.ctx, d.opts.Name+" "+component)
		case d.opts.InProcess:
			nc, err = d.srv.ConnectInProcess()
		default:
			nc, err = nats.Connect(d.srv.ClientURL(), nats.Name("weave "+d.opts.Name+" "+component))
		}
	})
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", component, err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		nc.Close()
		return nil, errors.New("deployment closed")
	}
	d.conns = append(d.conns, nc)
	return nc, nil
}

// Service is a component's Run, on its own goroutine and context.
type Service struct {
	name     string
	cancel   context.CancelFunc
	done     chan struct{} // closed when run returned; err is set before
	err      error
	stopping atomic.Bool // Stop was called: the end is not a failure
	once     sync.Once
	stopErr  error // set once by Stop
}

// Run runs a component's run function under the pprof label component=name until the Service's
// Stop or Close.
func (d *Deployment) Run(name string, run func(context.Context) error) *Service {
	return d.run(name, name, run)
}

// run is Run with a label apart from the name that errors give: the component's kind, so that a
// profile adds up all workers.
func (d *Deployment) run(label, name string, run func(context.Context) error) *Service {
	ctx, cancel := context.WithCancel(context.Background())
	svc := &Service{name: name, cancel: cancel, done: make(chan struct{})}
	Labeled(label, func() {
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

// Stop cancels the component and waits for it; it returns its error, if it failed. Calling it
// again returns the same.
func (s *Service) Stop() error {
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

// Failed returns the error of a component that stopped on its own, if any.
func (d *Deployment) Failed() error {
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

// Close stops the components in reverse start order (workers before the coordinator), deletes
// the namespace's streams and lease bucket on an external server, closes the connections and
// stops the embedded server. It returns the components' errors. Calling it again does nothing.
func (d *Deployment) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	svcs, conns := d.svcs, d.conns
	d.svcs, d.conns = nil, nil
	d.mu.Unlock()
	var errs []error
	for _, s := range slices.Backward(svcs) {
		errs = append(errs, s.Stop())
	}
	if d.srv == nil && d.admin != nil && !d.opts.Joined {
		errs = append(errs, deleteNamespace(d.admin, d.names, d.opts.Streams))
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
	return errors.Join(errs...)
}

// cleanupTimeout bounds deleting a namespace's streams and bucket.
const cleanupTimeout = 30 * time.Second

// deleteNamespace deletes a namespace's streams and lease bucket, and the other streams named.
func deleteNamespace(nc *nats.Conn, names wire.Names, other []string) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	var errs []error
	var streams []string
	for _, cfg := range topology.Streams(names, config.StreamOptions{}) { // every stream of the namespace
		streams = append(streams, cfg.Name)
	}
	for _, s := range append(streams, other...) {
		if err := js.DeleteStream(ctx, s); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			errs = append(errs, fmt.Errorf("delete stream %s: %w", s, err))
		}
	}
	for _, b := range []string{names.LeaseBucket(), names.KeyBucket()} {
		if err := js.DeleteKeyValue(ctx, b); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
			errs = append(errs, fmt.Errorf("delete bucket %s: %w", b, err))
		}
	}
	return errors.Join(errs...)
}

func (d *Deployment) logger(component string) zerolog.Logger {
	return d.opts.Log.With().Str("component", component).Logger()
}

// Coordinator starts a coordinator with cfg (its Namespace and Logger set by the deployment)
// and waits until it answers status requests.
func (d *Deployment) Coordinator(cfg coordinator.Config) error {
	if _, err := d.StartCoordinator(cfg); err != nil {
		return err
	}
	return d.WaitStatus(Answering)
}

// Answering is the WaitStatus condition met by any status answer: a coordinator is running.
func Answering(*coordinator.Status) (bool, string) { return true, "" }

// StartCoordinator starts a coordinator as Coordinator does, without waiting for it, and returns
// its Service so that the caller can stop it (a clean stop gives up its lease at once).
func (d *Deployment) StartCoordinator(cfg coordinator.Config) (*Service, error) {
	nc, err := d.Connect("coordinator")
	if err != nil {
		return nil, err
	}
	cfg.Namespace = d.Namespace()
	cfg.Logger = d.logger("coordinator")
	c, err := coordinator.New(nc, cfg)
	if err != nil {
		return nil, err
	}
	return d.Run("coordinator", c.Run), nil
}

// Worker starts a worker with cfg (its Namespace and Logger set by the deployment) and handler h
// on its own connection.
func (d *Deployment) Worker(cfg worker.Config, h worker.HandlerFunc) (*worker.Worker, *Service, error) {
	nc, err := d.Connect("worker")
	if err != nil {
		return nil, nil, err
	}
	cfg.Namespace = d.Namespace()
	cfg.Logger = d.logger("worker")
	name := "worker"
	if cfg.ID != "" {
		cfg.Logger = cfg.Logger.With().Str("worker", cfg.ID).Logger()
		name += " " + cfg.ID
	}
	w, err := worker.New(nc, cfg, h)
	if err != nil {
		return nil, nil, err
	}
	return w, d.run("worker", name, w.Run), nil
}

// Dispatcher returns a dispatcher on its own connection.
func (d *Deployment) Dispatcher() (*dispatcher.Dispatcher, error) {
	disp, _, err := d.DispatcherConn()
	return disp, err
}

// DispatcherConn is Dispatcher that also returns the dispatcher's connection, for a caller that
// closes it before Close (a fleet of producers replaced by another).
func (d *Deployment) DispatcherConn() (*dispatcher.Dispatcher, *nats.Conn, error) {
	nc, err := d.Connect("dispatcher")
	if err != nil {
		return nil, nil, err
	}
	disp, err := dispatcher.New(nc, dispatcher.Config{Namespace: d.Namespace(), Logger: d.logger("dispatcher")})
	return disp, nc, err
}

// ClientURL is the embedded server's client URL, for another process to connect to; "" on an
// external server.
func (d *Deployment) ClientURL() string {
	if d.srv == nil {
		return ""
	}
	return d.srv.ClientURL()
}

// statusTimeout bounds one status query.
const statusTimeout = 5 * time.Second

// Status asks the coordinator for its status.
func (d *Deployment) Status() (*coordinator.Status, error) {
	ctx, cancel := context.WithTimeout(d.ctx, statusTimeout)
	defer cancel()
	return coordinator.QueryStatus(ctx, d.admin, d.Namespace())
}

// WaitTimeout bounds WaitStatus, and is a fair bound for other waits on a deployment.
const WaitTimeout = 60 * time.Second

// WaitStatus polls the coordinator's status until ready accepts it, a component fails, the
// deployment's context ends or a minute passes. ready returns false and what it waits for.
func (d *Deployment) WaitStatus(ready func(*coordinator.Status) (bool, string)) error {
	return d.WaitStatusWithin(WaitTimeout, ready)
}

// WaitStatusWithin is WaitStatus with another bound than WaitTimeout.
func (d *Deployment) WaitStatusWithin(timeout time.Duration, ready func(*coordinator.Status) (bool, string)) error {
	ctx, cancel := context.WithTimeout(d.ctx, timeout)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	waiting := "the coordinator"
	for {
		if err := d.Failed(); err != nil {
			return err
		}
		qctx, qcancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := coordinator.QueryStatus(qctx, d.admin, d.Namespace())
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

// FleetReady accepts a status once the coordinator counts the given workers and slots: every
// worker started has announced itself.
func FleetReady(workers, slots int) func(*coordinator.Status) (bool, string) {
	return func(st *coordinator.Status) (bool, string) {
		n := 0
		for _, p := range st.Pools {
			n += p.Slots
		}
		live := max(st.WorkerCount, len(st.Workers)) // the list may be cut to fit the max payload
		return live == workers && n == slots,
			fmt.Sprintf("the coordinator to know %d workers with %d slots (it knows %d with %d)", workers, slots, live, n)
	}
}

// StoredMessages is how many messages each of the namespace's job streams (JOBS, WORK, EVENTS,
// RESULTS) has stored since it was created, removed ones included: its last sequence.
func (d *Deployment) StoredMessages() (map[string]uint64, error) {
	js, err := jetstream.New(d.admin)
	if err != nil {
		return nil, err
	}
	out := make(map[string]uint64, 4)
	for _, name := range []string{d.names.JobsStream(), d.names.WorkStream(), d.names.EventsStream(), d.names.ResultsStream()} {
		s, err := js.Stream(d.ctx, name)
		if err != nil {
			return nil, fmt.Errorf("stream %s: %w", name, err)
		}
		out[strings.TrimPrefix(name, d.names.Namespace()+"_")] = s.CachedInfo().State.LastSeq
	}
	return out, nil
}
