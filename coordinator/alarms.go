package coordinator

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/weavejobs/weave/coordinator/internal/engine"
)

// The alarms the coordinator raises (Alarm.Name, the last token of their subject, the alarm
// label of weave_alarm_active). See docs/operating.md, "Alarms".
const (
	// AlarmFailedGrowth: at least AlarmConfig.FailedGrowth jobs ended failed within the window,
	// a progressing outage (seed 001: explosive growth of FAILED).
	AlarmFailedGrowth = "failed_growth"
	// AlarmPendingGrowth: the jobs waiting for a slot (PENDING, less those limits hold back)
	// grew by at least AlarmConfig.PendingGrowth within the window, in each half of it, while
	// more jobs entered PENDING than left it: production outruns consumption for longer than a
	// burst the fleet drains, add slots.
	AlarmPendingGrowth = "pending_growth"
	// AlarmBacklog: more jobs waiting for a slot (pending, less those limits hold back) than
	// live slots for longer than AlarmConfig.BacklogAfter (seed 002: the count must routinely
	// drop below the number of workers).
	AlarmBacklog = "backlog"
	// AlarmScaleDown: no backlog and fewer than AlarmConfig.ScaleDownBelow of the live slots
	// busy for longer than AlarmConfig.ScaleDownAfter: slots could be removed.
	AlarmScaleDown = "scale_down"
	// AlarmWorkerStuck: a worker has had busy slots and reported nothing for longer than
	// AlarmConfig.StuckAfter.
	AlarmWorkerStuck = "worker_stuck"
	// AlarmWorkerLost: a worker went silent (its heartbeats lapsed without a clean stop); raised
	// for AlarmConfig.LostFor or until the worker is back.
	AlarmWorkerLost = "worker_lost"
	// AlarmDependencyMissing: a group has waited longer than AlarmConfig.MissingAfter for a group
	// never published (dispatcher.After of an ID no producer opened): a typo, or a producer that
	// died before publishing it. Cancel the waiting group, or publish the one it waits for.
	AlarmDependencyMissing = "dependency_missing"
)

// AlarmNames lists every alarm, in the order status shows them.
var AlarmNames = []string{AlarmFailedGrowth, AlarmPendingGrowth, AlarmBacklog, AlarmScaleDown, AlarmWorkerStuck, AlarmWorkerLost, AlarmDependencyMissing}

// Defaults of AlarmConfig.
const (
	DefaultAlarmWindow    = time.Minute
	DefaultFailedGrowth   = 100
	DefaultPendingGrowth  = 1000
	DefaultBacklogAfter   = 5 * time.Minute
	DefaultScaleDownAfter = 10 * time.Minute
	DefaultScaleDownBelow = 0.5
	DefaultStuckAfter     = 10 * time.Minute
	DefaultLostFor        = 10 * time.Minute
	DefaultMissingAfter   = time.Hour
)

// AlarmConfig holds the alarms' thresholds. The zero value gives the defaults.
type AlarmConfig struct {
	// Window is the sliding window over which growth and rates are measured. Default 1m.
	Window time.Duration
	// FailedGrowth is how many jobs ending failed within Window raise failed_growth. Default 100.
	FailedGrowth int
	// PendingGrowth is how much the jobs waiting for a slot must grow within Window, and in
	// each half of it, with more jobs entering PENDING than leaving it, to raise
	// pending_growth. Default 1000.
	PendingGrowth int
	// BacklogAfter is how long more jobs may be pending than there are live slots before
	// backlog is raised. Default 5m.
	BacklogAfter time.Duration
	// ScaleDownAfter is how long the fleet may stay under ScaleDownBelow busy, with no
	// backlog, before scale_down is raised. Default 10m.
	ScaleDownAfter time.Duration
	// ScaleDownBelow is the busy share of the live slots under which the fleet counts as
	// oversized (0 < x ≤ 1). Default 0.5.
	ScaleDownBelow float64
	// StuckAfter is how long a worker with busy slots may report nothing before worker_stuck
	// is raised. Default 10m; keep it above your longest job.
	StuckAfter time.Duration
	// LostFor is how long worker_lost stays raised after a worker's heartbeats lapsed (it
	// clears earlier if the worker comes back). Default 10m.
	LostFor time.Duration
	// MissingAfter is how long a group may wait for a group never published before
	// dependency_missing is raised. Default 1h.
	MissingAfter time.Duration
}

func (a AlarmConfig) withDefaults() (AlarmConfig, error) {
	for name, d := range map[string]time.Duration{
		"Window": a.Window, "BacklogAfter": a.BacklogAfter, "ScaleDownAfter": a.ScaleDownAfter,
		"StuckAfter": a.StuckAfter, "LostFor": a.LostFor, "MissingAfter": a.MissingAfter,
	} {
		if d < 0 {
			return a, fmt.Errorf("%w: Alarms.%s is %v, must not be negative", ErrInvalidConfig, name, d)
		}
	}
	for name, n := range map[string]int{"FailedGrowth": a.FailedGrowth, "PendingGrowth": a.PendingGrowth} {
		if n < 0 {
			return a, fmt.Errorf("%w: Alarms.%s is %d, must not be negative", ErrInvalidConfig, name, n)
		}
	}
	if a.ScaleDownBelow < 0 || a.ScaleDownBelow > 1 || math.IsNaN(a.ScaleDownBelow) {
		return a, fmt.Errorf("%w: Alarms.ScaleDownBelow is %v, must be in (0, 1]", ErrInvalidConfig, a.ScaleDownBelow)
	}
	setDefault(&a.Window, DefaultAlarmWindow)
	setDefault(&a.FailedGrowth, DefaultFailedGrowth)
	setDefault(&a.PendingGrowth, DefaultPendingGrowth)
	setDefault(&a.BacklogAfter, DefaultBacklogAfter)
	setDefault(&a.ScaleDownAfter, DefaultScaleDownAfter)
	setDefault(&a.ScaleDownBelow, DefaultScaleDownBelow)
	setDefault(&a.StuckAfter, DefaultStuckAfter)
	setDefault(&a.LostFor, DefaultLostFor)
	setDefault(&a.MissingAfter, DefaultMissingAfter)
	return a, nil
}

// AlarmEvent is published on Names.AlarmSubject(name) when an alarm is raised, when its values
// change while raised (at most once per window), and when it clears.
type AlarmEvent struct {
	Alarm
	State string    `json:"state"` // "raised" or "cleared"
	At    time.Time `json:"at"`
}

// Marshal encodes the event as JSON.
func (e AlarmEvent) Marshal() []byte {
	b, _ := json.Marshal(e) // plain fields only
	return b
}

// alarmSample is one tick's counts, kept for the window.
type alarmSample struct {
	at                       time.Time
	failed, pending, in, out uint64
}

// alarms computes the alarms from the state counts over sliding windows. It does no I/O and
// reads no clock: the loop feeds it (observe), and it is owned by the loop.
type alarms struct {
	cfg     AlarmConfig
	samples []alarmSample // oldest first: the last cfg.Window, and one sample before it as the base
	raised  map[string]*Alarm

	backlogSince   time.Time            // pending > slots since; zero when not
	idleSince      time.Time            // under ScaleDownBelow busy since; zero when not
	idlePeak       int                  // most busy slots since idleSince
	quietSince     map[string]time.Time // per worker: busy without a report since
	lostAt         map[string]time.Time // lapsed workers, within LostFor
	lastValuesSent map[string]time.Time // when a raised alarm's changed values were last published
}

func newAlarms(cfg AlarmConfig) *alarms {
	return &alarms{cfg: cfg, raised: map[string]*Alarm{}, quietSince: map[string]time.Time{}, lostAt: map[string]time.Time{}, lastValuesSent: map[string]time.Time{}}
}

// active lists the raised alarms in AlarmNames order; never nil, so status always has
// "alarms": [] in JSON.
func (a *alarms) active() []Alarm {
	out := []Alarm{}
	if a == nil {
		return out
	}
	for _, name := range AlarmNames {
		if al := a.raised[name]; al != nil {
			c := *al
			c.Values = maps.Clone(al.Values)
			out = append(out, c)
		}
	}
	return out
}

// observe takes one tick's input and returns the events to publish.
func (a *alarms) observe(in engine.AlarmInput) []AlarmEvent {
	now := in.Now
	waiting := in.Pending - min(in.Held, in.Pending) // for a slot
	a.samples = append(a.samples, alarmSample{at: now, failed: in.Failed, pending: waiting, in: in.EnteredPending, out: in.LeftPending})
	// Keep one sample at or before now-Window as the window's base.
	for len(a.samples) > 2 && !a.samples[1].at.After(now.Add(-a.cfg.Window)) {
		a.samples = a.samples[1:]
	}
	base, cur := a.samples[0], a.samples[len(a.samples)-1]
	span := cur.at.Sub(base.at).Seconds()

	var events []AlarmEvent
	set := func(name string, on bool, msg string, values map[string]float64) {
		events = append(events, a.set(now, name, on, msg, values)...)
	}

	// Outage: FAILED growth.
	failed := cur.failed - base.failed
	set(AlarmFailedGrowth, failed >= uint64(a.cfg.FailedGrowth),
		fmt.Sprintf("%d jobs failed in the last %v", failed, a.cfg.Window),
		map[string]float64{"failed": float64(failed), "window_seconds": a.cfg.Window.Seconds(), "threshold": float64(a.cfg.FailedGrowth)})

	// Scale up: sustained growth of the jobs waiting for a slot. A burst (a group of many jobs
	// published at once) grows them in an instant and the fleet drains it: the growth must
	// span the whole window, seen from its start, and each half of it.
	growth := int64(cur.pending) - int64(base.pending)
	mid := base
	for _, s := range a.samples {
		if s.at.After(now.Add(-a.cfg.Window / 2)) {
			break
		}
		mid = s
	}
	sustained := now.Sub(base.at) >= a.cfg.Window && mid.pending > base.pending && cur.pending > mid.pending
	inN, outN := cur.in-base.in, cur.out-base.out
	var arrival, departure float64
	if span > 0 {
		arrival, departure = float64(inN)/span, float64(outN)/span
	}
	suggested := float64(in.Slots + 1) // nothing leaves: at least one more slot
	if departure > 0 {
		suggested = math.Ceil(float64(max(in.Slots, 1)) * arrival / departure)
	}
	advice := fmt.Sprintf("about %.0f %s would keep up (%d live)", suggested, plural(suggested, "slot", "slots"), in.Slots)
	if in.Slots == 0 {
		advice = "no worker is live to take them"
	}
	if in.Held > 0 {
		advice += fmt.Sprintf("; %d more are held back by limits, which slots would not start", in.Held)
	}
	set(AlarmPendingGrowth, sustained && growth >= int64(a.cfg.PendingGrowth) && inN > outN,
		fmt.Sprintf("jobs waiting for a slot grew by %d in the last %v: %.1f jobs/s arrive, %.1f/s leave; %s", growth, a.cfg.Window, arrival, departure, advice),
		map[string]float64{"pending": float64(cur.pending), "held": float64(in.Held), "growth": float64(growth), "arrival_rate": arrival, "departure_rate": departure, "slots": float64(in.Slots), "suggested_slots": suggested})

	// Backlog above the live slots for too long.
	if waiting > uint64(in.Slots) {
		if a.backlogSince.IsZero() {
			a.backlogSince = now
		}
	} else {
		a.backlogSince = time.Time{}
	}
	backlogFor := durationSince(now, a.backlogSince)
	set(AlarmBacklog, !a.backlogSince.IsZero() && backlogFor >= a.cfg.BacklogAfter,
		fmt.Sprintf("%d jobs waiting for a slot, above the %d live slots for %v", waiting, in.Slots, backlogFor.Round(time.Second)),
		map[string]float64{"pending": float64(waiting), "held": float64(in.Held), "slots": float64(in.Slots), "for_seconds": backlogFor.Seconds(), "threshold_seconds": a.cfg.BacklogAfter.Seconds()})

	// Scale down: no backlog and a mostly idle fleet for long.
	if in.Slots > 0 && waiting < uint64(in.Slots) && float64(in.Busy) < a.cfg.ScaleDownBelow*float64(in.Slots) {
		if a.idleSince.IsZero() {
			a.idleSince, a.idlePeak = now, 0
		}
		a.idlePeak = max(a.idlePeak, in.Busy)
	} else {
		a.idleSince = time.Time{}
	}
	idleFor := durationSince(now, a.idleSince)
	keepSlots := float64(max(a.idlePeak, 1))
	set(AlarmScaleDown, !a.idleSince.IsZero() && idleFor >= a.cfg.ScaleDownAfter,
		fmt.Sprintf("at most %d of %d live slots busy for %v; %.0f would do", a.idlePeak, in.Slots, idleFor.Round(time.Second), keepSlots),
		map[string]float64{"slots": float64(in.Slots), "busy_peak": float64(a.idlePeak), "for_seconds": idleFor.Seconds(), "suggested_slots": keepSlots})

	// Stuck workers: busy and silent.
	live := map[string]bool{}
	var stuck []string
	for _, w := range in.Workers {
		live[w.ID] = true
		if w.Busy == 0 {
			delete(a.quietSince, w.ID)
			continue
		}
		q, ok := a.quietSince[w.ID]
		if !ok {
			q = now // busy since at most now
		}
		if w.LastReport.After(q) {
			q = w.LastReport
		}
		a.quietSince[w.ID] = q
		if now.Sub(q) >= a.cfg.StuckAfter {
			stuck = append(stuck, w.ID)
		}
	}
	for id := range a.quietSince {
		if !live[id] {
			delete(a.quietSince, id)
		}
	}
	slices.Sort(stuck)
	set(AlarmWorkerStuck, len(stuck) > 0,
		fmt.Sprintf("workers busy with no report for %v: %s", a.cfg.StuckAfter, strings.Join(stuck, ", ")),
		map[string]float64{"workers": float64(len(stuck)), "threshold_seconds": a.cfg.StuckAfter.Seconds()})

	// Lost workers: lapsed within LostFor and not back.
	for _, id := range in.Lost {
		a.lostAt[id] = now
	}
	var lost []string
	for id, at := range a.lostAt {
		if live[id] || now.Sub(at) >= a.cfg.LostFor {
			delete(a.lostAt, id)
			continue
		}
		lost = append(lost, id)
	}
	slices.Sort(lost)
	set(AlarmWorkerLost, len(lost) > 0,
		fmt.Sprintf("workers whose heartbeats lapsed in the last %v: %s", a.cfg.LostFor, strings.Join(lost, ", ")),
		map[string]float64{"workers": float64(len(lost))})

	// Groups waiting for a group nobody published.
	var missing []string
	for _, m := range in.Missing {
		if now.Sub(m.Since) >= a.cfg.MissingAfter {
			missing = append(missing, m.Group+" waits for "+m.WaitsFor)
		}
	}
	slices.Sort(missing)
	n := len(missing)
	if n > 10 {
		missing = append(missing[:10], fmt.Sprintf("and %d more", n-10))
	}
	set(AlarmDependencyMissing, n > 0,
		fmt.Sprintf("groups waiting for more than %v for a group never published: %s", a.cfg.MissingAfter, strings.Join(missing, "; ")),
		map[string]float64{"groups": float64(n), "threshold_seconds": a.cfg.MissingAfter.Seconds()})
	return events
}

func plural(n float64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func durationSince(now, since time.Time) time.Duration {
	if since.IsZero() {
		return 0
	}
	return now.Sub(since)
}

// set raises, updates or clears one alarm, returning the event to publish, if any. A raised
// alarm's values are kept current in status; a changed message is published again at most
// once per window, so a growing backlog is not a stream of events.
func (a *alarms) set(now time.Time, name string, on bool, msg string, values map[string]float64) []AlarmEvent {
	al := a.raised[name]
	switch {
	case on && al == nil:
		al = &Alarm{Name: name, RaisedAt: now, Message: msg, Values: values}
		a.raised[name] = al
		a.lastValuesSent[name] = now
		return []AlarmEvent{{Alarm: *al, State: "raised", At: now}}
	case on:
		changed := al.Message != msg
		al.Message, al.Values = msg, values
		if changed && now.Sub(a.lastValuesSent[name]) >= a.cfg.Window {
			a.lastValuesSent[name] = now
			return []AlarmEvent{{Alarm: *al, State: "raised", At: now}}
		}
	case al != nil:
		delete(a.raised, name)
		delete(a.lastValuesSent, name)
		al.Message, al.Values = msg, values
		return []AlarmEvent{{Alarm: *al, State: "cleared", At: now}}
	}
	return nil
}
