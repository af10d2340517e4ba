// Package jstest runs embedded NATS servers with JetStream, for tests (Weave's and yours)
// and for `weave demo`. Servers listen on 127.0.0.1 only, on free ports, and log nothing
// unless given a logger.
//
// # In tests
//
// New starts a single node that is shut down, and its store removed, when the test ends;
// NewConn connects to it the same way:
//
//	func TestSomething(t *testing.T) {
//		srv := jstest.New(t)
//		nc := jstest.NewConn(t, srv.ClientURL())
//		js, err := jetstream.New(nc)
//		...
//	}
//
// Each test gets its own server, so tests can run in parallel. A server starts in a few
// milliseconds. Server.ConnectInProcess skips TCP altogether.
//
// # Clusters and failover
//
// NewCluster (or StartCluster) starts a JetStream cluster of n nodes in the process, joined
// by routes, and returns once a meta leader sees every node, usually in under a second for
// three nodes (when the first election splits, it starts over rather than wait out the
// Raft election timeout of 4 to 9 seconds). A replicated stream elects a leader of its own; creating it returns once
// the leader is elected, and WaitStreamReady also waits for the followers to catch up:
//
//	c := jstest.NewCluster(t, 3)
//	nc := jstest.NewConn(t, c.ClientURL())
//	// create an R3 stream through nc, then:
//	err := c.WaitStreamReady(ctx, "ORDERS")
//
// Right after a consumer is created, a pull sent through a node other than the consumer
// leader occasionally fails with nats.ErrNoResponders (about 1 in 100 in our tests);
// pulls a moment later succeed. Code that fetches from new consumers should retry on it.
//
// To test failover, stop a node, for instance the stream leader, and restart it later: a
// node keeps its name, ports and data across Stop and Restart, so the cluster takes it
// back.
//
//	leader := c.StreamLeader("ORDERS")
//	leader.Stop()
//	err = c.WaitStreamReady(ctx, "ORDERS") // a new leader took over
//	err = leader.Restart(ctx)              // back, and caught up with the meta leader
//
// # Outside tests
//
// Start and StartCluster take Options: a store directory to keep data between runs, a
// fixed client port, and a zerolog.Logger for the server log. Shutdown stops the servers.
//
// # Limits
//
// The servers have no accounts, users or TLS; clients use the global account, which is
// the account the Wait methods look in. A cluster's route ports are chosen before its
// servers start, so another process could take one in between; StartCluster then starts
// over on other ports, or fails with the bind error if you named a Dir.
//
// On a busy machine Raft heartbeats can arrive late enough for leaders to change at any
// moment, as in production. Cluster tests should retry a publish that times out or finds
// no stream, with a message ID so the retry is stored once.
//
// nats-server v2.15.2 can leak two goroutines when a node shuts down while it is creating
// a replica of a new stream or consumer; this package's TestMain shows the goleak options
// that ignore them.
package jstest
