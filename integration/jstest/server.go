package jstest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/weavejobs/weave/internal/testwait"
)

// host is the only interface servers listen on.
const host = "127.0.0.1"

// ErrStopped is returned by calls that need a running server while it is stopped.
var ErrStopped = errors.New("jstest: server is stopped")

// ErrShutdown is returned by Restart after Shutdown.
var ErrShutdown = errors.New("jstest: server is shut down")

// Options configures Start and StartCluster. The zero value is ready to use.
type Options struct {
	// Dir is where JetStream stores its data. Empty means a new temporary directory that
	// Shutdown removes; a Dir you name is kept. In a cluster each node stores in a
	// subdirectory of Dir named after the node.
	Dir string

	// Port is the client port on 127.0.0.1. Zero picks a free port. A cluster always picks
	// free ports, so Port must be zero for StartCluster.
	Port int

	// Logger receives the server log, with a "server" field naming the node. The zero Logger
	// is silent. At debug or trace level the server's own debug or trace logging is turned
	// on too (trace logs every protocol message).
	Logger zerolog.Logger
}

// Server is an embedded NATS server with JetStream, listening on 127.0.0.1.
//
// A Server can be stopped and restarted with its data, client port and name unchanged,
// which is how tests simulate a crash or a failover. All methods are safe for concurrent
// use.
type Server struct {
	name      string
	storeDir  string
	tempDir   bool   // storeDir was made by Start and is removed by Shutdown
	clientURL string // fixed by the first start, so restarts keep it
	port      int    // client port, fixed like clientURL
	log       zerolog.Logger
	cluster   *clusterConfig // nil for a single node

	// lifecycle serializes Restart, Stop and Shutdown, so none of them sees another half done.
	lifecycle sync.Mutex

	mu     sync.Mutex     // guards ns, logger and shut
	ns     *server.Server // nil while stopped
	logger *serverLogger  // ns's logger
	shut   bool
}

// clusterConfig is what a node needs to join its cluster, again after a restart.
type clusterConfig struct {
	name  string
	port  int   // this node's route port
	ports []int // every node's route port, this node's own included (the server skips it)
}

// Start starts a single-node JetStream server and returns once it accepts client
// connections with JetStream enabled. If ctx has no deadline, Start gives up after
// DefaultTimeout.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if opts.Port < 0 {
		return nil, fmt.Errorf("jstest: Port %d is negative", opts.Port)
	}
	s, err := newServer("jstest", opts.Dir, opts)
	if err != nil {
		return nil, err
	}
	s.port = opts.Port
	if err := s.start(ctx); err != nil {
		s.Shutdown()
		return nil, err
	}
	return s, nil
}

// newServer prepares a Server without starting it: it makes the temporary store directory
// when dir is empty.
func newServer(name, dir string, opts Options) (*Server, error) {
	s := &Server{
		name:     name,
		storeDir: dir,
		log:      opts.Logger.With().Str("server", name).Logger(),
	}
	if dir == "" {
		d, err := os.MkdirTemp("", "jstest-"+name+"-")
		if err != nil {
			return nil, fmt.Errorf("jstest: store directory: %w", err)
		}
		s.storeDir, s.tempDir = d, true
	}
	return s, nil
}

// start starts the NATS server and waits until it is ready: listening, JetStream enabled
// and, in a cluster, caught up with a known meta leader. On failure the server is stopped.
func (s *Server) start(ctx context.Context) error {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()

	ns, logger, err := s.launch()
	if err != nil {
		return err
	}
	if err := testwait.Until(ctx, testwait.Interval, func() (string, error) { return nodeWaiting(ns, logger, s.cluster != nil) }); err != nil {
		s.stop()
		return fmt.Errorf("jstest: start %s: %w", s.name, err)
	}
	return nil
}

// launch creates and starts the NATS server without waiting for it.
func (s *Server) launch() (*server.Server, *serverLogger, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shut {
		return nil, nil, ErrShutdown
	}
	if s.ns != nil {
		return nil, nil, fmt.Errorf("jstest: %s is already running", s.name)
	}

	port := s.port
	if port == 0 {
		// A port outside the ephemeral range, which Restart can bind again (see freePorts).
		ports, err := freePorts(1)
		if err != nil {
			return nil, nil, err
		}
		port = ports[0]
	}
	o := &server.Options{
		ServerName: s.name,
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   s.storeDir,
		NoLog:      true,
		NoSigs:     true, // an embedded server must not take over the process's signals
	}
	if c := s.cluster; c != nil {
		o.Cluster.Name = c.name
		o.Cluster.Host = host
		o.Cluster.Port = c.port
		for _, p := range c.ports {
			o.Routes = append(o.Routes, &url.URL{Scheme: "nats-route", Host: hostPort(p)})
		}
	}
	ns, err := server.NewServer(o)
	if err != nil {
		return nil, nil, fmt.Errorf("jstest: %s: %w", s.name, err)
	}
	logger := &serverLogger{log: s.log}
	ns.SetLogger(logger, enabled(s.log, zerolog.DebugLevel), enabled(s.log, zerolog.TraceLevel))
	ns.Start()
	s.ns, s.logger = ns, logger

	if s.clientURL == "" {
		// The client listener is set up by Start; a nil Addr means it failed, which the
		// logger has recorded and start reports.
		if a, ok := ns.Addr().(*net.TCPAddr); ok {
			s.port = a.Port
			s.clientURL = "nats://" + hostPort(a.Port)
		}
	}
	return ns, logger, nil
}

// nodeWaiting says what a node is still waiting for, or "" when it is ready. It returns an
// error when the server has failed to start.
func nodeWaiting(ns *server.Server, logger *serverLogger, clustered bool) (string, error) {
	if err := logger.fatal(); err != nil {
		return "", err
	}
	switch {
	case ns.Addr() == nil:
		return "the client listener", nil
	case clustered && ns.ClusterAddr() == nil:
		return "the route listener", nil
	case !ns.JetStreamEnabled():
		return "JetStream", nil
	case !clustered:
		return "", nil
	}
	// Current alone is not enough: a restarted node that replayed its log is "current"
	// before it has heard from any leader.
	jsi, err := ns.Jsz(&server.JSzOptions{})
	if err != nil || jsi.Meta == nil || jsi.Meta.Leader == "" {
		return "a meta leader", nil
	}
	if !ns.JetStreamIsCurrent() {
		return "the meta group to catch up", nil
	}
	return "", nil
}

// ClientURL returns the server's client URL, nats://127.0.0.1:port. It stays the same
// across restarts.
func (s *Server) ClientURL() string { return s.clientURL }

// Name returns the server name, as it appears in stream and consumer cluster info.
func (s *Server) Name() string { return s.name }

// StoreDir returns the directory where JetStream stores this server's data.
func (s *Server) StoreDir() string { return s.storeDir }

// NATS returns the running nats-server, or nil while the server is stopped. It is an escape
// hatch for what this package does not cover; a restart replaces it.
func (s *Server) NATS() *server.Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ns
}

// running returns the running nats-server and its logger, or nils while stopped.
func (s *Server) running() (*server.Server, *serverLogger) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ns, s.logger
}

// Connect opens a TCP connection to the server.
func (s *Server) Connect(opts ...nats.Option) (*nats.Conn, error) {
	return nats.Connect(s.clientURL, opts...)
}

// ConnectInProcess opens a connection that bypasses TCP. It is bound to the running
// nats-server, so unlike a TCP connection it cannot reconnect after a restart.
func (s *Server) ConnectInProcess(opts ...nats.Option) (*nats.Conn, error) {
	ns := s.NATS()
	if ns == nil {
		return nil, ErrStopped
	}
	return nats.Connect("", append([]nats.Option{nats.InProcessServer(ns)}, opts...)...)
}

// Stop shuts the server down and waits until it has stopped, keeping its data for Restart.
// Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.lifecycle.Lock()
	defer s.lifecycle.Unlock()
	s.stop()
}

func (s *Server) stop() {
	s.mu.Lock()
	ns := s.ns
	s.ns, s.logger = nil, nil
	s.mu.Unlock()
	if ns != nil {
		ns.Shutdown()
		ns.WaitForShutdown()
	}
}

// Restart stops the server if it is running and starts it again with the same name, client
// port, store and, in a cluster, route port. It returns once the server is ready, as Start
// does; a clustered node is ready when it has caught up with the cluster's meta leader.
// A server that is not ready in time (DefaultTimeout if ctx has no deadline) is left
// stopped.
func (s *Server) Restart(ctx context.Context) error {
	s.lifecycle.Lock()
	defer s.lifecycle.Unlock()
	s.stop()
	// The server listens on the ports it had. Once they were free, the system may have given
	// one to another socket for a while (an outgoing connection's local port): CI once failed
	// with "bind: address already in use". Try again for up to restartBindRetry.
	rctx, cancel := context.WithTimeout(ctx, restartBindRetry)
	defer cancel()
	var err error
	_ = testwait.Until(rctx, 100*time.Millisecond, func() (string, error) {
		if err = s.start(ctx); err == nil || !strings.Contains(err.Error(), "address already in use") {
			return "", nil
		}
		return "its ports to be free", nil
	})
	return err // start's last: when the ports stayed in use, that says so
}

// restartBindRetry bounds how long Restart tries again to listen on a port in use.
const restartBindRetry = 10 * time.Second

// Shutdown stops the server, waits until it has stopped and removes the temporary store
// directory if Start made one. It is safe to call more than once.
func (s *Server) Shutdown() {
	s.lifecycle.Lock()
	defer s.lifecycle.Unlock()
	s.stop()
	s.mu.Lock()
	already := s.shut
	s.shut = true
	s.mu.Unlock()
	if !already && s.tempDir {
		os.RemoveAll(s.storeDir) // best effort: the OS cleans its temp dir eventually
	}
}

func hostPort(port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }

// enabled reports whether l writes events at level lvl.
func enabled(l zerolog.Logger, lvl zerolog.Level) bool {
	e := l.WithLevel(lvl)
	defer e.Discard()
	return e.Enabled()
}

// ServerGoroutineLeaks names goroutines nats-server v2.15.2 may leave running after Shutdown:
// it never stops the write-ahead log of a Raft group it creates while shutting down
// (createRaftGroup makes the file store, then startRaftNode fails for want of the system account,
// which shutdown has cleared). A cluster test that ends while a replica of a new stream or
// consumer is still being set up leaks these, rarely. Tests that check for leaks (goleak) should
// ignore them: goleak.IgnoreTopFunction(name) for each.
var ServerGoroutineLeaks = []string{
	"github.com/nats-io/nats-server/v2/server.(*fileStore).flushStreamStateLoop",
	"github.com/nats-io/nats-server/v2/server/ats.Register.func1",
}
