package worker_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/integration/jstest"
	"github.com/weavejobs/weave/internal/config"
	"github.com/weavejobs/weave/internal/testwait"
	"github.com/weavejobs/weave/internal/topology"
	"github.com/weavejobs/weave/internal/wire"
	"github.com/weavejobs/weave/worker"
)

// In these tests a worker goes dormant once one 300ms pull has expired without work, and a
// dormant worker's pull waits an hour at the server: a job that runs within waitTimeout reached it
// without its pull's expiry, which the default bounds at a minute.
const (
	testActiveExpiry  = 300 * time.Millisecond
	testDormantExpiry = time.Hour
)

func dormancy(c worker.Config) worker.Config {
	return worker.WithPullExpiries(c, testActiveExpiry, testDormantExpiry)
}

var echo = worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) { return j.Payload, nil })

// A worker idle for a pull's expiry goes dormant: its heartbeats tell the coordinator to expect
// the next in 30s; a job released to its pool reaches it at once, on its dormant pull, and the
// coordinator hears of it at once; it goes dormant again once idle.
func TestDormantWorkerGetsWork(t *testing.T) {
	t.Parallel()
	f := setup(t)
	rr := f.reports()
	hbs := f.heartbeats()
	r := f.start(dormancy(worker.Config{Concurrency: 2, HeartbeatInterval: 50 * time.Millisecond}), echo)
	testwait.For(t, waitTimeout, "the worker dormant", func() bool { return r.w.Stats().Dormant })
	waitHeartbeat(t, hbs, "a dormant worker's", func(hb wire.Heartbeat) bool { return hb.IntervalMS == 30_000 })
	pulls := r.w.Stats().Pulls

	f.publish(r.w.Pool(), job(1, "to a dormant worker"))
	if rep := rr.next(); rep.ID != 1 || rep.Status != wire.StatusOK {
		t.Fatalf("report %+v", rep)
	}
	// Within waitTimeout, so not the dormant heartbeat 30s later: the batch brought one.
	waitHeartbeat(t, hbs, "after the batch", func(hb wire.Heartbeat) bool { return hb.IntervalMS < 30_000 })
	if st := r.w.Stats(); st.Pulls > pulls+1 {
		t.Errorf("%d pulls since dormant for one job, want at most 1 (the next after it)", st.Pulls-pulls)
	}
	testwait.For(t, waitTimeout, "the worker dormant again", func() bool { return r.w.Stats().Dormant })
	f.waitWorkEmpty()
	must(t, r.stop())
}

// A dormant worker notices a server restart, which loses its pull (the server ends it as it shuts
// down, and the connection drops): it pulls again at once rather than after the pull's expiry.
func TestDormantWorkerServerRestart(t *testing.T) {
	t.Parallel()
	f := setupWith(t, config.StreamOptions{}) // file storage: streams and consumer survive the restart
	rr := f.reports()
	r := f.start(dormancy(worker.Config{Concurrency: 1}), echo)
	testwait.For(t, waitTimeout, "the worker dormant", func() bool { return r.w.Stats().Dormant })
	pulls := r.w.Stats().Pulls
	must(t, f.srv.Restart(t.Context()))
	testwait.For(t, waitTimeout, "a pull after the restart", func() bool { return r.w.Stats().Pulls > pulls })
	testwait.For(t, waitTimeout, "the test connection back", f.nc.IsConnected)
	data := wire.AppendWork(nil, []wire.WorkJob{job(2, "after")})
	testwait.For(t, waitTimeout, "a publish after the restart", func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_, err := f.js.Publish(ctx, f.names.WorkSubject(r.w.Pool()), data, jetstream.WithMsgID("job-2"))
		return err == nil
	})
	if rep := rr.next(); rep.ID != 2 || rep.Status != wire.StatusOK || string(rep.Data) != "after" {
		t.Errorf("report %+v", rep)
	}
	must(t, r.stop())
}

// A dormant worker whose connection is cut (the server drops its pull with it) pulls again once
// reconnected, rather than after the pull's expiry, and is no longer dormant: the coordinator
// hears so at once.
func TestDormantWorkerReconnects(t *testing.T) {
	t.Parallel()
	f := setup(t)
	rr := f.reports()
	proxy, err := jstest.StartProxy(f.srv.ClientURL())
	must(t, err)
	t.Cleanup(proxy.Close)
	hbs := f.heartbeats()
	r := f.startVia(proxy.URL(), dormancy(worker.Config{Concurrency: 1, HeartbeatInterval: 50 * time.Millisecond}), echo)
	testwait.For(t, waitTimeout, "the worker dormant", func() bool { return r.w.Stats().Dormant })
	waitHeartbeat(t, hbs, "a dormant worker's", func(hb wire.Heartbeat) bool { return hb.IntervalMS == 30_000 })
	pulls := r.w.Stats().Pulls
	proxy.Cut()
	testwait.For(t, waitTimeout, "a pull after the reconnect", func() bool { return r.w.Stats().Pulls > pulls })
	waitHeartbeat(t, hbs, "after the reconnect", func(hb wire.Heartbeat) bool { return hb.IntervalMS < 30_000 })
	f.publish(r.w.Pool(), job(4, "after"))
	if rep := rr.next(); rep.ID != 4 || rep.Status != wire.StatusOK {
		t.Errorf("report %+v", rep)
	}
	must(t, r.stop())
}

// On a cluster, a dormant worker whose pool consumer's leader changes is told so by the new
// leader (its pull is no longer served) and pulls again at once.
func TestDormantWorkerLeaderChange(t *testing.T) {
	t.Parallel()
	c := jstest.NewCluster(t, 3)
	nc := jstest.NewConn(t, c.ClientURL(), connOpts...)
	js, err := jetstream.New(nc)
	must(t, err)
	names, err := wire.NewNames("")
	must(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := topology.Init(ctx, js, names, config.StreamOptions{Replicas: 3, MemoryStorage: true}); err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, nc: nc, js: js, names: names}
	rr := f.reports()
	r := f.startVia(c.ClientURL(), dormancy(worker.Config{Concurrency: 1}), echo)
	testwait.For(t, waitTimeout, "the worker dormant", func() bool { return r.w.Stats().Dormant })
	// The dormant pull is waiting at the consumer's leader before it changes: one still on its
	// way would reach no leader, and the worker would hear of it only at its pull's expiry.
	var pulls uint64
	testwait.For(t, waitTimeout, "the dormant pull waiting at the consumer's leader", func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		pulls = r.w.Stats().Pulls
		cons, err := js.Consumer(ctx, names.WorkStream(), names.WorkConsumer(r.w.Pool()))
		if err != nil {
			return false
		}
		info, err := cons.Info(ctx)
		return err == nil && info.NumWaiting > 0
	})

	stepdown := "$JS.API.CONSUMER.LEADER.STEPDOWN." + names.WorkStream() + "." + names.WorkConsumer(r.w.Pool())
	m, err := nc.Request(stepdown, nil, 5*time.Second)
	must(t, err)
	var resp struct {
		Success bool            `json:"success"`
		Error   json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil || !resp.Success {
		t.Fatalf("leader stepdown: %s (%v)", m.Data, err)
	}
	testwait.For(t, waitTimeout, "a pull after the leader change", func() bool { return r.w.Stats().Pulls > pulls })

	testwait.For(t, waitTimeout, "a publish after the leader change", func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_, err := js.Publish(ctx, names.WorkSubject(r.w.Pool()), wire.AppendWork(nil, []wire.WorkJob{job(3, "after")}), jetstream.WithMsgID("job-3"))
		return err == nil
	})
	if rep := rr.next(); rep.ID != 3 || rep.Status != wire.StatusOK {
		t.Errorf("report %+v", rep)
	}
	must(t, r.stop())
}

// A worker answers a request on its heartbeats' inbox: the coordinator asks it so whether it
// still lives when another run of its ID asks to join (a dormant worker's heartbeats are too far
// apart to wait for).
func TestWorkerAnswersOnItsHeartbeatInbox(t *testing.T) {
	t.Parallel()
	f := setup(t)
	raw := make(chan *nats.Msg, 64)
	sub, err := f.nc.ChanSubscribe(f.names.AllHeartbeats(), raw)
	must(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	must(t, f.nc.Flush())
	r := f.start(worker.Config{Concurrency: 1}, echo)
	m := recv(t, "a heartbeat", raw)
	if m.Reply == "" {
		t.Fatal("a heartbeat without a reply subject")
	}
	if _, err := f.nc.Request(m.Reply, nil, 5*time.Second); err != nil {
		t.Fatalf("asking the worker on its heartbeats' inbox: %v", err)
	}
	must(t, r.stop())
}

// A coordinator starting its term calls the roll: a dormant worker, whose next heartbeat is an
// hour away, answers with one at once.
func TestDormantWorkerAnswersRollCall(t *testing.T) {
	t.Parallel()
	f := setup(t)
	hbs := f.heartbeats()
	r := f.start(dormancy(worker.Config{Concurrency: 1, HeartbeatInterval: 50 * time.Millisecond, IdleHeartbeatInterval: time.Hour}), echo)
	waitHeartbeat(t, hbs, "the first", func(wire.Heartbeat) bool { return true })
	testwait.For(t, waitTimeout, "the worker dormant", func() bool { return r.w.Stats().Dormant })
	must(t, f.nc.Publish(f.names.RollCallSubject(), nil))
	hb := waitHeartbeat(t, hbs, "the roll call's answer", func(wire.Heartbeat) bool { return true })
	if hb.IntervalMS != time.Hour.Milliseconds() || hb.Sleeping != 1 {
		t.Errorf("heartbeat %+v, want a dormant worker's: the next an hour away, its slot sleeping", hb)
	}
	must(t, r.stop())
}
