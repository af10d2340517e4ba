package coordinator

import (
	"strings"
	"testing"
	"time"

	"github.com/weavejobs/weave/coordinator/internal/engine"
	"github.com/weavejobs/weave/internal/wire"
)

// alarmRun feeds the alarms one input per step of 100ms and keeps their events.
type alarmRun struct {
	t      *testing.T
	a      *alarms
	now    time.Time
	events []AlarmEvent
}

func newAlarmRun(t *testing.T, cfg AlarmConfig) *alarmRun {
	cfg, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	return &alarmRun{t: t, a: newAlarms(cfg), now: time.Unix(1e9, 0)}
}

func (r *alarmRun) step(in engine.AlarmInput) {
	r.now = r.now.Add(100 * time.Millisecond)
	in.Now = r.now
	r.events = append(r.events, r.a.observe(in)...)
}

// last returns the latest event state of an alarm ("" if none).
func (r *alarmRun) last(name string) string {
	for i := len(r.events) - 1; i >= 0; i-- {
		if r.events[i].Name == name {
			return r.events[i].State
		}
	}
	return ""
}

func TestAlarmsFailedGrowth(t *testing.T) {
	r := newAlarmRun(t, AlarmConfig{Window: time.Second, FailedGrowth: 10})
	for i := range 5 {
		r.step(engine.AlarmInput{Failed: uint64(i * 2)}) // 8 within the window: not yet
	}
	if r.last(AlarmFailedGrowth) != "" {
		t.Fatalf("raised at 8 failures: %+v", r.events)
	}
	r.step(engine.AlarmInput{Failed: 12})
	if r.last(AlarmFailedGrowth) != "raised" || len(r.a.active()) != 1 || r.a.active()[0].Values["failed"] != 12 {
		t.Fatalf("not raised at 12 failures: %+v", r.events)
	}
	for range 12 { // no new failure for longer than the window
		r.step(engine.AlarmInput{Failed: 12})
	}
	if r.last(AlarmFailedGrowth) != "cleared" || len(r.a.active()) != 0 {
		t.Fatalf("not cleared: %+v", r.events)
	}
}

func TestAlarmsPendingGrowthSuggestsSlots(t *testing.T) {
	r := newAlarmRun(t, AlarmConfig{Window: time.Second, PendingGrowth: 100})
	// 4 slots; 200 jobs/s arrive, 80/s leave: pending grows 12 per step, 120 per window.
	var in, out, pending uint64
	for range 20 {
		in, out = in+20, out+8
		pending += 12
		r.step(engine.AlarmInput{Pending: pending, EnteredPending: in, LeftPending: out, Slots: 4, Busy: 4})
	}
	if r.last(AlarmPendingGrowth) != "raised" {
		t.Fatalf("not raised: %+v", r.events)
	}
	v := r.a.raised[AlarmPendingGrowth].Values
	if v["arrival_rate"] != 200 || v["departure_rate"] != 80 || v["suggested_slots"] != 10 {
		t.Fatalf("values %v, want arrival 200/s, departure 80/s, 10 slots", v)
	}
	for range 12 { // balanced
		in, out = in+10, out+10
		r.step(engine.AlarmInput{Pending: pending, EnteredPending: in, LeftPending: out, Slots: 10, Busy: 10})
	}
	if r.last(AlarmPendingGrowth) != "cleared" {
		t.Fatalf("not cleared: %+v", r.events)
	}
}

func TestAlarmsBacklogAndScaleDown(t *testing.T) {
	r := newAlarmRun(t, AlarmConfig{BacklogAfter: time.Second, ScaleDownAfter: time.Second, ScaleDownBelow: 0.5})
	for range 10 { // 9 steps above the slots: 0.9s
		r.step(engine.AlarmInput{Pending: 5, Slots: 4, Busy: 4})
	}
	if r.last(AlarmBacklog) != "" {
		t.Fatalf("backlog raised before BacklogAfter: %+v", r.events)
	}
	r.step(engine.AlarmInput{Pending: 5, Slots: 4, Busy: 4})
	if r.last(AlarmBacklog) != "raised" {
		t.Fatalf("backlog not raised: %+v", r.events)
	}
	r.step(engine.AlarmInput{Pending: 4, Slots: 4, Busy: 4})
	if r.last(AlarmBacklog) != "cleared" {
		t.Fatalf("backlog not cleared at pending = slots: %+v", r.events)
	}
	for range 12 { // at most 1 of 4 busy
		r.step(engine.AlarmInput{Slots: 4, Busy: 1})
	}
	if r.last(AlarmScaleDown) != "raised" || r.a.raised[AlarmScaleDown].Values["suggested_slots"] != 1 {
		t.Fatalf("scale_down not raised with 1 suggested slot: %+v", r.events)
	}
	r.step(engine.AlarmInput{Slots: 4, Busy: 2})
	if r.last(AlarmScaleDown) != "cleared" {
		t.Fatalf("scale_down not cleared at half busy: %+v", r.events)
	}
}

func TestAlarmsWorkers(t *testing.T) {
	r := newAlarmRun(t, AlarmConfig{StuckAfter: time.Second, LostFor: time.Second})
	busy := []engine.WorkerSample{{ID: "w1", Busy: 1}, {ID: "w2", Busy: 0}}
	for range 11 {
		r.step(engine.AlarmInput{Workers: busy, Slots: 2, Busy: 1})
	}
	if r.last(AlarmWorkerStuck) != "raised" || r.a.raised[AlarmWorkerStuck].Values["workers"] != 1 {
		t.Fatalf("worker_stuck not raised for w1: %+v", r.events)
	}
	busy[0].LastReport = r.now
	r.step(engine.AlarmInput{Workers: busy, Slots: 2, Busy: 1})
	if r.last(AlarmWorkerStuck) != "cleared" {
		t.Fatalf("worker_stuck not cleared by a report: %+v", r.events)
	}
	r.step(engine.AlarmInput{Workers: busy[:1], Lost: []string{"w2"}})
	if r.last(AlarmWorkerLost) != "raised" {
		t.Fatalf("worker_lost not raised: %+v", r.events)
	}
	r.step(engine.AlarmInput{Workers: busy}) // w2 is back
	if r.last(AlarmWorkerLost) != "cleared" {
		t.Fatalf("worker_lost not cleared when the worker came back: %+v", r.events)
	}
	r.step(engine.AlarmInput{Workers: busy[:1], Lost: []string{"w2"}})
	for range 10 {
		r.step(engine.AlarmInput{Workers: busy[:1]})
	}
	if r.last(AlarmWorkerLost) != "cleared" {
		t.Fatalf("worker_lost not cleared after LostFor: %+v", r.events)
	}
}

func TestAlarmConfigRejectsBadThresholds(t *testing.T) {
	for _, c := range []AlarmConfig{{Window: -1}, {FailedGrowth: -1}, {ScaleDownBelow: 1.5}} {
		if _, err := c.withDefaults(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

// TestStatusAlarmsJSON pins the JSON shape the dashboard reads: "alarms" is always a list.
func TestStatusAlarmsJSON(t *testing.T) {
	cfg, _ := Config{}.withDefaults()
	names, _ := wire.NewNames("")
	e, err := engine.New(cfg.engineConfig(), names, 1)
	if err != nil {
		t.Fatal(err)
	}
	if b := string(e.Status().Marshal()); !strings.Contains(b, `"alarms":[]`) {
		t.Fatalf("status without alarms: %s", b)
	}
	a := newAlarms(AlarmConfig{FailedGrowth: 1, Window: time.Second})
	a.observe(engine.AlarmInput{Now: time.Unix(10, 0)})
	a.observe(engine.AlarmInput{Now: time.Unix(11, 0), Failed: 3})
	st := e.Status()
	st.Alarms = a.active()
	b := string(st.Marshal())
	for _, want := range []string{`"alarms":[{"name":"failed_growth","raised_at":"`, `"message":"3 jobs failed in the last 1s"`, `"values":{"failed":3,`} {
		if !strings.Contains(b, want) {
			t.Errorf("status lacks %s: %s", want, b)
		}
	}
}

func TestAlarmsPendingGrowthWithNoWorker(t *testing.T) {
	r := newAlarmRun(t, AlarmConfig{Window: time.Second, PendingGrowth: 100})
	var in uint64
	for range 12 { // 200 jobs/s arrive, no slot is live and nothing leaves
		in += 20
		r.step(engine.AlarmInput{Pending: in, EnteredPending: in})
	}
	if r.last(AlarmPendingGrowth) != "raised" {
		t.Fatalf("not raised: %+v", r.events)
	}
	if msg := r.a.raised[AlarmPendingGrowth].Message; !strings.HasSuffix(msg, "; no worker is live to take them") {
		t.Fatalf("message %q, want it to say that no worker is live", msg)
	}
}

// TestAlarmsPendingGrowthIgnoresBursts: a group of many jobs published at once grows pending in
// an instant and the fleet drains it: no pending_growth, though pending grew by more than the
// threshold within the window with more jobs entering than leaving.
func TestAlarmsPendingGrowthIgnoresBursts(t *testing.T) {
	r := newAlarmRun(t, AlarmConfig{Window: time.Second, PendingGrowth: 1000})
	for range 12 { // a quiet fleet: the window is full
		r.step(engine.AlarmInput{Slots: 24})
	}
	var in, out, pending uint64 = 1012, 0, 1012 // the burst
	for pending > 0 {
		r.step(engine.AlarmInput{Pending: pending, EnteredPending: in, LeftPending: out, Slots: 24, Busy: 24})
		drained := min(pending, 48) // the fleet drains 480 jobs/s
		pending, out = pending-drained, out+drained
	}
	if r.last(AlarmPendingGrowth) != "" {
		t.Fatalf("raised on a burst the fleet drains: %+v", r.events)
	}
}

// TestAlarmsPendingGrowthHeldByLimits: jobs that limits hold back grow pending for the whole
// window, but more slots would not start them: neither pending_growth nor backlog is raised;
// the same growth of jobs waiting for a slot raises both.
func TestAlarmsPendingGrowthHeldByLimits(t *testing.T) {
	for _, limited := range []bool{true, false} {
		r := newAlarmRun(t, AlarmConfig{Window: time.Second, PendingGrowth: 100, BacklogAfter: time.Second})
		var in, out, pending, held uint64
		for range 30 { // 4 slots busy; 200 jobs/s arrive, 40/s leave: pending grows 16 per step
			in, out, pending = in+20, out+4, pending+16
			if limited {
				held = pending
			}
			r.step(engine.AlarmInput{Pending: pending, Held: held, EnteredPending: in, LeftPending: out, Slots: 4, Busy: 4})
		}
		raised := r.last(AlarmPendingGrowth) == "raised" && r.last(AlarmBacklog) == "raised"
		if raised == limited {
			t.Fatalf("limited %v: pending_growth %q, backlog %q: %+v", limited, r.last(AlarmPendingGrowth), r.last(AlarmBacklog), r.events)
		}
	}
}

// TestAlarmsDependencyMissing: dependency_missing is raised once a group has waited MissingAfter
// for a group never published, names it, and clears when it no longer waits.
func TestAlarmsDependencyMissing(t *testing.T) {
	t.Parallel()
	r := newAlarmRun(t, AlarmConfig{MissingAfter: time.Minute})
	fresh := engine.MissingDep{Group: "index", WaitsFor: "crawl", Since: r.now}
	r.step(engine.AlarmInput{Missing: []engine.MissingDep{fresh}})
	if got := r.last(AlarmDependencyMissing); got != "" {
		t.Fatalf("raised at once: %q", got)
	}
	old := engine.MissingDep{Group: "index", WaitsFor: "crawl", Since: r.now.Add(-2 * time.Minute)}
	r.step(engine.AlarmInput{Missing: []engine.MissingDep{old}})
	act := r.a.active()
	if r.last(AlarmDependencyMissing) != "raised" || len(act) != 1 || !strings.Contains(act[0].Message, "index waits for crawl") {
		t.Fatalf("after the threshold: %q, active %+v", r.last(AlarmDependencyMissing), act)
	}
	r.step(engine.AlarmInput{})
	if r.last(AlarmDependencyMissing) != "cleared" {
		t.Fatalf("once it no longer waits: %q", r.last(AlarmDependencyMissing))
	}
}
