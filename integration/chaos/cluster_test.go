//go:build linux

package chaos

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/internal/natscluster"
)

// node is one nats-server process of the cluster, laid out by natscluster.
type node struct {
	*proc
	natscluster.Node
}

// cluster is a JetStream cluster of nats-server processes on 127.0.0.1.
type cluster struct {
	nodes []*node
}

// startCluster lays out n nodes under dir, starts them and waits until each is healthy: the
// cluster has a JetStream meta leader that answers.
func startCluster(ctx context.Context, ps *procs, bin, dir string, n int) (*cluster, error) {
	layout, err := natscluster.Layout(dir, "chaos", n)
	if err != nil {
		return nil, err
	}
	c := &cluster{}
	for _, spec := range layout {
		nd := &node{Node: spec}
		nd.proc = ps.add(newProc("nats-"+nd.Name, dir, bin, "-c", nd.ConfigFile))
		if err := nd.start(); err != nil {
			return nil, err
		}
		c.nodes = append(c.nodes, nd)
	}
	for _, nd := range c.nodes {
		if err := nd.WaitHealthy(ctx); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// urls is every node's client URL, as clients take them: they fail over between nodes.
func (c *cluster) urls() string {
	specs := make([]natscluster.Node, len(c.nodes))
	for i, nd := range c.nodes {
		specs[i] = nd.Node
	}
	return natscluster.URLs(specs)
}

func (c *cluster) byName(name string) *node {
	for _, nd := range c.nodes {
		if nd.Name == name {
			return nd
		}
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
