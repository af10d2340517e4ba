package coordinator

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/integration/jstest"
	"github.com/weavejobs/weave/internal/config"
	"github.com/weavejobs/weave/internal/topology"
	"github.com/weavejobs/weave/internal/wire"
)

// onServer starts an embedded JetStream server with namespace ns's streams, as 'weave init'
// creates them, and returns it with a connection, its JetStream handle and a context that ends
// a minute on (or with the test).
func onServer(t *testing.T, ns string) (*jstest.Server, *nats.Conn, jetstream.JetStream, context.Context) {
	t.Helper()
	srv := jstest.New(t)
	nc := jstest.NewConn(t, srv.ClientURL())
	js := jstest.NewJetStream(t, nc)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	names, err := wire.NewNames(ns)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := topology.Init(ctx, js, names, config.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	return srv, nc, js, ctx
}
