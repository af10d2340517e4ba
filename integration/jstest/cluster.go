package jstest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/weavejobs/weave/internal/testwait"
)

// account is where streams live: these servers configure no accounts, so clients use the
// global account.
const account = server.DEFAULT_GLOBAL_ACCOUNT

// Cluster is a JetStream cluster of embedded servers in one process, joined by routes on
// 127.0.0.1. Its nodes are named jstest-1, jstest-2, and so on, in a cluster named jstest.
type Cluster struct {
	name    string
	servers []*Server
}

// StartCluster starts an n-node JetStream cluster, n ≥ 2 (3 is typical), and returns once
// every node accepts clients and a meta leader sees all n nodes, so streams can be created.
// opts.Port must be zero: every node picks free ports. With temporary stores (opts.Dir
// empty) a start that has not finished within 2 seconds is abandoned and begun afresh, up
// to 3 times. If ctx has no deadline, StartCluster gives up after DefaultTimeout.
func StartCluster(ctx context.Context, n int, opts Options) (*Cluster, error) {
	if n < 2 {
		// A one-node cluster never elects a meta leader; Start runs a single node.
		return nil, fmt.Errorf("jstest: a cluster needs at least 2 nodes, not %d", n)
	}
	if opts.Port != 0 {
		return nil, errors.New("jstest: a cluster picks its own ports; Port must be zero")
	}
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()

	// A new cluster usually elects its first meta leader within a second. But when two
	// nodes campaign at once neither wins, since a node with an empty log needs every
	// vote, and the next election waits out the Raft election timeout of 4 to 9 seconds.
	// A route port taken by another process also fails the start. With temporary stores,
	// starting again from scratch is quicker and cures both.
	for attempt := 1; ; attempt++ {
		retry := opts.Dir == "" && attempt < startAttempts
		attemptCtx, cancelAttempt := ctx, context.CancelFunc(func() {})
		if retry {
			attemptCtx, cancelAttempt = context.WithTimeout(ctx, startPatience)
		}
		c, err := startCluster(attemptCtx, n, opts)
		cancelAttempt()
		if err == nil {
			return c, nil
		}
		if !retry || ctx.Err() != nil {
			return nil, fmt.Errorf("jstest: start cluster: %w", err)
		}
	}
}

const (
	startAttempts = 3               // StartCluster's tries with temporary stores
	startPatience = 2 * time.Second // how long each try but the last may take
)

// startCluster makes one attempt at StartCluster, shutting down what it started if it fails.
func startCluster(ctx context.Context, n int, opts Options) (*Cluster, error) {
	// JetStream clustering needs each node to know every route up front, so the route
	// ports are chosen before any server starts.
	ports, err := freePorts(n)
	if err != nil {
		return nil, err
	}
	c := &Cluster{name: "jstest"}
	for i := range n {
		name := fmt.Sprintf("jstest-%d", i+1)
		dir := ""
		if opts.Dir != "" {
			dir = filepath.Join(opts.Dir, name)
		}
		s, err := newServer(name, dir, opts)
		if err != nil {
			c.Shutdown()
			return nil, err
		}
		s.cluster = &clusterConfig{name: c.name, port: ports[i], ports: ports}
		c.servers = append(c.servers, s)
		if _, _, err := s.launch(); err != nil {
			c.Shutdown()
			return nil, err
		}
	}
	if err := c.waitReady(ctx); err != nil {
		c.Shutdown()
		return nil, err
	}
	return c, nil
}

// freePorts finds n distinct free ports on 127.0.0.1, below the system's ephemeral range where
// it can: a restarted server binds its ports again, and a port of the ephemeral range may meanwhile
// have gone to another test's server or to an outgoing connection (CI saw "bind: address already
// in use" for a minute). It never gives a port twice in one process, so a parallel test's server
// cannot take the port of a node that is down to be restarted (CI saw that too). Another process
// could still take one before the server binds it; the server then fails to start with the bind
// error.
func freePorts(n int) ([]int, error) {
	given.Lock()
	defer given.Unlock()
	if given.ports == nil {
		given.ports = map[int]bool{}
	}
	// The listeners stay open until all are found, so the ports differ.
	ports := make([]int, 0, n)
	listeners := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	low := ephemeralLow()
	for tries := 0; len(ports) < n; tries++ {
		port := 0 // the system's choice, once the range below the ephemeral one seems full
		if low > minTestPort+1000 && tries < 100 {
			port = minTestPort + rand.IntN(low-minTestPort)
		}
		if given.ports[port] {
			continue
		}
		l, err := net.Listen("tcp", hostPort(port))
		if err != nil {
			if port != 0 {
				continue
			}
			return nil, fmt.Errorf("jstest: find a free port: %w", err)
		}
		listeners = append(listeners, l)
		if got := l.Addr().(*net.TCPAddr).Port; !given.ports[got] {
			ports = append(ports, got)
		}
	}
	for _, p := range ports {
		given.ports[p] = true
	}
	return ports, nil
}

// given holds the ports freePorts has given in this process.
var given struct {
	sync.Mutex
	ports map[int]bool
}

// minTestPort is the lowest port freePorts picks: above the registered services' usual ones.
const minTestPort = 20000

// ephemeralLow is the first port of the system's ephemeral range (Linux), or 0 if unknown.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0
	}
	low, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return low
}

// Servers returns the cluster's nodes in order. Stop and Restart them to test failover.
func (c *Cluster) Servers() []*Server { return slices.Clone(c.servers) }

// ClientURL returns the client URLs of all nodes, separated by commas, as nats.Connect
// accepts them.
func (c *Cluster) ClientURL() string {
	urls := make([]string, len(c.servers))
	for i, s := range c.servers {
		urls[i] = s.ClientURL()
	}
	return strings.Join(urls, ",")
}

// Connect opens a TCP connection to the cluster; it can fail over to any node.
func (c *Cluster) Connect(opts ...nats.Option) (*nats.Conn, error) {
	return nats.Connect(c.ClientURL(), opts...)
}

// WaitReady waits until the running nodes have a meta leader that sees all of them and
// every one has caught up with it. Call it after restarting nodes. If ctx has no deadline,
// WaitReady gives up after DefaultTimeout.
func (c *Cluster) WaitReady(ctx context.Context) error {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	if err := c.waitReady(ctx); err != nil {
		return fmt.Errorf("jstest: wait for cluster: %w", err)
	}
	return nil
}

func (c *Cluster) waitReady(ctx context.Context) error {
	return testwait.Until(ctx, testwait.Interval, func() (string, error) {
		var leader *server.Server
		running := 0
		for _, s := range c.servers {
			ns, logger := s.running()
			if ns == nil {
				continue
			}
			running++
			waiting, err := nodeWaiting(ns, logger, true)
			if err != nil {
				return "", fmt.Errorf("%s: %w", s.name, err)
			}
			if waiting != "" {
				return s.name + ": " + waiting, nil
			}
			if ns.JetStreamIsLeader() {
				leader = ns
			}
		}
		if running == 0 {
			return "", ErrStopped
		}
		if leader == nil {
			return "a meta leader", nil
		}
		// The leader counts a peer once it has heard from it, so this is the check that
		// all running nodes have joined.
		if seen := len(leader.JetStreamClusterPeers()); seen != running {
			return fmt.Sprintf("the meta leader to see %d nodes (sees %d)", running, seen), nil
		}
		return "", nil
	})
}

// WaitStreamReady waits until the stream exists, has a leader, and every running replica
// has caught up with it. Stream creation returns once a leader is elected, but followers
// may still be catching up; wait for them before stopping the leader. If ctx has no
// deadline, WaitStreamReady gives up after DefaultTimeout.
func (c *Cluster) WaitStreamReady(ctx context.Context, stream string) error {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	err := testwait.Until(ctx, testwait.Interval, func() (string, error) {
		replicas, leaders := 0, 0
		for _, s := range c.servers {
			ns := s.NATS()
			if ns == nil || !ns.JetStreamIsStreamAssigned(account, stream) {
				continue
			}
			replicas++
			if ns.JetStreamIsStreamLeader(account, stream) {
				leaders++
			}
			if !ns.JetStreamIsStreamCurrent(account, stream) {
				return "replica on " + s.name + " to catch up", nil
			}
		}
		switch {
		case replicas == 0:
			return "a replica on a running node", nil
		case leaders != 1:
			return "a leader", nil
		}
		return "", nil
	})
	if err != nil {
		return fmt.Errorf("jstest: wait for stream %q: %w", stream, err)
	}
	return nil
}

// StreamLeader returns the node that leads the stream, or nil if none does right now.
func (c *Cluster) StreamLeader(stream string) *Server {
	for _, s := range c.servers {
		if ns := s.NATS(); ns != nil && ns.JetStreamIsStreamLeader(account, stream) {
			return s
		}
	}
	return nil
}

// Shutdown shuts all nodes down together and waits for them, removing temporary store
// directories. It is safe to call more than once.
func (c *Cluster) Shutdown() {
	var wg sync.WaitGroup
	for _, s := range c.servers {
		wg.Go(s.Shutdown)
	}
	wg.Wait()
}
