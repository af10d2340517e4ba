package integration_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/internal/testwait"
	"github.com/weavejobs/weave/internal/wire"
	"github.com/weavejobs/weave/worker"
)

// These tests induce each alarm's condition on a real server and see the alarm raised (on its
// subject, in status and as weave_alarm_active), then cleared. Windows are short (configurable).

// alarmCoordinator starts a coordinator with the given alarm thresholds and returns it.
func (e *env) alarmCoordinator(a coordinator.AlarmConfig) *coordinator.Coordinator {
	c, err := coordinator.New(e.nc, coordinator.Config{Namespace: e.ns, Logger: testLogger("coordinator"), Alarms: a})
	if err != nil {
		e.t.Fatal(err)
	}
	e.background("coordinator", c.Run)
	return c
}

// alarmEvents collects the alarm events published in the test's namespace.
type alarmEvents struct {
	t     *testing.T
	ch    chan coordinator.AlarmEvent
	stash []coordinator.AlarmEvent // received while awaiting another (owned by the test goroutine)
}

func (e *env) watchAlarms() *alarmEvents {
	w := &alarmEvents{t: e.t, ch: make(chan coordinator.AlarmEvent, 256)}
	names, _ := wire.NewNames(e.ns)
	sub, err := e.nc.Subscribe(names.AllAlarms(), func(m *nats.Msg) {
		var ev coordinator.AlarmEvent
		if err := json.Unmarshal(m.Data, &ev); err != nil {
			e.t.Errorf("alarm event on %s: %v", m.Subject, err)
			return
		}
		if m.Subject != names.AlarmSubject(ev.Name) {
			e.t.Errorf("alarm %s on subject %s", ev.Name, m.Subject)
		}
		w.ch <- ev
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = sub.Unsubscribe() })
	return w
}

// await waits for alarm name to reach state ("raised" or "cleared"), keeping other events for
// later awaits.
func (w *alarmEvents) await(name, state string) coordinator.AlarmEvent {
	w.t.Helper()
	for i, ev := range w.stash {
		if ev.Name == name && ev.State == state {
			w.stash = append(w.stash[:i:i], w.stash[i+1:]...)
			return ev
		}
	}
	deadline := time.After(30 * time.Second)
	for {
		select {
		case ev := <-w.ch:
			if ev.Name == name && ev.State == state {
				return ev
			}
			w.stash = append(w.stash, ev)
		case <-deadline:
			w.t.Fatalf("timed out waiting for alarm %s to be %s", name, state)
		}
	}
}

// metricValue gathers c in a pedantic registry (which checks the collector's consistency) and
// returns the value of the gauge or counter name with the given labels, failing if absent.
func metricValue(t *testing.T, c prometheus.Collector, name string, labels map[string]string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue metrics
				}
			}
			if m.Gauge != nil {
				return m.GetGauge().GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s%v", name, labels)
	return 0
}

// checkRaised checks that a raised alarm shows in status and in weave_alarm_active.
func (e *env) checkRaised(c *coordinator.Coordinator, name string) coordinator.Alarm {
	e.t.Helper()
	st, err := coordinator.QueryStatus(e.ctx, e.nc, e.ns)
	if err != nil {
		e.t.Fatal(err)
	}
	var found *coordinator.Alarm
	for i := range st.Alarms {
		if st.Alarms[i].Name == name {
			found = &st.Alarms[i]
		}
	}
	if found == nil || found.RaisedAt.IsZero() || found.Message == "" {
		e.t.Fatalf("alarm %s raised but status shows %+v", name, st.Alarms)
	}
	if v := metricValue(e.t, c.Collector(), "weave_alarm_active", map[string]string{"alarm": name}); v != 1 {
		e.t.Fatalf("weave_alarm_active{alarm=%q} = %v while raised", name, v)
	}
	return *found
}

func (e *env) checkCleared(c *coordinator.Coordinator, name string) {
	e.t.Helper()
	if v := metricValue(e.t, c.Collector(), "weave_alarm_active", map[string]string{"alarm": name}); v != 0 {
		e.t.Fatalf("weave_alarm_active{alarm=%q} = %v once cleared", name, v)
	}
}

func TestAlarmFailedGrowth(t *testing.T) {
	e := setup(t)
	w := e.watchAlarms()
	c := e.alarmCoordinator(coordinator.AlarmConfig{Window: 3 * time.Second, FailedGrowth: 5})
	e.waitWorkers(0) // the coordinator leads: the failures happen under its eyes
	e.worker(worker.Config{Concurrency: 4}, func(context.Context, *worker.Job) ([]byte, error) {
		return nil, worker.Permanent(errors.New("the disk is gone"))
	})
	e.wait(e.publish("outage", jobs(8, nil)))
	ev := w.await(coordinator.AlarmFailedGrowth, "raised")
	if ev.Values["failed"] < 5 {
		t.Fatalf("raised with values %v", ev.Values)
	}
	e.checkRaised(c, coordinator.AlarmFailedGrowth)
	w.await(coordinator.AlarmFailedGrowth, "cleared") // no failure for a window
	e.checkCleared(c, coordinator.AlarmFailedGrowth)
}

// TestAlarmBacklogAndPendingGrowth: jobs arrive with no worker to take them, one every 100ms
// for longer than the window (pending grows all through it, and stays above the live slots),
// then a worker drains them. (A burst, published at once, does not raise pending_growth:
// coordinator.TestAlarmsPendingGrowthIgnoresBursts.)
func TestAlarmBacklogAndPendingGrowth(t *testing.T) {
	e := setup(t)
	w := e.watchAlarms()
	c := e.alarmCoordinator(coordinator.AlarmConfig{Window: 2 * time.Second, PendingGrowth: 10, BacklogAfter: 500 * time.Millisecond})
	e.waitWorkers(0) // the coordinator leads: the jobs arrive under its eyes (growth, not a takeover)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	h := e.publish("backlog", func(yield func(dispatcher.Job) bool) {
		for range 30 { // a producer outrunning the fleet (which has no slot) for 3s
			<-tick.C
			if !yield(dispatcher.Job{}) {
				return
			}
		}
	})
	ev := w.await(coordinator.AlarmPendingGrowth, "raised")
	if ev.Values["arrival_rate"] <= 0 || ev.Values["departure_rate"] != 0 || ev.Values["suggested_slots"] < 1 {
		t.Fatalf("pending_growth values %v: want arrivals, no departures, a suggested slot", ev.Values)
	}
	w.await(coordinator.AlarmBacklog, "raised")
	// Its values follow the latest tick: the last jobs published may come after it.
	var a coordinator.Alarm
	testwait.For(t, 10*time.Second, "the backlog alarm to count every job", func() bool {
		a = e.checkRaised(c, coordinator.AlarmBacklog)
		return a.Values["pending"] == 30
	})
	if a.Values["slots"] != 0 {
		t.Fatalf("backlog values %v, want 30 pending on 0 slots", a.Values)
	}
	e.checkRaised(c, coordinator.AlarmPendingGrowth)
	// The metrics an autoscaler reads.
	if v := metricValue(t, c.Collector(), "weave_queue_depth", nil); v != 30 {
		t.Fatalf("weave_queue_depth %v, want 30", v)
	}
	if v := metricValue(t, c.Collector(), "weave_oldest_pending_job_age_seconds", nil); v <= 0 {
		t.Fatalf("weave_oldest_pending_job_age_seconds %v with 30 jobs pending", v)
	}

	e.worker(worker.Config{Concurrency: 4}, func(context.Context, *worker.Job) ([]byte, error) { return nil, nil })
	w.await(coordinator.AlarmBacklog, "cleared")
	w.await(coordinator.AlarmPendingGrowth, "cleared")
	e.wait(h)
	e.checkCleared(c, coordinator.AlarmBacklog)
	e.checkCleared(c, coordinator.AlarmPendingGrowth)
}

// TestAlarmScaleDownAndStuckWorker: an idle worker raises scale_down; jobs that block every
// slot clear it and, silent for StuckAfter, raise worker_stuck, which clears once they report.
func TestAlarmScaleDownAndStuckWorker(t *testing.T) {
	e := setup(t)
	w := e.watchAlarms()
	c := e.alarmCoordinator(coordinator.AlarmConfig{ScaleDownAfter: 500 * time.Millisecond, StuckAfter: time.Second})
	unblock := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(unblock) }) })
	e.worker(worker.Config{Concurrency: 2}, func(ctx context.Context, _ *worker.Job) ([]byte, error) {
		select {
		case <-unblock:
		case <-ctx.Done():
		}
		return nil, nil
	})
	ev := w.await(coordinator.AlarmScaleDown, "raised")
	if ev.Values["slots"] != 2 || ev.Values["suggested_slots"] != 1 {
		t.Fatalf("scale_down values %v: want 2 slots, 1 suggested", ev.Values)
	}
	e.checkRaised(c, coordinator.AlarmScaleDown)

	h := e.publish("blocking", jobs(2, nil))
	w.await(coordinator.AlarmScaleDown, "cleared")
	e.checkCleared(c, coordinator.AlarmScaleDown)
	w.await(coordinator.AlarmWorkerStuck, "raised")
	e.checkRaised(c, coordinator.AlarmWorkerStuck)
	once.Do(func() { close(unblock) })
	w.await(coordinator.AlarmWorkerStuck, "cleared")
	e.checkCleared(c, coordinator.AlarmWorkerStuck)
	e.wait(h)
}

// TestAlarmWorkerLost: a worker's heartbeats stop without a last "stopped" one, as when its
// process dies (here a worker made of heartbeats alone, so nothing else of it lingers).
func TestAlarmWorkerLost(t *testing.T) {
	e := setup(t)
	w := e.watchAlarms()
	c := e.alarmCoordinator(coordinator.AlarmConfig{LostFor: 1500 * time.Millisecond})
	names, _ := wire.NewNames(e.ns)
	hb := wire.Heartbeat{Worker: "doomed", Pool: wire.PoolKey(nil), Concurrency: 1, Sleeping: 1, IntervalMS: 100, Run: "r1"}
	// Beat until the coordinator knows the worker (it may not be listening yet), then stop.
	testwait.For(t, 30*time.Second, "the worker to join", func() bool {
		if err := e.nc.Publish(names.HeartbeatSubject(hb.Pool, hb.Worker), hb.Marshal()); err != nil {
			t.Fatal(err)
		}
		st, err := coordinator.QueryStatus(e.ctx, e.nc, e.ns)
		return err == nil && len(st.Workers) == 1
	})
	ev := w.await(coordinator.AlarmWorkerLost, "raised")
	if ev.Values["workers"] != 1 {
		t.Fatalf("worker_lost values %v", ev.Values)
	}
	e.checkRaised(c, coordinator.AlarmWorkerLost)
	w.await(coordinator.AlarmWorkerLost, "cleared") // after LostFor
	e.checkCleared(c, coordinator.AlarmWorkerLost)
}
