package coordinator

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/weavejobs/weave/coordinator/internal/engine"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/internal/auth"
	"github.com/weavejobs/weave/internal/schedule"
	"github.com/weavejobs/weave/internal/testwait"
	"github.com/weavejobs/weave/internal/wire"
	"github.com/weavejobs/weave/worker"
)

// authServer starts an embedded JetStream server configured with the authorization block
// `weave auth` renders for users of namespace ns, each password set in the configuration as the
// variable the block reads. It returns a function connecting as one of the users (by name).
func authServer(t *testing.T, ns string, users []auth.User) (connect func(user string) *nats.Conn) {
	t.Helper()
	names, err := wire.NewNames(ns)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := auth.Entries(names, users)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var conf bytes.Buffer
	fmt.Fprintf(&conf, "host: 127.0.0.1\nport: -1\njetstream { store_dir: %q }\n", filepath.Join(dir, "js"))
	byName := map[string]auth.Entry{}
	for _, e := range entries {
		byName[e.Name] = e
		fmt.Fprintf(&conf, "%s: %q\n", auth.PasswordVar(e.Name), "pw-"+e.Name)
	}
	if err := auth.WriteServerConfig(&conf, names, entries); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(path, conf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatal(err)
	}
	opts.NoLog, opts.NoSigs = true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	if !srv.ReadyForConnections(30 * time.Second) {
		t.Fatal("server not ready")
	}
	return func(user string) *nats.Conn {
		t.Helper()
		e, ok := byName[user]
		if !ok {
			t.Fatalf("no user %s", user)
		}
		nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo(user, "pw-"+user), nats.CustomInboxPrefix(e.InboxPrefix))
		if err != nil {
			t.Fatalf("connect as %s: %v", user, err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
}

// coordServer is namespace ns on an embedded server with the users `weave auth` renders (a
// coordinator, a producer and an observer, and the test's workers), whose coordinator a test
// starts and stops to store inputs while none runs.
type coordServer struct {
	t       *testing.T
	ctx     context.Context // ends a minute on
	ns      string
	names   wire.Names
	connect func(user string) *nats.Conn
	coordNC *nats.Conn
	js      jetstream.JetStream // the coordinator user's
	obsNC   *nats.Conn
	cons    jetstream.Consumer // reads NS_REJECTED
}

func newCoordServer(t *testing.T, ns string, workers ...auth.User) *coordServer {
	t.Helper()
	cs := &coordServer{t: t, ns: ns}
	cs.connect = authServer(t, ns, append([]auth.User{{Role: auth.Coordinator}, {Role: auth.Producer}, {Role: auth.Observer}}, workers...))
	cs.names, _ = wire.NewNames(ns)
	var cancel context.CancelFunc
	cs.ctx, cancel = context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	cs.coordNC = cs.connect(ns + "-coordinator")
	cs.obsNC = cs.connect(ns + "-observer")
	var err error
	if cs.js, err = jetstream.New(cs.coordNC); err != nil {
		t.Fatal(err)
	}
	return cs
}

// start runs a coordinator until the returned function (or the test's end) stops it, and waits
// until it serves status.
func (cs *coordServer) start() (stop func()) {
	t := cs.t
	t.Helper()
	c, err := New(cs.coordNC, Config{Namespace: cs.ns, LeaseTTL: 2 * time.Second, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	cctx, ccancel := context.WithCancel(cs.ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(cctx) }()
	stop = func() {
		if ccancel == nil {
			return
		}
		ccancel()
		ccancel = nil
		if err := <-done; err != nil && cctx.Err() == nil {
			t.Errorf("coordinator: %v", err)
		}
	}
	t.Cleanup(stop)
	cs.waitFor("a coordinator", func() bool { return cs.status().Epoch != 0 })
	return stop
}

// status is the coordinator's status, empty if none answers.
func (cs *coordServer) status() *Status {
	qctx, qcancel := context.WithTimeout(cs.ctx, 2*time.Second)
	defer qcancel()
	st, err := QueryStatus(qctx, cs.obsNC, cs.ns)
	if err != nil {
		return &Status{}
	}
	return st
}

func (cs *coordServer) waitFor(what string, cond func() bool) {
	cs.t.Helper()
	testwait.For(cs.t, 30*time.Second, what, cond)
}

// jobsHeld is how many messages NS_JOBS holds.
func (cs *coordServer) jobsHeld() uint64 {
	s, err := cs.js.Stream(cs.ctx, cs.names.JobsStream())
	if err != nil {
		cs.t.Fatal(err)
	}
	return s.CachedInfo().State.Msgs
}

// recorded reads the next n records of NS_REJECTED (from the first, at the first call).
func (cs *coordServer) recorded(n int) []engine.Rejection {
	t := cs.t
	t.Helper()
	if cs.cons == nil {
		var err error
		if cs.cons, err = cs.js.OrderedConsumer(cs.ctx, cs.names.RejectedStream(), jetstream.OrderedConsumerConfig{}); err != nil {
			t.Fatal(err)
		}
	}
	var got []engine.Rejection
	for len(got) < n {
		m, err := cs.cons.Next(jetstream.FetchMaxWait(time.Until(deadlineOf(cs.ctx))))
		if err != nil {
			t.Fatalf("after %d records %+v: %v", len(got), got, err)
		}
		var seq uint64
		fmt.Sscan(m.Headers().Get(wire.HdrSeq), &seq)
		got = append(got, engine.Rejection{Subject: m.Headers().Get(wire.HdrSubject), Seq: seq, Reason: m.Headers().Get(wire.HdrReason)})
	}
	return got
}

// TestForgedOpenWhileNoCoordinatorRuns runs on a server with the users `weave auth` renders. Group
// g is sealed and still running (its job waits for a resource no worker holds) when its
// coordinator stops; group f has completed, its job failed (so its messages are kept). While no
// coordinator runs, the producer's user stores an open of g, a job, a keep-alive and a seal after
// it, a single job of g, a cancel of f and a malformed schedule. The next coordinator refuses each
// as the live coordinator does: recorded in NS_REJECTED with the live reason, counted, deleted
// from NS_JOBS, and nothing changes (g's job is its only one, still pending). The same inputs
// stored in NS_JOBS while it runs get the same records. (Replay used to accept the open, which
// started a new incarnation of g, and the single job, and to drop the cancel unrecorded; the
// schedule was recorded but not counted.)
func TestForgedOpenWhileNoCoordinatorRuns(t *testing.T) {
	t.Parallel()
	const ns = "fopen"
	cs := newCoordServer(t, ns, auth.User{Role: auth.Worker, WorkerID: "wy", Resources: []string{"y"}})
	ctx, connect, names, status, waitFor := cs.ctx, cs.connect, cs.names, cs.status, cs.waitFor
	stop1 := cs.start()

	prodNC := connect(ns + "-producer")
	d, err := dispatcher.New(prodNC, dispatcher.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	h, err := d.Publish(ctx, "g", func(yield func(dispatcher.Job) bool) {
		yield(dispatcher.Job{Key: "real", Require: []string{"x"}}) // no worker holds x: it runs on
	})
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(connect(ns+"-worker-wy"), worker.Config{Namespace: ns, ID: "wy", Resources: []string{"y"}, Concurrency: 1, Logger: zerolog.Nop()},
		worker.HandlerFunc(func(context.Context, *worker.Job) ([]byte, error) { return nil, worker.Permanent(errors.New("no")) }))
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	wdone := make(chan error, 1)
	go func() { wdone <- w.Run(wctx) }()
	defer func() {
		wcancel()
		<-wdone
	}()
	hf, err := d.Publish(ctx, "f", func(yield func(dispatcher.Job) bool) {
		yield(dispatcher.Job{Key: "fails", Require: []string{"y"}})
	})
	if err != nil {
		t.Fatal(err)
	}
	if sum, err := hf.WaitSummary(ctx); err != nil || sum.Failed != 1 {
		t.Fatalf("f's summary %+v, %v; want its job failed", sum, err)
	}
	waitFor("g's job to be admitted", func() bool { return status().Totals.Admitted == 2 })
	stop1()

	jobsHeld := cs.jobsHeld
	held := jobsHeld() // g's and f's open, job and seal

	// The producer's user stores the inputs; each is refused for the reason returned.
	prodJS, err := jetstream.New(prodNC)
	if err != nil {
		t.Fatal(err)
	}
	storeInputs := func(key string) (want []engine.Rejection) { // key: the single job's, so that it is not deduplicated
		t.Helper()
		for _, in := range []struct {
			m      *nats.Msg
			reason string
		}{
			{&nats.Msg{Subject: names.GroupSubject("g"), Header: wire.GroupControl{Group: "g", Op: wire.OpOpen}.Header()}, engine.OpenRunning("g")},
			{&nats.Msg{Subject: names.JobSubject("g"), Header: wire.JobMeta{Group: "g"}.Header(), Data: []byte("forged")}, "job after the seal of group g"},
			{&nats.Msg{Subject: names.GroupSubject("g"), Header: wire.GroupControl{Group: "g", Op: wire.OpKeepAlive}.Header()}, "keep-alive of a group that is not open: g"},
			{&nats.Msg{Subject: names.GroupSubject("g"), Header: wire.GroupControl{Group: "g", Op: wire.OpSeal, Count: 1}.Header()}, "seal of a group that is not open: g"},
			{&nats.Msg{Subject: names.JobSubject("g"), Header: wire.JobMeta{Group: "g", Key: key, Single: true}.Header(), Data: []byte("forged")}, engine.SingleRunning("g")},
			{&nats.Msg{Subject: names.GroupSubject("f"), Header: wire.GroupControl{Group: "f", Op: wire.OpCancel}.Header()}, engine.CancelNotOpen("f")},
		} {
			ack, err := prodJS.PublishMsg(ctx, in.m)
			if err != nil {
				t.Fatalf("storing %s: %v", in.m.Subject, err)
			}
			want = append(want, engine.Rejection{Subject: in.m.Subject, Seq: ack.Sequence, Reason: in.reason})
		}
		return want
	}
	recorded := cs.recorded
	check := func(when string, want []engine.Rejection, rejected, refused uint64) {
		t.Helper()
		got := recorded(len(want))
		// At replay a cancel is applied before the open stored ahead of it is decided.
		slices.SortFunc(got, func(a, b engine.Rejection) int { return cmp.Compare(a.Seq, b.Seq) })
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("%s: record %d is %+v, want %+v", when, i, got[i], want[i])
			}
		}
		waitFor("the refused inputs to be deleted from NS_JOBS", func() bool { return jobsHeld() == held })
		st := status()
		if st.Totals.Rejected != rejected || st.Totals.Refused != refused || st.Totals.Admitted != 2 {
			t.Errorf("%s: %d rejected, %d refused, %d admitted; want %d, %d and g's and f's jobs", when,
				st.Totals.Rejected, st.Totals.Refused, st.Totals.Admitted, rejected, refused)
		}
		if info, err := d.Job(ctx, h.FirstID()); err != nil || info.State != dispatcher.StatePending || info.Group != "g" {
			t.Errorf("%s: g's job is %+v, %v; want pending", when, info, err)
		}
	}

	stored := storeInputs("1")
	bad := &nats.Msg{Subject: names.ScheduleSubject("bad"), Data: []byte("{not json")}
	ack, err := prodJS.PublishMsg(ctx, bad)
	if err != nil {
		t.Fatal(err)
	}
	badReason := schedule.Decode(bad.Data, &schedule.Def{})
	stored = append([]engine.Rejection{{Subject: bad.Subject, Seq: ack.Sequence, Reason: badReason.Error()}}, stored...) // its sequence is NS_SCHEDULES' first
	cs.start()
	check("stored while no coordinator ran", stored, 6, 1)
	waitFor("f to be forgotten", func() bool { return status().OpenGroups == 1 })
	check("stored while a coordinator runs", storeInputs("2"), 11, 2)
}

func deadlineOf(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}
