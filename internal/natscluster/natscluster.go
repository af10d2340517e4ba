// Package natscluster lays out a JetStream cluster of nats-server processes on 127.0.0.1: each
// node's ports, store directory and configuration file, and the health check that says a node
// has joined. It does not start processes: the chaos test supervises, kills and restarts them,
// weave bench --replicas only starts and stops them; each owns its processes its own way.
package natscluster

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Node is one node of a cluster. Its ports and store directory stay the same across restarts,
// so a restarted node rejoins with its data.
type Node struct {
	Name        string // server_name, as stream info names a leader: n1, n2, …
	ClientPort  int
	MonitorPort int
	ClusterPort int
	StoreDir    string
	ConfigFile  string // pass it as nats-server -c
	URL         string // the client URL
}

// config is a node's configuration file: JetStream with its own store, routes to every node (a
// node skips its own), and the monitoring port whose /healthz says when it has caught up.
const config = `server_name: %s
listen: 127.0.0.1:%d
http: 127.0.0.1:%d
jetstream {
  store_dir: %q
}
cluster {
  name: %s
  listen: 127.0.0.1:%d
  routes: [%s]
}
`

// Layout picks free ports for n nodes of the cluster named name and writes their configuration
// files under dir (dir/<node>/nats.conf, the store in dir/<node>/store).
func Layout(dir, name string, n int) ([]Node, error) {
	ports, err := FreePorts(3 * n)
	if err != nil {
		return nil, err
	}
	routes := make([]string, n)
	for i := range n {
		routes[i] = fmt.Sprintf("nats-route://127.0.0.1:%d", ports[3*i+2])
	}
	nodes := make([]Node, n)
	for i := range nodes {
		nd := Node{Name: fmt.Sprintf("n%d", i+1), ClientPort: ports[3*i], MonitorPort: ports[3*i+1], ClusterPort: ports[3*i+2]}
		nd.URL = fmt.Sprintf("nats://127.0.0.1:%d", nd.ClientPort)
		nd.StoreDir = filepath.Join(dir, nd.Name, "store")
		nd.ConfigFile = filepath.Join(dir, nd.Name, "nats.conf")
		if err := os.MkdirAll(nd.StoreDir, 0o755); err != nil {
			return nil, err
		}
		conf := fmt.Sprintf(config, nd.Name, nd.ClientPort, nd.MonitorPort, nd.StoreDir, name, nd.ClusterPort, strings.Join(routes, ", "))
		if err := os.WriteFile(nd.ConfigFile, []byte(conf), 0o644); err != nil {
			return nil, err
		}
		nodes[i] = nd
	}
	return nodes, nil
}

// URLs is every node's client URL, comma-separated, as clients take them: they fail over
// between nodes.
func URLs(nodes []Node) string {
	urls := make([]string, len(nodes))
	for i, nd := range nodes {
		urls[i] = nd.URL
	}
	return strings.Join(urls, ",")
}

// FreePorts finds n distinct free ports on 127.0.0.1. Another process could take one before the
// server binds it; the server then fails to start with the bind error.
func FreePorts(n int) ([]int, error) {
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

// WaitHealthy waits until the node's /healthz answers 200: it runs JetStream, sees a meta
// leader and its streams and consumers have caught up.
func (nd Node) WaitHealthy(ctx context.Context) error {
	url := fmt.Sprintf("http://127.0.0.1:%d/healthz", nd.MonitorPort)
	var last string
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if resp, err := http.DefaultClient.Do(req); err != nil {
			last = err.Error()
		} else {
			resp.Body.Close()
			last = resp.Status
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s healthy (last answer: %s): %w", nd.Name, last, ctx.Err())
		case <-t.C:
		}
	}
}

// BuildServer builds nats-server, at the version this module requires, into dir and returns its
// path: a server that matches the embedded one, wherever the go command runs inside the module.
func BuildServer(ctx context.Context, dir string) (string, error) {
	path := filepath.Join(dir, "nats-server")
	out, err := exec.CommandContext(ctx, "go", "build", "-o", path, "github.com/nats-io/nats-server/v2").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build nats-server: %v\n%s", err, out)
	}
	return path, nil
}
