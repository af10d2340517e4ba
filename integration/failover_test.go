package integration_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/integration/jstest"
	"github.com/weavejobs/weave/worker"
)

// clusterEnv is a namespace on a 3-node cluster with every stream at 3 replicas; its clients
// connect with every node's URL, so they fail over when their node goes away.
type clusterEnv struct {
	*env
	c       *jstest.Cluster
	streams dispatcher.StreamOptions
}

func setupCluster(t *testing.T) *clusterEnv {
	t.Helper()
	c := jstest.NewCluster(t, 3)
	ns := "c" + randomHex(4)
	streams := dispatcher.StreamOptions{Replicas: 3}
	nc := clusterConn(t, c)
	d, err := dispatcher.New(nc, dispatcher.Config{Namespace: ns, Streams: streams})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return &clusterEnv{env: &env{t: t, nc: nc, ns: ns, d: d, ctx: ctx}, c: c, streams: streams}
}

// clusterConn connects to the whole cluster, reconnecting for as long as the test runs.
func clusterConn(t *testing.T, c *jstest.Cluster) *nats.Conn {
	t.Helper()
	nc, err := c.Connect(nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// clusterCoordinator runs a coordinator on its own connection until the test ends, or until the
// returned stop is called.
func (e *clusterEnv) clusterCoordinator(cfg coordinator.Config) (stop func()) {
	cfg.Namespace, cfg.Streams = e.ns, e.streams
	cfg.Logger = testLogger("coordinator")
	c, err := coordinator.New(clusterConn(e.t, e.c), cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var stopped atomic.Bool
	stop = func() {
		if stopped.Swap(true) {
			return
		}
		cancel()
		if err := <-done; err != nil {
			e.t.Errorf("coordinator: %v", err)
		}
	}
	e.t.Cleanup(stop)
	return stop
}

func (e *clusterEnv) clusterWorker(slots int, h worker.HandlerFunc) {
	w, err := worker.New(clusterConn(e.t, e.c), worker.Config{Namespace: e.ns, Concurrency: slots, Streams: e.streams,
		HeartbeatInterval: 250 * time.Millisecond, Logger: testLogger("worker")}, h)
	if err != nil {
		e.t.Fatal(err)
	}
	e.background("worker", w.Run)
}

// TestClusterReplayAfterTakeover: a coordinator taking over on a 3-node cluster replays streams
// holding hundreds of outcome messages and coordinates. (Replay read the outcomes with an
// ordered consumer's Next, which re-creates the consumer each call; on a cluster that failed
// with "no responders" after a few messages, and every start failed the same way.)
func TestClusterReplayAfterTakeover(t *testing.T) {
	t.Parallel()
	e := setupCluster(t)
	stopFirst := e.clusterCoordinator(coordinator.Config{})
	e.clusterWorker(8, func(_ context.Context, j *worker.Job) ([]byte, error) { return j.Payload, nil })
	// Many small groups: each writes at least an outcome message and a summary.
	const groups, perGroup = 150, 3
	var hs []*dispatcher.Handle
	for g := range groups {
		hs = append(hs, e.publish(fmt.Sprint("g", g), jobs(perGroup, nil)))
	}
	for _, h := range hs {
		if sum, err := h.WaitSummary(e.ctx); err != nil || sum.Done != perGroup {
			t.Fatalf("group %s: %+v %v", h.GroupID(), sum, err)
		}
	}
	stopFirst()

	e.clusterCoordinator(coordinator.Config{})
	h := e.publish("after", jobs(10, nil))
	if sum, err := h.WaitSummary(e.ctx); err != nil || sum.Done != 10 {
		t.Fatalf("group after the takeover: %+v %v", sum, err)
	}
}
