// Package schedule defines Weave's recurring groups: a schedule publishes a group of jobs at
// each tick of a cron expression or a fixed interval. Schedules are stored in the namespace's
// NS_SCHEDULES stream (one message per schedule, and one per schedule for the last tick fired);
// the active coordinator fires them (coordinator/schedules.go). This package holds the definition,
// its validation and the tick arithmetic, shared by the coordinator, the dispatcher and the CLI.
package schedule

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/weavejobs/weave/internal/wire"
)

// ErrInvalid wraps every validation error of a schedule.
var ErrInvalid = errors.New("invalid schedule")

// Def is a schedule's definition, as stored.
type Def struct {
	Name string `json:"name"`
	// Cron is a cron expression with seconds optional (5 or 6 fields: [sec] min hour dom month
	// dow) or a descriptor (@hourly, @daily...), evaluated in UTC. Every is a fixed interval,
	// its ticks Start + k × Every. Exactly one of them is set.
	Cron  string        `json:"cron,omitempty"`
	Every time.Duration `json:"every,omitempty"`
	// Start is when the schedule was added: no tick before it fires.
	Start time.Time `json:"start"`
	// Group is the prefix of the groups' IDs: each tick publishes "<Group>@<tick, UTC>".
	Group string `json:"group"`
	Jobs  []Job  `json:"jobs"`
	// Weight is the groups' weight (0: 1).
	Weight int `json:"weight,omitempty"`
	// Removed marks a schedule removed: nothing fires for it any more.
	Removed bool `json:"removed,omitempty"`
	// Paused: no tick fires until it is resumed. Resumed is when it last was: no tick at or
	// before it fires then (the ticks of the pause are not made up).
	Paused  bool      `json:"paused,omitempty"`
	Resumed time.Time `json:"resumed,omitzero"`
}

// Job is one job each tick's group holds.
type Job struct {
	Key         string        `json:"key,omitempty"`
	Payload     []byte        `json:"payload,omitempty"`
	Require     []string      `json:"require,omitempty"`
	Prefer      []string      `json:"prefer,omitempty"`
	MaxAttempts int           `json:"max_attempts,omitempty"`
	Timeout     time.Duration `json:"timeout,omitempty"`
}

// When says when the schedule ticks, for people: its cron expression, or "every 30s".
func (d Def) When() string {
	if d.Every > 0 {
		return "every " + d.Every.String()
	}
	return d.Cron
}

// Limits of a definition.
const (
	MaxJobs  = 1000
	MinEvery = time.Second
	MaxBytes = 4 << 20 // of a stored definition
)

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Validate checks a definition (a removal needs only its name).
func (d Def) Validate() error {
	if !nameRE.MatchString(d.Name) {
		return fmt.Errorf("%w: name %q: want 1-64 of [A-Za-z0-9_-]", ErrInvalid, d.Name)
	}
	if d.Removed {
		return nil
	}
	switch {
	case (d.Cron == "") == (d.Every == 0):
		return fmt.Errorf("%w %q: give a cron expression or an interval, not both", ErrInvalid, d.Name)
	case d.Every != 0 && d.Every < MinEvery:
		return fmt.Errorf("%w %q: interval %v below %v", ErrInvalid, d.Name, d.Every, MinEvery)
	case d.Start.IsZero():
		return fmt.Errorf("%w %q: no start time", ErrInvalid, d.Name)
	case len(d.Jobs) == 0 || len(d.Jobs) > MaxJobs:
		return fmt.Errorf("%w %q: %d jobs, want 1..%d", ErrInvalid, d.Name, len(d.Jobs), MaxJobs)
	case d.Weight < 0 || d.Weight > wire.MaxWeight:
		return fmt.Errorf("%w %q: weight %d outside 1..%d", ErrInvalid, d.Name, d.Weight, wire.MaxWeight)
	}
	if d.Cron != "" {
		if _, err := parser.Parse(d.Cron); err != nil {
			return fmt.Errorf("%w %q: cron %q: %v", ErrInvalid, d.Name, d.Cron, err)
		}
		if d.Cron[0] == '@' && len(d.Cron) > 6 && d.Cron[:6] == "@every" {
			return fmt.Errorf("%w %q: use an interval (Every) instead of %q, so ticks are the same for every coordinator", ErrInvalid, d.Name, d.Cron)
		}
	}
	// The group ID of a tick, and each job, must be valid.
	if err := wire.ValidateGroupID(GroupID(d, time.Date(2006, 1, 2, 15, 4, 5, 0, time.UTC))); err != nil {
		return fmt.Errorf("%w %q: group prefix: %v", ErrInvalid, d.Name, err)
	}
	for i, j := range d.Jobs {
		m := wire.JobMeta{Group: d.Group, Key: j.Key, Require: j.Require, Prefer: j.Prefer, MaxAttempts: j.MaxAttempts, Timeout: j.Timeout}
		if err := m.Validate(); err != nil {
			return fmt.Errorf("%w %q: job %d: %v", ErrInvalid, d.Name, i, err)
		}
	}
	return nil
}

// Next is the first tick of d strictly after t (whether or not it is paused).
func (d Def) Next(t time.Time) time.Time {
	if d.Every > 0 {
		if t.Before(d.Start) {
			return d.Start.Add(d.Every)
		}
		k := t.Sub(d.Start)/d.Every + 1
		return d.Start.Add(k * d.Every)
	}
	s, err := parser.Parse(d.Cron)
	if err != nil {
		return time.Time{} // Validate refuses it
	}
	return s.Next(t.UTC())
}

// Latest is the latest tick of d after `after` and at most now, or zero if there is none, and how
// many ticks in that span it passed over (ticks missed, if none fired).
func (d Def) Latest(after, now time.Time) (tick time.Time, passed int) {
	if d.Paused {
		return time.Time{}, 0
	}
	after = maxTime(after, d.Start, d.Resumed)
	if d.Every > 0 {
		if !now.After(after) {
			return time.Time{}, 0
		}
		last := d.Start.Add(now.Sub(d.Start) / d.Every * d.Every)
		if !last.After(after) {
			return time.Time{}, 0
		}
		return last, int(last.Sub(d.Next(after)) / d.Every) // the ticks from the first after `after` to last
	}
	for t := d.Next(after); !t.IsZero() && !t.After(now); t = d.Next(t) {
		if !tick.IsZero() {
			passed++
		}
		tick = t
		if passed > 1_000_000 {
			break // a per-second cron down for weeks: the count is a lower bound
		}
	}
	return tick, passed
}

func maxTime(ts ...time.Time) time.Time {
	var m time.Time
	for _, t := range ts {
		if t.After(m) {
			m = t
		}
	}
	return m
}

// GroupID is the ID of the group d publishes at tick.
func GroupID(d Def, tick time.Time) string {
	return d.Group + "@" + tick.UTC().Format("20060102T150405Z")
}

// MsgID is the Nats-Msg-Id prefix of what firing d at tick publishes: the same for every
// coordinator, so a tick fired twice (a coordinator killed before it recorded the tick) is stored
// once, within the namespace's dedup window.
func MsgID(d Def, tick time.Time) string {
	return fmt.Sprintf("sched:%s:%d", d.Name, tick.Unix())
}

// Fired is the record of the last tick fired for a schedule.
type Fired struct {
	Name string    `json:"name"`
	Tick time.Time `json:"tick"`
}

// Decode decodes a stored definition or fired record (by its subject kind) strictly.
func Decode(body []byte, v any) error {
	if len(body) > MaxBytes {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrInvalid, len(body), MaxBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: trailing data", ErrInvalid)
	}
	return nil
}
