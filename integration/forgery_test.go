package integration_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
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

// TestForgedInputsWhileNoCoordinatorRuns runs on a nats-server with exactly the users
// weave auth renders. While no coordinator runs, worker B's user (pool b) stores forged reports
// on its own report subject: about two jobs running on worker A (pool a), one of them for an
// attempt never released, one with a proof that is not the coordinators', and about a job no
// worker can run (never released). The producer's user stores control messages the coordinator
// refuses (cancel, seal and keep-alive of a group that is not open, a job of it, a redrive of
// it, an open claiming a redrive without the coordinator's proof and a job settling a failed one
// in it), an operator a malformed limit, the producer a malformed schedule; worker B's user tries
// control messages and another pool's heartbeats, which the server refuses. Then a coordinator
// starts, while worker B's user publishes heartbeats claiming pool a; before it does, worker A
// ends one of its jobs, so that job's real report comes after the forged ones and its batch is
// gone from WORK. Each stored forgery is refused and recorded in NS_REJECTED under its own
// sequence, each heartbeat refused and counted, and nothing changes: the real report decides its
// job (run once), the other job runs on and ends with worker A's result, the job no worker holds
// stays pending.
func TestForgedInputsWhileNoCoordinatorRuns(t *testing.T) {
	t.Parallel()
	const ns = "forge"
	pe := newPermEnv(t, ns, []auth.User{
		{Role: auth.Coordinator}, {Role: auth.Producer}, {Role: auth.Observer},
		{Role: auth.Worker, WorkerID: "wa", Resources: []string{"a"}},
		{Role: auth.Worker, WorkerID: "wb", Resources: []string{"b"}},
	})
	names := pe.names
	poolA, poolB := wire.PoolKey([]string{"a"}), wire.PoolKey([]string{"b"})
	coordNC, _ := pe.connect(ns + "-coordinator")
	startCoordinator := func(name string) (stop func()) {
		c, err := coordinator.New(coordNC, coordinator.Config{Namespace: ns, Logger: testLogger(name), LeaseTTL: 3 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		var stopped bool
		stop = func() {
			if stopped {
				return
			}
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
		t.Cleanup(stop)
		return stop
	}
	stopFirst := startCoordinator("coordinator 1")
	obsNC, _ := pe.connect(ns + "-observer")
	status := func() *coordinator.Status {
		// A deadline of its own: a request a stopping coordinator took and never answered must
		// not hold the wait that polls for the next one.
		ctx, cancel := context.WithTimeout(pe.ctx, 2*time.Second)
		defer cancel()
		st, err := coordinator.QueryStatus(ctx, obsNC, ns)
		if err != nil {
			return &coordinator.Status{}
		}
		return st
	}
	testwait.For(t, time.Minute, "the coordinator to answer", func() bool { return status().Epoch != 0 })

	// Worker A runs two jobs, each in a batch of its own, and holds each until the test lets it go.
	running := make(chan *worker.Job, 2)
	letGo := map[string]chan struct{}{"one": make(chan struct{}), "two": make(chan struct{})}
	var mu sync.Mutex
	runs := map[string]int{}
	waNC, _ := pe.connect(ns + "-worker-wa")
	wa, err := worker.New(waNC, worker.Config{Namespace: ns, ID: "wa", Resources: []string{"a"}, Concurrency: 2,
		HeartbeatInterval: 250 * time.Millisecond, Logger: testLogger("worker wa")},
		worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
			mu.Lock()
			runs[j.Key]++
			mu.Unlock()
			running <- j
			select {
			case <-letGo[j.Key]:
				return []byte("real " + j.Key), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	pe.run("worker wa", wa.Run)
	prodNC, _ := pe.connect(ns + "-producer")
	d, err := dispatcher.New(prodNC, dispatcher.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	started := func(key string) *worker.Job {
		t.Helper()
		select {
		case j := <-running:
			if j.Key != key {
				t.Fatalf("worker A started %s, want %s", j.Key, key)
			}
			return j
		case <-pe.ctx.Done():
			t.Fatalf("worker A did not start %s", key)
			return nil
		}
	}
	var handles []*dispatcher.Handle
	var jobs []*worker.Job
	for _, key := range []string{"one", "two"} {
		h, err := d.Publish(pe.ctx, "g-"+key, func(yield func(dispatcher.Job) bool) {
			yield(dispatcher.Job{Key: key, Require: []string{"a"}})
		})
		if err != nil {
			t.Fatal(err)
		}
		handles = append(handles, h)
		jobs = append(jobs, started(key))
	}
	one, two := jobs[0], jobs[1]
	hx, err := d.Publish(pe.ctx, "gx", func(yield func(dispatcher.Job) bool) {
		yield(dispatcher.Job{Key: "never", Require: []string{"x"}}) // no worker holds x
	})
	if err != nil {
		t.Fatal(err)
	}
	never := hx.FirstID()
	stopFirst()

	// No coordinator runs. Worker B's user stores forged reports on its own subject.
	wbNC, wbErrs := pe.connect(ns + "-worker-wb")
	wbJS, err := jetstream.New(wbNC)
	if err != nil {
		t.Fatal(err)
	}
	forged := []byte("FORGED-BY-ATTACKER")
	rejectedAt := map[string]bool{} // subject and sequence of every input that must be refused
	store := func(js jetstream.JetStream, m *nats.Msg) {
		t.Helper()
		ack, err := js.PublishMsg(pe.ctx, m)
		if err != nil {
			t.Fatalf("storing %s: %v", m.Subject, err)
		}
		rejectedAt[m.Subject+" "+strconv.FormatUint(ack.Sequence, 10)] = true
	}
	for _, r := range []wire.Report{
		{ID: one.ID, Attempt: 1, Status: wire.StatusOK, Data: forged},
		{ID: two.ID, Attempt: 1, Status: wire.StatusPermanent, Data: forged},
		{ID: one.ID, Attempt: 2, Status: wire.StatusOK, Data: forged},
		{ID: never, Attempt: 1, Status: wire.StatusOK, Data: forged},
	} {
		m := nats.NewMsg(names.ReportSubject(poolB, "wb"))
		m.Data = wire.AppendReports(nil, "wb", []wire.Report{r})
		store(wbJS, m)
	}
	m := nats.NewMsg(names.ReportSubject(poolB, "wb"))
	m.Data = wire.AppendReports(nil, "wb", []wire.Report{{ID: two.ID, Attempt: 1, Status: wire.StatusOK, Data: forged}})
	m.Header = nats.Header{"Weave-Proof": []string{strconv.FormatUint(two.ID, 10) + " 1 0.AAAAAAAAAAAAAAAAAAAAAA"}}
	store(wbJS, m)
	// The server refuses worker B's control messages and its heartbeats in another pool.
	for _, subject := range []string{names.GroupSubject("g"), names.CancelSubject(), names.HeartbeatSubject(poolA, "wb"), names.JournalSubject()} {
		if err := wbNC.Publish(subject, []byte("x")); err != nil {
			t.Fatal(err)
		}
		wbErrs.waitFor(t, fmt.Sprintf("Permissions Violation for Publish to %q", subject))
	}
	// The producer's user stores control messages the coordinator refuses live.
	prodJS, err := jetstream.New(prodNC)
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []wire.GroupOp{wire.OpCancel, wire.OpSeal, wire.OpKeepAlive, wire.OpRedrive} {
		store(prodJS, &nats.Msg{Subject: names.GroupSubject("ghost"), Header: wire.GroupControl{Group: "ghost", Op: op}.Header()})
	}
	store(prodJS, &nats.Msg{Subject: names.JobSubject("ghost"), Header: wire.JobMeta{Group: "ghost"}.Header(), Data: []byte("p")})
	// A redrive no coordinator accepted: an open claiming one, without its proof, and a job that
	// would settle a failed job.
	rtok := wire.GroupToken("forged-redrive")
	store(prodJS, &nats.Msg{Subject: names.GroupSubject(rtok), Header: wire.GroupControl{Group: "forged-redrive", Op: wire.OpOpen, Redrive: 1}.Header()})
	store(prodJS, &nats.Msg{Subject: names.JobSubject(rtok), Header: wire.JobMeta{Group: "forged-redrive", RedriveOf: one.ID}.Header(), Data: []byte("p")})
	store(prodJS, &nats.Msg{Subject: names.ScheduleSubject("bad"), Data: []byte("{not json")})
	coordJS, err := jetstream.New(coordNC)
	if err != nil {
		t.Fatal(err)
	}
	store(coordJS, &nats.Msg{Subject: names.LimitSubject(wire.LimitResource, "a"), Data: []byte("{not json")})

	// Worker A ends job one: its report, with the release's proof, is stored after the forged
	// ones, and its batch acknowledged (gone from WORK), so only the proof shows the release.
	close(letGo["one"])
	testwait.For(t, time.Minute, "job one's batch to be acknowledged", func() bool {
		s, err := coordJS.Stream(pe.ctx, names.WorkStream())
		return err == nil && s.CachedInfo().State.Msgs == 1
	})

	// A coordinator starts, while worker B's user claims pool a in heartbeats on its own subject.
	stopSecond := startCoordinator("coordinator 2")
	claim := wire.Heartbeat{Version: wire.Version, Worker: "wb", Pool: poolA, Resources: []string{"a"}, Concurrency: 1000, Sleeping: 1000, IntervalMS: 250, Run: "forged"}
	testwait.For(t, time.Minute, "the forged heartbeats to be refused", func() bool {
		if err := wbNC.Publish(names.HeartbeatSubject(poolB, "wb"), claim.Marshal()); err != nil {
			t.Fatal(err)
		}
		return status().Totals.RejectedHeartbeats >= 1
	})
	recorded := newRejectionReader(t, pe.ctx, coordJS, names)
	forgedReports := map[string]int{} // records of worker B's reports, by sequence
	heartbeats := 0                   // records of worker B's heartbeats
	note := func(recs []rejection) {
		for _, rec := range recs {
			delete(rejectedAt, rec.subject+" "+rec.seq)
			switch rec.subject {
			case names.ReportSubject(poolB, "wb"):
				forgedReports[rec.seq]++
			case names.HeartbeatSubject(poolB, "wb"):
				heartbeats++
			}
		}
	}
	left := len(rejectedAt)
	testwait.For(t, time.Minute, "every stored forgery and a forged heartbeat to be recorded in NS_REJECTED", func() bool {
		note(recorded.next())
		if len(rejectedAt) != left {
			left = len(rejectedAt)
			t.Logf("not recorded yet: %v", rejectedAt)
		}
		return len(rejectedAt) == 0 && heartbeats > 0
	})
	testwait.For(t, time.Minute, "worker A's heartbeats to reach the new coordinator", func() bool { return len(status().Workers) == 1 })
	st := status()
	if st.Totals.RejectedReports != 5 {
		t.Errorf("rejected_reports = %d, want the 5 forged reports", st.Totals.RejectedReports)
	}
	for _, p := range st.Pools {
		if p.Key == poolA && p.Slots != 2 {
			t.Errorf("pool a has %d slots after the forged heartbeats, want worker A's 2", p.Slots)
		}
	}

	// Nothing changed: job one ended with worker A's result, job two runs on worker A, the job
	// nobody holds is pending.
	od, err := dispatcher.New(obsNC, dispatcher.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(od.Close)
	for id, want := range map[uint64]dispatcher.State{two.ID: dispatcher.StateRunning, never: dispatcher.StatePending} {
		if info, err := od.Job(pe.ctx, id); err != nil || info.State != want {
			t.Fatalf("job %d after the forgeries: %+v, %v; want %v", id, info, err, want)
		}
	}
	close(letGo["two"])
	for i, h := range handles {
		res, err := h.Wait(pe.ctx)
		if err != nil {
			t.Fatal(err)
		}
		key := []string{"one", "two"}[i]
		if o := res.Jobs; len(o) != 1 || o[0].State != dispatcher.StateDone || string(o[0].Result) != "real "+key || o[0].Attempts != 1 {
			t.Errorf("job %s: %+v, want done with worker A's result at attempt 1", key, o)
		}
	}
	mu.Lock()
	if runs["one"] != 1 || runs["two"] != 1 {
		t.Errorf("worker A ran job one %d×, two %d×; want once each (a proven report decides, a forged one changes nothing)", runs["one"], runs["two"])
	}
	mu.Unlock()
	if info, err := od.Job(pe.ctx, never); err != nil || info.State != dispatcher.StatePending {
		t.Fatalf("the job nobody holds: %+v, %v; want pending", info, err)
	}

	// The refusals were journaled: a third coordinator's replay does not record them again. A
	// forged report it refuses live is recorded after whatever its replay recorded.
	epoch := status().Epoch
	stopSecond()
	startCoordinator("coordinator 3")
	testwait.For(t, time.Minute, "the third coordinator to answer", func() bool { return status().Epoch > epoch })
	m = nats.NewMsg(names.ReportSubject(poolB, "wb"))
	m.Data = wire.AppendReports(nil, "wb", []wire.Report{{ID: never, Attempt: 1, Status: wire.StatusOK, Data: forged}})
	ack, err := wbJS.PublishMsg(pe.ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	last := strconv.FormatUint(ack.Sequence, 10)
	testwait.For(t, time.Minute, "the live forgery to be recorded", func() bool {
		note(recorded.next())
		return forgedReports[last] > 0
	})
	if len(forgedReports) != 6 {
		t.Errorf("NS_REJECTED holds worker B's reports at sequences %v, want the 5 forgeries and the live one", forgedReports)
	}
	for seq, n := range forgedReports {
		if n != 1 {
			t.Errorf("worker B's report at EVENTS %s recorded %d times, want once", seq, n)
		}
	}
}

// rejection is one record of NS_REJECTED: the refused message's subject and sequence.
type rejection struct{ subject, seq, reason string }

// rejectionReader reads the records of NS_REJECTED in order, with one consumer.
type rejectionReader struct {
	t    *testing.T
	cons jetstream.Consumer
}

func newRejectionReader(t *testing.T, ctx context.Context, js jetstream.JetStream, names wire.Names) *rejectionReader {
	t.Helper()
	cons, err := js.OrderedConsumer(ctx, names.RejectedStream(), jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return &rejectionReader{t: t, cons: cons}
}

// next returns the records stored since the last call (waiting a moment for the first).
func (rr *rejectionReader) next() []rejection {
	batch, err := rr.cons.Fetch(256, jetstream.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		rr.t.Fatal(err)
	}
	var recs []rejection
	for m := range batch.Messages() {
		h := m.Headers()
		recs = append(recs, rejection{subject: h.Get(wire.HdrSubject), seq: h.Get(wire.HdrSeq), reason: h.Get(wire.HdrReason)})
	}
	if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
		rr.t.Fatal(err)
	}
	return recs
}
