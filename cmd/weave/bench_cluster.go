package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
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

// cpu returns the CPU time (user and system) the cluster's processes have used so far, from
// /proc/<pid>/stat, and false where that cannot be read (not Linux).
func (c *benchCluster) cpu() (time.Duration, bool) {
	var total time.Duration
	for _, p := range c.procs {
		d, ok := procCPU(p.Process.Pid)
		if !ok {
			return 0, false
		}
		total += d
	}
	return total, true
}

// clockTick is the unit of /proc/<pid>/stat's times: USER_HZ, 100 on every Linux platform Go
// runs on (sysconf needs cgo).
const clockTick = 10 * time.Millisecond

// procCPU reads a process's utime + stime from /proc/<pid>/stat.
func procCPU(pid int) (time.Duration, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	return statCPU(b)
}

// statCPU reads utime + stime from the contents of a /proc/<pid>/stat file.
func statCPU(b []byte) (time.Duration, bool) {
	// The command name, in parentheses, may hold spaces: the fields count from the last ")".
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, false
	}
	utime, err1 := strconv.ParseUint(f[11], 10, 64) // field 14
	stime, err2 := strconv.ParseUint(f[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(utime+stime) * clockTick, true
}
