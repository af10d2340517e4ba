//go:build linux

package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// node is one nats-server process of the cluster. Its ports and store directory stay the same
// across restarts, so a restarted node rejoins with its data.
type node struct {
	*proc
	name                      string // server_name, as stream info names the leader
	clientPort, monitorPort   int
	clusterPort               int
	storeDir, configFile, url string
}

// cluster is a JetStream cluster of nats-server processes on 127.0.0.1.
type cluster struct {
	nodes []*node
}

// clusterConfig is a node's configuration file: JetStream with its own store, routes to every
// node (a node skips its own), and the monitoring port whose /healthz says when it has caught up.
const clusterConfig = `server_name: %s
listen: 127.0.0.1:%d
http: 127.0.0.1:%d
jetstream {
  store_dir: %q
}
cluster {
  name: chaos
  listen: 127.0.0.1:%d
  routes: [%s]
}
`

// startCluster writes the configuration of n nodes under dir, starts them and waits until the
// cluster has a JetStream meta leader that answers.
func startCluster(ctx context.Context, ps *procs, bin, dir string, n int) (*cluster, error) {
	ports, err := freePorts(3 * n)
	if err != nil {
		return nil, err
	}
	routes := make([]string, n)
	for i := range n {
		routes[i] = fmt.Sprintf("nats-route://127.0.0.1:%d", ports[3*i+2])
	}
	c := &cluster{}
	for i := range n {
		nd := &node{
			name:        fmt.Sprintf("n%d", i+1),
			clientPort:  ports[3*i],
			monitorPort: ports[3*i+1],
			clusterPort: ports[3*i+2],
		}
		nd.url = fmt.Sprintf("nats://127.0.0.1:%d", nd.clientPort)
		nd.storeDir = filepath.Join(dir, nd.name, "store")
		nd.configFile = filepath.Join(dir, nd.name, "nats.conf")
		if err := os.MkdirAll(nd.storeDir, 0o755); err != nil {
			return nil, err
		}
		conf := fmt.Sprintf(clusterConfig, nd.name, nd.clientPort, nd.monitorPort, nd.storeDir, nd.clusterPort, strings.Join(routes, ", "))
		if err := os.WriteFile(nd.configFile, []byte(conf), 0o644); err != nil {
			return nil, err
		}
		nd.proc = ps.add(newProc("nats-"+nd.name, dir, bin, "-c", nd.configFile))
		if err := nd.start(); err != nil {
			return nil, err
		}
		c.nodes = append(c.nodes, nd)
	}
	for _, nd := range c.nodes {
		if err := nd.waitHealthy(ctx); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// freePorts finds n distinct free ports on 127.0.0.1. Another process could take one before the
// server binds it; the server then fails to start with the bind error.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close() // held until all are found, so the ports differ
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// urls is every node's client URL, as clients take them: they fail over between nodes.
func (c *cluster) urls() string {
	urls := make([]string, len(c.nodes))
	for i, nd := range c.nodes {
		urls[i] = nd.url
	}
	return strings.Join(urls, ",")
}

func (c *cluster) byName(name string) *node {
	for _, nd := range c.nodes {
		if nd.name == name {
			return nd
		}
	}
	return nil
}

// waitHealthy waits until the node's /healthz answers 200: it runs JetStream, sees a meta leader
// and its streams and consumers have caught up.
func (nd *node) waitHealthy(ctx context.Context) error {
	url := fmt.Sprintf("http://127.0.0.1:%d/healthz", nd.monitorPort)
	var last string
	err := poll(ctx, 50*time.Millisecond, func() bool {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			last = err.Error()
			return false
		}
		resp.Body.Close()
		last = resp.Status
		return resp.StatusCode == http.StatusOK
	})
	if err != nil {
		return fmt.Errorf("node %s healthy (last answer: %s): %w", nd.name, last, err)
	}
	return nil
}

// streamLeaders asks JetStream which node leads each stream, as `nats stream info` does
// ($JS.API.STREAM.INFO.<stream> -> cluster.leader). A stream without a leader right now is
// missing from the map.
func streamLeaders(ctx context.Context, js jetstream.JetStream, streams []string) map[string]string {
	leaders := map[string]string{}
	for _, name := range streams {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		s, err := js.Stream(rctx, name)
		cancel()
		if err != nil {
			continue
		}
		if info := s.CachedInfo(); info.Cluster != nil && info.Cluster.Leader != "" {
			leaders[name] = info.Cluster.Leader
		}
	}
	return leaders
}

// errNoLeader is returned when no stream has a leader to be killed.
var errNoLeader = errors.New("no stream has a leader")

// leaderOfStreams returns the node that leads the most of the given streams (ties go to the
// first stream's leader): the node whose loss costs the most elections.
func (c *cluster) leaderOfStreams(ctx context.Context, js jetstream.JetStream, streams []string) (*node, map[string]string, error) {
	leaders := streamLeaders(ctx, js, streams)
	count := map[string]int{}
	best := ""
	for _, s := range streams {
		l, ok := leaders[s]
		if !ok {
			continue
		}
		count[l]++
		if best == "" || count[l] > count[best] {
			best = l
		}
	}
	if nd := c.byName(best); nd != nil {
		return nd, leaders, nil
	}
	return nil, leaders, errNoLeader
}

// connect opens a connection for the test itself, reconnecting for as long as the test runs.
func (c *cluster) connect() (*nats.Conn, error) {
	return nats.Connect(c.urls(), nats.Name("chaos test"), nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true), nats.ReconnectWait(100*time.Millisecond))
}

// poll calls cond every interval until it holds or ctx ends.
func poll(ctx context.Context, interval time.Duration, cond func() bool) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if cond() {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
