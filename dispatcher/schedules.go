package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/internal/directget"
	"github.com/weavejobs/weave/internal/schedule"
)

// Schedule is a recurring group: at each tick of Cron or Every the active coordinator publishes a
// group of Jobs with the ID "<Group>@<tick in UTC, 20060102T150405Z>" (and Weight). Each tick fires
// exactly once, also when the coordinator is killed at the tick (the next one fires it again and
// JetStream's dedup stores it once, if it takes over within the dedup window, 2 minutes by
// default). Ticks missed while no coordinator ran: only the latest fires, once, when one runs
// again. Cron expressions are evaluated in UTC.
type Schedule struct {
	// Name identifies the schedule: 1-64 of [A-Za-z0-9_-]. Adding a schedule with a name in use
	// replaces it.
	Name string
	// Cron is a cron expression, seconds optional ("*/10 * * * * *": every 10 seconds; "0 3 * *
	// *": 03:00 daily) or a descriptor (@hourly, @daily, @weekly, @monthly); Every a fixed
	// interval of at least 1s, its ticks every Every from when the schedule was added. Give one.
	Cron  string
	Every time.Duration
	// Group is the prefix of the groups' IDs; default Name.
	Group string
	// Jobs are each tick's jobs (1-1000); Delay and RunAt are not allowed.
	Jobs []Job
	// Weight is the groups' weight (see Weight); 0 means 1.
	Weight int
}

// ScheduleInfo is a stored schedule, with its last tick fired and its next one.
type ScheduleInfo struct {
	Schedule
	Added     time.Time `json:"added"`
	LastFired time.Time `json:"last_fired,omitzero"` // zero if none fired yet
	Next      time.Time `json:"next,omitzero"`       // zero while paused
	Paused    bool      `json:"paused,omitempty"`
}

// When says when s ticks, for people: its cron expression, or "every 30s".
func (s Schedule) When() string { return schedule.Def{Cron: s.Cron, Every: s.Every}.When() }

// ErrScheduleNotFound is returned by RemoveSchedule for a name with no schedule stored.
var ErrScheduleNotFound = errors.New("weave: no such schedule")

// AddSchedule stores a schedule (replacing one of the same name, whose pause, if it is paused,
// stays: ResumeSchedule ends it); the active coordinator fires it from its next tick on. An
// invalid schedule returns an error wrapping ErrInvalidOption.
func (d *Dispatcher) AddSchedule(ctx context.Context, s Schedule) error {
	def := schedule.Def{Name: s.Name, Cron: s.Cron, Every: s.Every, Start: time.Now().UTC().Truncate(time.Second), Group: s.Group, Weight: s.Weight}
	if def.Group == "" {
		def.Group = s.Name
	}
	for i, j := range s.Jobs {
		if j.Delay != 0 || !j.RunAt.IsZero() {
			return fmt.Errorf("%w: schedule %q: job %d: Delay and RunAt are not allowed in a schedule", ErrInvalidOption, s.Name, i)
		}
		if len(j.Payload) > d.cfg.MaxPayload {
			return fmt.Errorf("%w: schedule %q: job %d: payload is %d bytes, at most %d", ErrInvalidOption, s.Name, i, len(j.Payload), d.cfg.MaxPayload)
		}
		def.Jobs = append(def.Jobs, schedule.Job{Key: j.Key, Payload: j.Payload, Require: j.Require, Prefer: j.Prefer, MaxAttempts: j.MaxAttempts, Timeout: j.Timeout})
	}
	if err := def.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	if err := d.ensure(ctx); err != nil {
		return err
	}
	cur, seq, err := d.storedSchedule(ctx, def.Name)
	switch {
	case errors.Is(err, ErrScheduleNotFound):
	case err != nil:
		return err
	default:
		def.Paused = cur.Paused
	}
	return d.replaceSchedule(ctx, def, seq, "added")
}

// PauseSchedule stops a schedule's ticks until ResumeSchedule: the active coordinator fires
// none of them meanwhile (the groups fired before run on). It is stored like the schedule, so it
// holds across restarts and failovers. A name with no schedule returns an error wrapping
// ErrScheduleNotFound; pausing one paused already changes nothing.
func (d *Dispatcher) PauseSchedule(ctx context.Context, name string) error {
	return d.setSchedulePaused(ctx, name, true)
}

// ResumeSchedule ends a PauseSchedule: the schedule fires from its next tick after now; the
// ticks of the pause are not made up. One not paused returns an error wrapping ErrNotPaused.
func (d *Dispatcher) ResumeSchedule(ctx context.Context, name string) error {
	return d.setSchedulePaused(ctx, name, false)
}

func (d *Dispatcher) setSchedulePaused(ctx context.Context, name string, paused bool) error {
	if err := (schedule.Def{Name: name, Removed: true}).Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	if err := d.ensure(ctx); err != nil {
		return err
	}
	def, seq, err := d.storedSchedule(ctx, name)
	if err != nil {
		return err
	}
	verb, done, err := pauseChange(def.Paused, paused, fmt.Sprintf("schedule %q", name))
	if done || err != nil {
		return err
	}
	if def.Paused = paused; !paused {
		def.Resumed = time.Now().UTC()
	}
	return d.replaceSchedule(ctx, def, seq, verb)
}

// replaceSchedule stores def if the schedule's definition is still the one at seq (0: none).
func (d *Dispatcher) replaceSchedule(ctx context.Context, def schedule.Def, seq uint64, verb string) error {
	if err := d.storeSchedule(ctx, def, jetstream.WithExpectLastSequencePerSubject(seq)); isWrongLastSequence(err) {
		return fmt.Errorf("weave: schedule %q changed while it was being %s; nothing done, try again", def.Name, verb)
	} else if err != nil {
		return err
	}
	return nil
}

// RemoveSchedule removes a schedule: no tick of it fires any more. A name with no schedule
// stored (or one removed already) returns an error wrapping ErrScheduleNotFound, so a misspelt
// name is not taken for a removal.
func (d *Dispatcher) RemoveSchedule(ctx context.Context, name string) error {
	def := schedule.Def{Name: name, Removed: true}
	if err := def.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	if err := d.ensure(ctx); err != nil {
		return err
	}
	_, seq, err := d.storedSchedule(ctx, name)
	if err != nil {
		return err
	}
	// Only if the definition read is still the latest: a schedule added again meanwhile stays.
	return d.replaceSchedule(ctx, def, seq, "removed")
}

// storedSchedule returns the stored definition of schedule name and its message's sequence, or
// an error wrapping ErrScheduleNotFound when there is none (or it was removed; the sequence is
// then that of the message read, 0 if none).
func (d *Dispatcher) storedSchedule(ctx context.Context, name string) (schedule.Def, uint64, error) {
	rctx, cancel := d.requestContext(ctx)
	defer cancel()
	m, err := directget.Last(rctx, d.nc, d.names.SchedulesStream(), d.names.ScheduleSubject(name))
	if errors.Is(err, directget.ErrNotFound) {
		return schedule.Def{}, 0, fmt.Errorf("%w: %q", ErrScheduleNotFound, name)
	} else if err != nil {
		return schedule.Def{}, 0, fmt.Errorf("weave: read schedule %q: %w", name, err)
	}
	var def schedule.Def
	if err := schedule.Decode(m.Data, &def); err != nil || def.Removed {
		return schedule.Def{}, m.Seq, fmt.Errorf("%w: %q", ErrScheduleNotFound, name)
	}
	return def, m.Seq, nil
}

func (d *Dispatcher) storeSchedule(ctx context.Context, def schedule.Def, opts ...jetstream.PublishOpt) error {
	body, err := json.Marshal(def)
	if err != nil {
		return err
	}
	if len(body) > schedule.MaxBytes {
		return fmt.Errorf("%w: schedule %q takes %d bytes, at most %d", ErrInvalidOption, def.Name, len(body), schedule.MaxBytes)
	}
	if err := d.ensure(ctx); err != nil {
		return err
	}
	rctx, cancel := d.requestContext(ctx)
	defer cancel()
	msg := &nats.Msg{Subject: d.names.ScheduleSubject(def.Name), Data: body}
	opts = append(opts, jetstream.WithRetryAttempts(noLeaderRetries), jetstream.WithRetryWait(50*time.Millisecond))
	if _, err := d.js.PublishMsg(rctx, msg, opts...); err != nil {
		return fmt.Errorf("weave: store schedule %q: %w", def.Name, err)
	}
	return nil
}

// Schedules lists the stored schedules by name, each with its last tick fired and its next tick.
// It reads the NS_SCHEDULES stream with direct gets (no coordinator needed).
func (d *Dispatcher) Schedules(ctx context.Context) ([]ScheduleInfo, error) {
	if err := d.ensure(ctx); err != nil {
		return nil, err
	}
	get := directget.New(d.nc, d.names.SchedulesStream())
	defer get.Close()
	defs := map[string]schedule.Def{}
	fired := map[string]time.Time{}
	rctx, cancel := d.requestContext(ctx)
	defer cancel()
	err := get.Scan(rctx, 1, 256, func(m *directget.Msg) error {
		isDef, name, ok := d.names.ParseScheduleSubject(m.Subject)
		switch {
		case !ok:
		case isDef:
			var def schedule.Def
			if schedule.Decode(m.Data, &def) == nil && def.Validate() == nil && !def.Removed {
				defs[name] = def
			} else {
				delete(defs, name)
			}
		default:
			var f schedule.Fired
			if schedule.Decode(m.Data, &f) == nil {
				fired[name] = f.Tick
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("weave: read schedules: %w", err)
	}
	now := time.Now()
	var out []ScheduleInfo
	for name, def := range defs {
		info := ScheduleInfo{Schedule: Schedule{Name: name, Cron: def.Cron, Every: def.Every, Group: def.Group, Weight: def.Weight}, Added: def.Start}
		for _, j := range def.Jobs {
			info.Jobs = append(info.Jobs, Job{Key: j.Key, Payload: j.Payload, Require: j.Require, Prefer: j.Prefer, MaxAttempts: j.MaxAttempts, Timeout: j.Timeout})
		}
		info.LastFired = fired[name]
		from := now
		if info.LastFired.After(from) {
			from = info.LastFired
		}
		if def.Resumed.After(from) {
			from = def.Resumed
		}
		if info.Paused = def.Paused; !def.Paused {
			info.Next = def.Next(from)
		}
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b ScheduleInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
