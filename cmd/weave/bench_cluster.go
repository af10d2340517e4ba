package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/weavejobs/weave/internal/natscluster"
)

// benchCluster is the cluster of nats-server processes weave bench --replicas runs on: started
// before the scenarios, stopped after them.
type benchCluster struct {
	dir   string // the nodes' configuration, stores and logs; removed by stop
	procs []*exec.Cmd
	urls  string
}

// clusterStartTimeout bounds a node's start until it is healthy.
const clusterStartTimeout = time.Minute

// startBenchCluster starts n nats-server processes of bin (see the --nats-server flag) as one
// JetStream cluster, in a new directory inside dir (the system's temporary directory if empty),
// and waits until every node is healthy.
func startBenchCluster(ctx context.Context, n int, bin, dir string, progress io.Writer) (c *benchCluster, err error) {
	tmp, err := os.MkdirTemp(dir, "weave-bench-cluster-")
	if err != nil {
		return nil, err
	}
	c = &benchCluster{dir: tmp}
	defer func() {
		if err != nil {
			c.stop()
		}
	}()
	if bin == "" {
		if bin, err = exec.LookPath("nats-server"); err != nil {
			fmt.Fprintf(progress, "bench: no nats-server on $PATH: building this module's version\n")
			if bin, err = natscluster.BuildServer(ctx, tmp); err != nil {
				return c, fmt.Errorf("--replicas needs a nats-server binary (--nats-server): %w", err)
			}
		}
	}
	nodes, err := natscluster.Layout(tmp, "bench", n)
	if err != nil {
		return c, err
	}
	for _, nd := range nodes {
		log, err := os.Create(filepath.Join(tmp, nd.Name+".log"))
		if err != nil {
			return c, err
		}
		cmd := exec.Command(bin, "-c", nd.ConfigFile)
		cmd.Stdout, cmd.Stderr = log, log
		err = cmd.Start()
		log.Close() // the child holds its own descriptor
		if err != nil {
			return c, fmt.Errorf("start nats-server %s: %w", nd.Name, err)
		}
		c.procs = append(c.procs, cmd)
	}
	wctx, cancel := context.WithTimeout(ctx, clusterStartTimeout)
	defer cancel()
	for _, nd := range nodes {
		if err := nd.WaitHealthy(wctx); err != nil {
			return c, fmt.Errorf("%w (its log: %s)", err, filepath.Join(tmp, nd.Name+".log"))
		}
	}
	c.urls = natscluster.URLs(nodes)
	fmt.Fprintf(progress, "bench: a cluster of %d nats-server processes (%s): %s\n", n, bin, c.urls)
	return c, nil
}

// stop ends the cluster's processes (an interrupt, then a kill after 10 seconds) and removes
// its directory.
func (c *benchCluster) stop() {
	for _, p := range c.procs {
		_ = p.Process.Signal(os.Interrupt)
	}
	for _, p := range c.procs {
		done := make(chan error, 1)
		go func() { done <- p.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = p.Process.Kill()
			<-done
		}
	}
	if err := os.RemoveAll(c.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(os.Stderr, "bench: remove %s: %v\n", c.dir, err)
	}
}
