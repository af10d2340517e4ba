package jstest

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// New starts a single-node server for a test and shuts it down, removing its store, when
// the test ends. It stops the test if the server does not start. For other options, call
// Start and register Shutdown with t.Cleanup.
func New(t testing.TB) *Server {
	t.Helper()
	s, err := Start(t.Context(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

// NewCluster starts an n-node cluster for a test, like New.
func NewCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	c, err := StartCluster(t.Context(), n, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	return c
}

// NewConn connects to url, a Server's or Cluster's ClientURL, and closes the connection
// when the test ends. It stops the test if the connection fails.
func NewConn(t testing.TB, url string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// NewJetStream returns nc's JetStream handle. It stops the test if there is none.
func NewJetStream(t testing.TB, nc *nats.Conn) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}
