package dispatcher_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/integration/jstest"
	"github.com/weavejobs/weave/internal/config"
	"github.com/weavejobs/weave/internal/leakcheck"
	"github.com/weavejobs/weave/internal/topology"
	"github.com/weavejobs/weave/internal/wire"
)

func TestMain(m *testing.M) {
	leakcheck.Main(m)
}

// testTimeout bounds every wait of a test, so a bug fails the test instead of hanging it.
const testTimeout = 30 * time.Second

// env is one test's world: its own embedded server, a connection and a dispatcher.
type env struct {
	srv   *jstest.Server
	nc    *nats.Conn
	js    jetstream.JetStream
	names wire.Names
	d     *dispatcher.Dispatcher
}

// setup starts a server, creates the namespace's streams as the coordinator (or 'weave init')
// would, since a dispatcher only checks that they exist, and returns a dispatcher.
func setup(t *testing.T, cfg dispatcher.Config) *env {
	t.Helper()
	e := setupEmpty(t, cfg)
	e.initNamespace(t, e.names)
	return e
}

// setupEmpty is setup without the namespace's streams.
func setupEmpty(t *testing.T, cfg dispatcher.Config) *env {
	t.Helper()
	srv := jstest.New(t)
	nc := jstest.NewConn(t, srv.ClientURL())
	js := jstest.NewJetStream(t, nc)
	d, err := dispatcher.New(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	names, err := wire.NewNames(cfg.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	return &env{srv: srv, nc: nc, js: js, names: names, d: d}
}

// initNamespace creates the streams of the namespace names, accepting those that exist.
func (e *env) initNamespace(t *testing.T, names wire.Names) {
	t.Helper()
	if _, err := topology.Init(testContext(t), e.js, names, config.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// stored is a message read back from a stream.
type stored struct {
	seq     uint64
	subject string
	header  nats.Header
	data    []byte
}

// readStream returns every message stream holds, in order, read with an ordered consumer.
func (e *env) readStream(ctx context.Context, t *testing.T, stream string) []stored {
	t.Helper()
	s, err := e.js.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs == 0 {
		return nil
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := cons.Messages()
	if err != nil {
		t.Fatal(err)
	}
	defer msgs.Stop()
	var out []stored
	for {
		m, err := msgs.Next(jetstream.NextContext(ctx))
		if err != nil {
			t.Fatalf("read %s after %d messages: %v", stream, len(out), err)
		}
		meta, err := m.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, stored{seq: meta.Sequence.Stream, subject: m.Subject(), header: m.Headers(), data: m.Data()})
		if meta.Sequence.Stream >= info.State.LastSeq {
			return out
		}
	}
}

// storedJobs counts the job messages in the JOBS stream (control messages excluded).
func (e *env) storedJobs(ctx context.Context) (int, error) {
	s, err := e.js.Stream(ctx, e.names.JobsStream())
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(e.names.AllJobs()))
	if err != nil {
		return 0, err
	}
	msgs := 0
	for _, c := range info.State.Subjects {
		msgs += int(c)
	}
	if msgs == 0 {
		return 0, nil
	}
	// A message may be a pack of jobs: read them.
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{e.names.AllJobs()}})
	if err != nil {
		return 0, err
	}
	it, err := cons.Messages()
	if err != nil {
		return 0, err
	}
	defer it.Stop()
	n := 0
	for range msgs {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return 0, err
		}
		meta, err := m.Metadata()
		if err != nil {
			return 0, err
		}
		jobs, err := wire.ParseStoredJobs(meta.Sequence.Stream, m.Headers(), m.Data())
		if err != nil {
			return 0, err
		}
		n += len(jobs)
	}
	return n, nil
}

// groupMsgs splits a group's messages read back from JOBS into control messages and jobs, and
// checks that each parses.
type groupMsgs struct {
	controls []wire.GroupControl
	jobs     []wire.JobMeta
	payloads [][]byte
	jobIDs   []uint64
	packs    int      // messages holding more than one job
	order    []string // "open", "job", "seal", "cancel" in stream order
}

func parseGroup(t *testing.T, names wire.Names, group string, msgs []stored) groupMsgs {
	t.Helper()
	gtok := wire.GroupToken(group)
	var g groupMsgs
	for _, m := range msgs {
		switch m.subject {
		case names.GroupSubject(gtok):
			c, err := wire.ParseGroupControl(m.header)
			if err != nil {
				t.Fatalf("seq %d: %v", m.seq, err)
			}
			if c.Group != group {
				t.Fatalf("seq %d: control of group %q, want %q", m.seq, c.Group, group)
			}
			g.controls = append(g.controls, c)
			g.order = append(g.order, string(c.Op))
		case names.JobSubject(gtok):
			jobs, err := wire.ParseStoredJobs(m.seq, m.header, m.data)
			if err != nil {
				t.Fatalf("seq %d: %v", m.seq, err)
			}
			if len(jobs) > 1 {
				g.packs++
			}
			for _, j := range jobs {
				g.jobs = append(g.jobs, j.Meta)
				g.payloads = append(g.payloads, j.Payload)
				g.jobIDs = append(g.jobIDs, j.ID)
				g.order = append(g.order, "job")
			}
		default:
			t.Fatalf("seq %d: unexpected subject %q", m.seq, m.subject)
		}
	}
	return g
}

// wantSealed checks that the group's messages are open, n jobs, seal(n).
func wantSealed(t *testing.T, g groupMsgs, n int) {
	t.Helper()
	want := []string{"open"}
	for range n {
		want = append(want, "job")
	}
	want = append(want, "seal")
	if fmt.Sprint(g.order) != fmt.Sprint(want) {
		t.Fatalf("stream holds %v, want open, %d jobs, seal", g.order, n)
	}
	if c := g.controls[len(g.controls)-1]; c.Count != uint64(n) {
		t.Fatalf("seal count %d, want %d", c.Count, n)
	}
}

func wantErrIs(t *testing.T, err error, targets ...error) {
	t.Helper()
	for _, target := range targets {
		if !errors.Is(err, target) {
			t.Fatalf("error %v does not wrap %v", err, target)
		}
	}
}

// standInCoordinator plays the coordinator's part in cancels and redrives until the test ends:
// it follows the group control messages of JOBS and answers each that asks for an answer with
// what answer returns.
func (e *env) standInCoordinator(ctx context.Context, t *testing.T, answer func(wire.GroupControl) wire.ControlAnswer) {
	t.Helper()
	cons, err := e.js.OrderedConsumer(ctx, e.names.JobsStream(), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{e.names.AllGroups()},
		DeliverPolicy:  jetstream.DeliverNewPolicy,
	})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		c, err := wire.ParseGroupControl(m.Headers())
		if err != nil || c.Op != wire.OpCancel && c.Op != wire.OpRedrive || c.Reply == "" {
			return
		}
		meta, err := m.Metadata()
		if err != nil {
			t.Error(err)
			return
		}
		a := answer(c)
		a.Seq, a.Op, a.Group = meta.Sequence.Stream, c.Op, c.Group
		data, _ := json.Marshal(a)
		if err := e.nc.Publish(e.names.ReplySubject(c.Reply), data); err != nil {
			t.Error(err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
}
