package integration_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/internal/auth"
	"github.com/weavejobs/weave/internal/testwait"
	"github.com/weavejobs/weave/internal/wire"
	"github.com/weavejobs/weave/worker"
)

// permEnv is a nats-server process whose users are exactly those weave auth generates, one per
// role, with their connections.
type permEnv struct {
	t       *testing.T
	srv     *natsProc
	names   wire.Names
	entries map[string]auth.Entry // by user name
	pass    map[string]string
	ctx     context.Context
}

func newPermEnv(t *testing.T, ns string, users []auth.User) *permEnv {
	t.Helper()
	names, err := wire.NewNames(ns)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := auth.Entries(names, users)
	if err != nil {
		t.Fatal(err)
	}
	var conf bytes.Buffer
	if err := auth.WriteServerConfig(&conf, names, entries); err != nil {
		t.Fatal(err)
	}
	pe := &permEnv{t: t, names: names, entries: map[string]auth.Entry{}, pass: map[string]string{}}
	var env []string
	for _, e := range entries {
		pe.entries[e.Name] = e
		pe.pass[e.Name] = randomHex(12)
		env = append(env, auth.PasswordVar(e.Name)+"="+pe.pass[e.Name])
	}
	pe.srv = startNATSProc(t, conf.String(), env...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	pe.ctx = ctx
	return pe
}

// connect connects as user, with its password and private inbox prefix.
func (pe *permEnv) connect(user string) (*nats.Conn, *asyncErrors) {
	pe.t.Helper()
	e, ok := pe.entries[user]
	if !ok {
		pe.t.Fatalf("no user %s", user)
	}
	errs := newAsyncErrors()
	nc, err := nats.Connect("nats://"+pe.srv.addr(), nats.UserInfo(user, pe.pass[user]),
		nats.CustomInboxPrefix(e.InboxPrefix), nats.ErrorHandler(errs.handler), nats.Name(user))
	if err != nil {
		pe.t.Fatalf("connect as %s: %v", user, err)
	}
	pe.t.Cleanup(nc.Close)
	return nc, errs
}

// run runs fn until the test ends.
func (pe *permEnv) run(name string, fn func(ctx context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	pe.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			pe.t.Errorf("%s: %v", name, err)
		}
	})
}

// TestPermissions runs a namespace on a nats-server whose users have exactly the permissions
// weave auth generates, one per role, and shows that (a) every role works with only its
// permissions, (b) a worker user cannot pull another pool's work, publish on another worker's
// subjects, cancel a group or forge an outcome, and (c) a forged report from a legitimate worker
// of another pool, on its own subject, changes nothing and is recorded in NS_REJECTED.
func TestPermissions(t *testing.T) {
	t.Parallel()
	const ns = "perm"
	pe := newPermEnv(t, ns, []auth.User{
		{Role: auth.Coordinator}, {Role: auth.Producer}, {Role: auth.Observer},
		{Role: auth.Worker, WorkerID: "wa", Resources: []string{"a"}},
		{Role: auth.Worker, WorkerID: "wb", Resources: []string{"b"}},
	})
	names := pe.names
	poolA, poolB := wire.PoolKey([]string{"a"}), wire.PoolKey([]string{"b"})

	// The coordinator user creates the streams (workers and producers cannot).
	coordNC, coordErrs := pe.connect("perm-coordinator")
	c, err := coordinator.New(coordNC, coordinator.Config{Namespace: ns, Logger: testLogger("coordinator"),
		RescueAfter: 500 * time.Millisecond, RetryBase: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	pe.run("coordinator", c.Run)
	obsNC, obsErrs := pe.connect("perm-observer")
	status := func() *coordinator.Status {
		st, err := coordinator.QueryStatus(pe.ctx, obsNC, ns)
		if err != nil {
			t.Fatalf("observer status: %v", err)
		}
		return st
	}
	testwait.For(t, 30*time.Second, "the coordinator to answer the observer's status", func() bool {
		_, err := coordinator.QueryStatus(pe.ctx, obsNC, ns)
		return err == nil
	})

	// Two workers of different pools. Worker A's job "held" waits for the test, so that a forged
	// report can arrive while it runs.
	type ran struct{ worker, key string }
	var mu sync.Mutex
	var runs []ran
	heldJob := make(chan *worker.Job, 1)
	preferB := make(chan *worker.Job, 1)
	releaseHeld := make(chan struct{})
	handler := func(id string) worker.HandlerFunc {
		return func(ctx context.Context, j *worker.Job) ([]byte, error) {
			mu.Lock()
			runs = append(runs, ran{id, j.Key})
			mu.Unlock()
			switch j.Key {
			case "held":
				heldJob <- j
				select {
				case <-releaseHeld:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
				return []byte("real"), nil
			case "pref-b":
				if id == "wb" { // held until worker B crashes, then rescued
					preferB <- j
					<-ctx.Done()
					return nil, ctx.Err()
				}
			case "bad":
				return nil, worker.Permanent(errors.New("bad input"))
			}
			return []byte("ran on " + id), nil
		}
	}
	wbNC, wbErrs := pe.connect("perm-worker-wb")
	waNC, waErrs := pe.connect("perm-worker-wa")
	for _, w := range []struct {
		id string
		nc *nats.Conn
		rs []string
	}{{"wa", waNC, []string{"a"}}, {"wb", wbNC, []string{"b"}}} {
		nc := w.nc
		wk, err := worker.New(nc, worker.Config{Namespace: ns, ID: w.id, Resources: w.rs, Concurrency: 2,
			HeartbeatInterval: 250 * time.Millisecond, Lease: time.Second, DrainTimeout: 100 * time.Millisecond,
			TimeoutGrace: 100 * time.Millisecond, Logger: testLogger("worker " + w.id)}, handler(w.id))
		if err != nil {
			t.Fatal(err)
		}
		pe.run("worker "+w.id, func(ctx context.Context) error {
			if err := wk.Run(ctx); !errors.Is(err, nats.ErrConnectionClosed) {
				return err
			}
			return nil // worker B's crash, below
		})
	}
	testwait.For(t, 30*time.Second, "both workers to join", func() bool { return len(status().Workers) == 2 })

	// (a) The producer publishes a group needing both pools and waits for it.
	prodNC, prodErrs := pe.connect("perm-producer")
	d, err := dispatcher.New(prodNC, dispatcher.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	h, err := d.Publish(pe.ctx, "g1", func(yield func(dispatcher.Job) bool) {
		for _, j := range []dispatcher.Job{
			{Key: "a1", Require: []string{"a"}}, {Key: "b1", Require: []string{"b"}},
			{Key: "a2", Require: []string{"a"}}, {Key: "bad", Require: []string{"b"}, MaxAttempts: 1},
		} {
			if !yield(j) {
				return
			}
		}
	})
	if err != nil {
		t.Fatalf("producer publish: %v", err)
	}
	res, err := h.Wait(pe.ctx)
	if err != nil {
		t.Fatalf("producer wait: %v", err)
	}
	if res.Summary.Done != 3 || res.Summary.Failed != 1 {
		t.Fatalf("summary %+v, want 3 done and 1 failed", res.Summary)
	}
	for _, o := range res.Jobs {
		want := "ran on w" + o.Key[:1]
		if o.Key != "bad" && string(o.Result) != want {
			t.Errorf("job %s: result %q, want %q", o.Key, o.Result, want)
		}
	}
	// Single jobs submitted together travel in a single pack (NS.jobs.~): a producer's
	// credentials store it and wait for its jobs.
	subs, err := d.SubmitMany(pe.ctx, []dispatcher.Single{{Group: "s1", Job: dispatcher.Job{Require: []string{"a"}}}, {Group: "s2", Job: dispatcher.Job{Require: []string{"b"}}}})
	if err != nil || len(subs) != 2 || !wire.IsPacked(subs[0].ID) {
		t.Fatalf("producer SubmitMany: %+v, %v", subs, err)
	}
	for _, s := range subs {
		if out, err := s.Handle.WaitJob(pe.ctx, s.ID); err != nil || out.State != dispatcher.StateDone {
			t.Fatalf("single job of a pack, group %s: %+v, %v", s.Handle.GroupID(), out, err)
		}
	}
	// Publishing a group again while it runs is refused as running: the producer may confirm
	// that with the leader of RESULTS (the message get API) before it says so.
	one := func(yield func(dispatcher.Job) bool) {
		yield(dispatcher.Job{Key: "z", Require: []string{"nobody-holds-this"}})
	}
	if _, err := d.Publish(pe.ctx, "held", one); err != nil {
		t.Fatalf("producer publish: %v", err)
	}
	if _, err := d.Publish(pe.ctx, "held", one); !errors.Is(err, dispatcher.ErrGroupRunning) {
		t.Fatalf("producer publishing a running group again: %v, want ErrGroupRunning", err)
	}
	if err := d.Attach("held").Cancel(pe.ctx); err != nil {
		t.Fatalf("producer cancel: %v", err)
	}

	// The observer lists the failed job.
	od, err := dispatcher.New(obsNC, dispatcher.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(od.Close)
	var failed []string
	for o, err := range od.Failed(pe.ctx, "") {
		if err != nil {
			t.Fatalf("observer failed list: %v", err)
		}
		failed = append(failed, o.Key+": "+o.Err)
	}
	if len(failed) != 1 || failed[0] != "bad: bad input" {
		t.Fatalf("observer's failed list %q, want the one bad job", failed)
	}

	// The producer retries the failed job (a new incarnation of g1); it fails again.
	rh, err := d.Redrive(pe.ctx, "g1")
	if err != nil {
		t.Fatalf("producer redrive: %v", err)
	}
	if rres, err := rh.Wait(pe.ctx); err != nil || rres.Summary.Jobs != 1 || rres.Summary.Failed != 1 {
		t.Fatalf("redriven group: %+v, %v; want its one job failed again", rres, err)
	}

	// (b) What worker B's user may not do: the server refuses each, with a permission violation.
	gtok := wire.GroupToken("g1")
	for _, subject := range []string{
		"$JS.API.CONSUMER.CREATE." + names.WorkStream() + "." + names.WorkConsumer(poolA) + "." + names.WorkSubject(poolA),
		"$JS.API.CONSUMER.MSG.NEXT." + names.WorkStream() + "." + names.WorkConsumer(poolA),
		"$JS.ACK." + names.WorkStream() + "." + names.WorkConsumer(poolA) + ".1.1.1.1.1",
		"$JS.API.STREAM.CREATE." + names.JobsStream(),
		names.HeartbeatSubject(poolA, "wa"), // another worker's heartbeats
		names.HeartbeatSubject(poolA, "wb"), // its own ID in another pool
		names.ReportSubject(poolA, "wa"),    // another worker's reports
		names.ReportSubject(poolB, "wz"),    // another ID in its pool
		names.ReportSubject(poolB, wire.RescueWorker),
		names.GroupSubject(gtok), // cancel (or open, seal) a group
		names.OutcomeSubject(gtok),
		names.CancelSubject(),
		names.WorkSubject(poolB),
		names.JournalSubject(),
		names.InspectSubject(),   // inspection is for producers and observers
		names.StandbySubject(),   // only a coordinator stands by
		names.HeldSubject(poolA), // workers answer held-job requests, they do not ask
		names.RollCallSubject(),  // nor call the roll (every worker would heartbeat)
	} {
		if err := wbNC.Publish(subject, []byte("x")); err != nil {
			t.Fatal(err)
		}
		wbErrs.waitFor(t, fmt.Sprintf("Permissions Violation for Publish to %q", subject))
	}
	// Nor read others' replies or outcomes.
	for _, subject := range []string{"_INBOX.>", auth.InboxPrefix("perm-producer") + ".>", names.AllOutcomes()} {
		if _, err := wbNC.SubscribeSync(subject); err != nil {
			t.Fatal(err)
		}
		wbErrs.waitFor(t, fmt.Sprintf("Permissions Violation for Subscription to %q", subject))
	}
	// Nor ask for a redrive: the request is refused by the server, so no coordinator sees it.
	wd, err := dispatcher.New(wbNC, dispatcher.Config{Namespace: ns, RequestTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithTimeout(pe.ctx, 3*time.Second)
	if h, err := wd.Redrive(rctx, "g1"); err == nil || h != nil || errors.Is(err, dispatcher.ErrGroupRunning) || errors.Is(err, dispatcher.ErrNotFailed) {
		t.Fatalf("worker's redrive = %v, %v; want it refused by the server", h, err)
	}
	rcancel()
	wd.Close()
	wbErrs.waitFor(t, fmt.Sprintf("Permissions Violation for Publish to %q", names.GroupSubject(gtok)))
	// The observer may not cancel either.
	if err := obsNC.Publish(names.GroupSubject(gtok), nil); err != nil {
		t.Fatal(err)
	}
	obsErrs.waitFor(t, "Permissions Violation for Publish")
	// Schedules are the producer's: it adds and lists one; a worker cannot add one.
	if err := d.AddSchedule(pe.ctx, dispatcher.Schedule{Name: "hourly", Cron: "@hourly", Jobs: []dispatcher.Job{{Key: "k"}}}); err != nil {
		t.Fatalf("producer adding a schedule: %v", err)
	}
	if infos, err := od.Schedules(pe.ctx); err != nil || len(infos) != 1 || infos[0].Name != "hourly" {
		t.Fatalf("observer listing the schedules: %+v, %v", infos, err)
	}
	// The producer removes it (RemoveSchedule reads the definition first, with a direct get).
	if err := d.RemoveSchedule(pe.ctx, "hourly"); err != nil {
		t.Fatalf("producer removing a schedule: %v", err)
	}
	if infos, err := od.Schedules(pe.ctx); err != nil || len(infos) != 0 {
		t.Fatalf("schedules after the producer removed its one: %+v, %v", infos, err)
	}
	if err := wbNC.Publish(names.ScheduleSubject("sneaky"), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	wbErrs.waitFor(t, fmt.Sprintf("Permissions Violation for Publish to %q", names.ScheduleSubject("sneaky")))
	// Limits are the operator's (the coordinator role's): a producer cannot lift one. (On a
	// connection of its own: the producer's must meet no error.)
	limNC, limErrs := pe.connect("perm-producer")
	ld, err := dispatcher.New(limNC, dispatcher.Config{Namespace: ns, RequestTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	lctx, lcancel := context.WithTimeout(pe.ctx, 3*time.Second)
	if err := ld.SetLimit(lctx, dispatcher.Limit{Kind: dispatcher.LimitResource, Name: "a", Concurrency: 1000}); err == nil {
		t.Fatal("a producer set a limit")
	}
	lcancel()
	ld.Close()
	// Refused at its first request: SetLimit reads the stored limit (to keep a pause) before it
	// writes, and the producer may not read LIMITS either.
	limErrs.waitFor(t, fmt.Sprintf("Permissions Violation for Publish to %q", "$JS.API.DIRECT.GET."+names.LimitsStream()))
	// Nor may it write a limit's subject directly.
	if err := limNC.Publish(names.LimitSubject(wire.LimitResource, "a"), wire.AppendLimit(nil, wire.Limit{Kind: wire.LimitResource, Name: "a", Concurrency: 1000})); err != nil {
		t.Fatal(err)
	}
	limErrs.waitFor(t, fmt.Sprintf("Permissions Violation for Publish to %q", names.LimitSubject(wire.LimitResource, "a")))

	// A forged heartbeat on worker B's own subject, claiming pool A with many slots, is refused.
	forged := wire.Heartbeat{Worker: "wb", Pool: poolA, Resources: []string{"a"}, Concurrency: 1000, Sleeping: 1000, IntervalMS: 1000, Run: "forged"}
	if err := wbNC.Publish(names.HeartbeatSubject(poolB, "wb"), forged.Marshal()); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "the forged heartbeat to be refused", func() bool { return status().Totals.RejectedHeartbeats >= 1 })
	for _, p := range status().Pools {
		if p.Key == poolA && p.Slots != 2 {
			t.Fatalf("pool A has %d slots after a forged heartbeat, want 2", p.Slots)
		}
	}

	// (c) A job runs on worker A; worker B reports it done on its own report subject (which it
	// may publish on): the report is refused and recorded, and the job's outcome is the real one.
	h2, err := d.Publish(pe.ctx, "g2", func(yield func(dispatcher.Job) bool) {
		yield(dispatcher.Job{Key: "held", Require: []string{"a"}})
	})
	if err != nil {
		t.Fatal(err)
	}
	var held *worker.Job
	select {
	case held = <-heldJob:
	case <-pe.ctx.Done():
		t.Fatal("the held job never ran")
	}
	// The observer inspects the running job: its live state and worker from the coordinator,
	// its key and publish time from its stored message.
	if info, err := od.Job(pe.ctx, held.ID); err != nil || info.State != dispatcher.StateRunning || info.Worker != "wa" || info.Key != "held" || info.PublishedAt.IsZero() || info.StartedAt.IsZero() {
		t.Fatalf("observer inspecting the running job: %+v, %v", info, err)
	}
	if g, err := od.Group(pe.ctx, "g1"); err != nil || g.State != dispatcher.GroupComplete {
		t.Fatalf("observer inspecting a complete group: %+v, %v", g, err)
	}
	wbJS, err := jetstream.New(wbNC)
	if err != nil {
		t.Fatal(err)
	}
	report := wire.AppendReports(nil, "wb", []wire.Report{{ID: held.ID, Attempt: uint32(held.Attempt), Status: wire.StatusOK, Data: []byte("forged")}})
	if _, err := wbJS.Publish(pe.ctx, names.ReportSubject(poolB, "wb"), report); err != nil {
		t.Fatalf("worker B publishing on its own report subject: %v", err)
	}
	testwait.For(t, 10*time.Second, "the forged report to be refused", func() bool { return status().Totals.RejectedReports >= 1 })
	close(releaseHeld)
	out, err := h2.WaitKey(pe.ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	if out.State != dispatcher.StateDone || string(out.Result) != "real" {
		t.Fatalf("the held job's outcome is %v %q, want done with the real result", out.State, out.Result)
	}
	// The rejection is in NS_REJECTED, read with the coordinator's user.
	coordJS, err := jetstream.New(coordNC)
	if err != nil {
		t.Fatal(err)
	}
	rejected, err := coordJS.Stream(pe.ctx, names.RejectedStream())
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	cons, err := rejected.OrderedConsumer(pe.ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	info, err := rejected.Info(pe.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range info.State.Msgs {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		reasons = append(reasons, m.Headers().Get(wire.HdrReason))
	}
	want := fmt.Sprintf("about job %d, which was released to pool %s", held.ID, poolA)
	if !containsText(reasons, want) {
		t.Fatalf("NS_REJECTED holds %q, want a reason containing %q", reasons, want)
	}
	if !containsText(reasons, "heartbeat of worker \"wb\" of pool "+poolA+" on the subject of worker \"wb\" of pool "+poolB) {
		t.Fatalf("NS_REJECTED holds %q, want the forged heartbeat", reasons)
	}
	// The coordinator's own permissions cover the rescue of an orphaned pool: worker B crashes
	// (its connection closes) holding a job that prefers b; the coordinator takes it back from
	// pool B's consumer once its lease runs out, and worker A runs it.
	h3, err := d.Publish(pe.ctx, "g3", func(yield func(dispatcher.Job) bool) {
		yield(dispatcher.Job{Key: "pref-b", Prefer: []string{"b"}})
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-preferB:
	case <-pe.ctx.Done():
		t.Fatal("worker B never got the job preferring b")
	}
	wbNC.Close()
	out3, err := h3.WaitKey(pe.ctx, "pref-b")
	if err != nil {
		t.Fatal(err)
	}
	if out3.State != dispatcher.StateDone || string(out3.Result) != "ran on wa" || out3.Attempts != 2 {
		t.Fatalf("the rescued job: %v %q after %d attempts, want done on worker A at attempt 2", out3.State, out3.Result, out3.Attempts)
	}
	if st := status(); st.Totals.Rescued != 1 {
		t.Fatalf("rescued %d jobs, want 1", st.Totals.Rescued)
	}

	mu.Lock()
	for _, r := range runs {
		if r.worker == "wb" && strings.HasPrefix(r.key, "a") || r.worker == "wa" && (r.key == "b1" || r.key == "bad") {
			t.Errorf("worker %s ran job %s of the other pool", r.worker, r.key)
		}
	}
	mu.Unlock()
	for who, errs := range map[string]*asyncErrors{"coordinator": coordErrs, "producer": prodErrs, "worker wa": waErrs} {
		errs.mu.Lock()
		if len(errs.errs) > 0 {
			t.Errorf("the %s met errors with its own permissions: %v", who, errs.errs)
		}
		errs.mu.Unlock()
	}
}

func containsText(list []string, text string) bool {
	for _, s := range list {
		if strings.Contains(s, text) {
			return true
		}
	}
	return false
}
