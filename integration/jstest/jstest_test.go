package jstest_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/weavejobs/weave/integration/jstest"
	"github.com/weavejobs/weave/internal/leakcheck"
)

func TestMain(m *testing.M) {
	leakcheck.Main(m)
}

// roundTrip creates a stream on pub, publishes n messages to it and reads them back
// through sub. With a cluster, the stream has three replicas and sub may be connected to
// another node.
func roundTrip(t *testing.T, c *jstest.Cluster, pub, sub *nats.Conn, stream string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	js, err := jetstream.New(pub)
	if err != nil {
		t.Fatal(err)
	}
	cfg := jetstream.StreamConfig{
		Name:     stream,
		Subjects: []string{stream + ".>"},
		Storage:  jetstream.FileStorage,
	}
	if c != nil {
		cfg.Replicas = 3
	}
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		t.Fatalf("create stream: %v", err)
	}
	if c != nil {
		if err := c.WaitStreamReady(ctx, stream); err != nil {
			t.Fatal(err)
		}
	}
	publish(ctx, t, js, stream, 0, n)
	read(ctx, t, sub, stream, 0, n)
}

// publish publishes messages from..to-1 to stream, waiting for each ack. A busy machine
// can delay Raft heartbeats enough for leaders to change, so a publish that times out or
// finds no stream leader is retried; its message ID makes the retry safe.
func publish(ctx context.Context, t *testing.T, js jetstream.JetStream, stream string, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		for {
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := js.Publish(pctx, stream+".x", []byte(strconv.Itoa(i)), jetstream.WithMsgID(strconv.Itoa(i)))
			cancel()
			if err == nil {
				break
			}
			transient := errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, context.DeadlineExceeded)
			if !transient || ctx.Err() != nil {
				t.Fatalf("publish %d: %v", i, err)
			}
		}
	}
}

// readers numbers the consumers read creates.
var readers atomic.Int64

// read reads messages from..to-1 of stream through nc with a new consumer and checks
// their payloads.
func read(ctx context.Context, t *testing.T, nc *nats.Conn, stream string, from, to int) {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("read-%d", readers.Add(1))
	cons, err := js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable:       name,
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:   uint64(from) + 1,
		AckPolicy:     jetstream.AckNonePolicy,
	})
	if err != nil {
		t.Fatalf("create consumer: %v", err)
	}
	i := from
	for i < to {
		batch, err := cons.Fetch(to-i, jetstream.FetchContext(ctx))
		if err != nil {
			t.Fatalf("fetch: %v", err)
		}
		for msg := range batch.Messages() {
			if got, want := string(msg.Data()), strconv.Itoa(i); got != want {
				t.Fatalf("message %d = %q, want %q", i, got, want)
			}
			i++
		}
		err = batch.Error()
		if errors.Is(err, nats.ErrNoResponders) {
			// A pull through a node other than the consumer leader can find no
			// responders right after the consumer is created; a moment later it works.
			select {
			case <-ctx.Done():
				t.Fatalf("fetch after %d messages: %v", i-from, err)
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		if err != nil {
			t.Fatalf("fetch after %d messages: %v", i-from, err)
		}
	}
}

func TestServer(t *testing.T) {
	t.Parallel()
	s := jstest.New(t)
	nc := jstest.NewConn(t, s.ClientURL())
	roundTrip(t, nil, nc, nc, "S", 100)
}

func TestServerInProcess(t *testing.T) {
	t.Parallel()
	s := jstest.New(t)
	nc, err := s.ConnectInProcess()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	roundTrip(t, nil, nc, nc, "S", 10)
}

func TestServerRestartKeepsData(t *testing.T) {
	t.Parallel()
	s := jstest.New(t)
	url := s.ClientURL()
	nc := jstest.NewConn(t, url)
	roundTrip(t, nil, nc, nc, "S", 10)

	if err := s.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	if s.ClientURL() != url {
		t.Fatalf("ClientURL changed from %s to %s", url, s.ClientURL())
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	read(ctx, t, jstest.NewConn(t, url), "S", 0, 10)
}

func TestServerShutdown(t *testing.T) {
	t.Parallel()
	s, err := jstest.Start(t.Context(), jstest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.StoreDir()); err != nil {
		t.Fatalf("temporary store: %v", err)
	}
	s.Shutdown()
	s.Shutdown()
	if _, err := os.Stat(s.StoreDir()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temporary store not removed: %v", err)
	}
	if s.NATS() != nil {
		t.Fatal("NATS() is not nil after Shutdown")
	}
	if _, err := s.ConnectInProcess(); !errors.Is(err, jstest.ErrStopped) {
		t.Fatalf("ConnectInProcess after Shutdown: %v, want ErrStopped", err)
	}
	if err := s.Restart(t.Context()); !errors.Is(err, jstest.ErrShutdown) {
		t.Fatalf("Restart after Shutdown: %v, want ErrShutdown", err)
	}
}

func TestStartKeepsNamedDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := jstest.Start(t.Context(), jstest.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	s.Shutdown()
	if entries, err := os.ReadDir(dir); err != nil || len(entries) == 0 {
		t.Fatalf("store in %s: %d entries, %v; want the JetStream data kept", dir, len(entries), err)
	}
}

func TestStartOptions(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()

	var log syncBuffer
	s, err := jstest.Start(t.Context(), jstest.Options{Port: port, Logger: zerolog.New(&log).Level(zerolog.InfoLevel)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	if got, want := s.ClientURL(), "nats://127.0.0.1:"+strconv.Itoa(port); got != want {
		t.Errorf("ClientURL() = %s, want %s", got, want)
	}
	if !strings.Contains(log.String(), `"server":"jstest"`) {
		t.Errorf("no server log in the Logger; got %q", log.String())
	}
}

// syncBuffer is a bytes.Buffer the server can log to from its goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestStartPortInUse(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port

	start := time.Now()
	s, err := jstest.Start(t.Context(), jstest.Options{Port: port})
	if err == nil {
		s.Shutdown()
		t.Fatalf("Start on port %d in use succeeded", port)
	}
	// The bind error is reported at once, not after DefaultTimeout.
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Start failed after %v: %v", d, err)
	}
}

func TestInvalidOptions(t *testing.T) {
	t.Parallel()
	if _, err := jstest.Start(t.Context(), jstest.Options{Port: -1}); err == nil {
		t.Error("Start with Port -1 succeeded")
	}
	if _, err := jstest.StartCluster(t.Context(), 1, jstest.Options{}); err == nil {
		t.Error("StartCluster with 1 node succeeded")
	}
	if _, err := jstest.StartCluster(t.Context(), 3, jstest.Options{Port: 4222}); err == nil {
		t.Error("StartCluster with a Port succeeded")
	}
}

func TestCluster(t *testing.T) {
	t.Parallel()
	c := jstest.NewCluster(t, 3)
	servers := c.Servers()
	if len(servers) != 3 {
		t.Fatalf("%d servers, want 3", len(servers))
	}
	pub := jstest.NewConn(t, servers[0].ClientURL())
	sub := jstest.NewConn(t, servers[1].ClientURL())
	roundTrip(t, c, pub, sub, "S", 100)
}

func TestClusterFailover(t *testing.T) {
	t.Parallel()
	c := jstest.NewCluster(t, 3)
	servers := c.Servers()
	roundTrip(t, c, jstest.NewConn(t, servers[0].ClientURL()), jstest.NewConn(t, servers[1].ClientURL()), "S", 10)

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	old := c.StreamLeader("S")
	if old == nil {
		t.Fatal("no stream leader")
	}
	old.Stop()
	if err := c.WaitStreamReady(ctx, "S"); err != nil {
		t.Fatal(err)
	}
	survivor := c.StreamLeader("S")
	if survivor == nil || survivor == old {
		t.Fatalf("stream leader after stopping %s: %v", old.Name(), survivor)
	}
	// Publish through a node that stayed up: a publish sent as its connection is lost can
	// be lost with it, like any core NATS message.
	js, err := jetstream.New(jstest.NewConn(t, survivor.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	publish(ctx, t, js, "S", 10, 20)

	if err := old.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitStreamReady(ctx, "S"); err != nil {
		t.Fatal(err)
	}
	// The restarted node caught up with what was published while it was down.
	read(ctx, t, jstest.NewConn(t, old.ClientURL()), "S", 0, 20)
}

// TestProxyFreeze: a client behind a frozen proxy sees no error, but nothing passes either way
// (its flush, a round trip to the server, times out; a message published to it waits); after
// Thaw what waited arrives and the connection works on. Close ends the proxy's connections.
func TestProxyFreeze(t *testing.T) {
	t.Parallel()
	s := jstest.New(t)
	p, err := jstest.StartProxy(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	gone := make(chan struct{}, 1)
	behind := jstest.NewConn(t, p.URL(), nats.DisconnectErrHandler(func(*nats.Conn, error) {
		select {
		case gone <- struct{}{}:
		default:
		}
	}))
	direct := jstest.NewConn(t, s.ClientURL())
	got := make(chan *nats.Msg, 1)
	if _, err := behind.ChanSubscribe("x", got); err != nil {
		t.Fatal(err)
	}
	if err := behind.Flush(); err != nil {
		t.Fatal(err)
	}
	p.Freeze()
	if err := direct.Publish("x", []byte("held")); err != nil {
		t.Fatal(err)
	}
	if err := direct.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := behind.FlushTimeout(300 * time.Millisecond); !errors.Is(err, nats.ErrTimeout) {
		t.Fatalf("flush through a frozen proxy: %v, want a timeout", err)
	}
	if len(got) != 0 || !behind.IsConnected() {
		t.Fatalf("frozen: %d messages received, connected %v; want 0, true", len(got), behind.IsConnected())
	}
	p.Thaw()
	select {
	case m := <-got:
		if string(m.Data) != "held" {
			t.Fatalf("received %q", m.Data)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the message held by the frozen proxy never arrived after Thaw")
	}
	if err := behind.Flush(); err != nil {
		t.Fatalf("flush after Thaw: %v", err)
	}
	p.Close()
	select {
	case <-gone:
	case <-time.After(10 * time.Second):
		t.Fatal("still connected after the proxy closed")
	}
}
