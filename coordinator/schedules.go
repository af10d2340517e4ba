package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/coordinator/internal/engine"
	"github.com/weavejobs/weave/internal/schedule"
	"github.com/weavejobs/weave/internal/wire"
)

// Schedules: the active coordinator fires each schedule's ticks (internal/schedule). A goroutine
// of the term follows the NS_SCHEDULES stream (definitions, and the record of each schedule's last
// tick fired) and, at each due tick, publishes the tick's group (open, jobs, seal) and then the
// fired record. It touches no engine state: the group reaches the engine through JOBS like any
// producer's.
//
// Exactly once: everything a tick publishes carries a Nats-Msg-Id derived from the schedule and
// the tick (schedule.MsgID). A coordinator killed after publishing a tick's group but before its
// fired record leaves the tick unrecorded; the next one fires it again, and JetStream's dedup
// stores none of it twice, as long as the takeover comes within the namespace's dedup window
// (2 minutes by default). Missed ticks (no coordinator ran at their time): only the latest one
// fires, once, when a coordinator runs again; the ones before it are skipped (counted in the log).

// killAfterFireEnv names a fault-injection hook for tests: set to a schedule's name, the
// coordinator process SIGKILLs itself after publishing that schedule's first tick's group and
// before recording the tick fired.
const killAfterFireEnv = "WEAVE_TEST_KILL_AFTER_FIRE"

// scheduleState is what the firing goroutine knows of one schedule.
type scheduleState struct {
	def   schedule.Def
	fired time.Time // the last tick fired (recorded), or zero
}

// fireSchedules runs the term's schedules until ctx ends.
func (r *run) fireSchedules(ctx context.Context) {
	ch := make(chan jetstream.Msg, 64)
	// Schedules never end the term: a failure here (the stream's leader being elected, say) is
	// tried again until it works, while the term coordinates as usual (r.retry would end it).
	var cc jetstream.ConsumeContext
	for wait := 100 * time.Millisecond; cc == nil; wait = min(2*wait, 5*time.Second) {
		tctx, cancel := context.WithTimeout(ctx, requestTimeout)
		s, err := r.c.js.Stream(tctx, r.names.SchedulesStream())
		var cons jetstream.Consumer
		if err == nil {
			cons, err = s.OrderedConsumer(tctx, jetstream.OrderedConsumerConfig{})
		}
		cancel()
		if err == nil {
			cc, err = cons.Consume(func(m jetstream.Msg) {
				select {
				case ch <- m:
				case <-ctx.Done(): // the term's, not a request's
				}
			})
		}
		if err != nil {
			if ctx.Err() != nil {
				return // the term ended while asking: nothing to warn about
			}
			r.log.Warn().Err(err).Stringer("retry_in", wait).Msg("schedules: cannot follow the schedules stream yet")
			if sleepCtx(ctx, wait); ctx.Err() != nil {
				return
			}
		}
	}
	defer cc.Stop()
	states := map[string]*scheduleState{}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case m := <-ch:
			r.applySchedule(states, m)
			// Apply what else has arrived before deciding: at takeover the whole stream comes at once.
			for drained := false; !drained; {
				select {
				case m := <-ch:
					r.applySchedule(states, m)
				default:
					drained = true
				}
			}
		case <-timer.C:
		}
		next := r.fireDue(ctx, states)
		if next.IsZero() {
			timer.Reset(time.Hour)
		} else {
			timer.Reset(max(time.Until(next), 0))
		}
	}
}

// applySchedule applies one message of the schedules stream; a malformed one is rejected.
func (r *run) applySchedule(states map[string]*scheduleState, m jetstream.Msg) {
	def, name, ok := r.names.ParseScheduleSubject(m.Subject())
	reject := func(reason string) { // recorded and counted by the loop, as any refused message
		select {
		case r.schedReject <- engine.Rejection{Subject: m.Subject(), Seq: seq(m), Reason: reason}:
		case <-r.done:
		}
	}
	if !ok {
		reject("not a schedule subject")
		return
	}
	st := states[name]
	if def {
		var d schedule.Def
		if err := schedule.Decode(m.Data(), &d); err != nil {
			reject(err.Error())
			return
		}
		if err := d.Validate(); err != nil || d.Name != name {
			reject(fmt.Sprintf("schedule %q on the subject of %q: %v", d.Name, name, err))
			return
		}
		if d.Removed {
			if st != nil && st.def.Name != "" {
				r.log.Info().Str("schedule", name).Msg("schedule removed")
			}
			delete(states, name)
			return
		}
		if st == nil {
			st = &scheduleState{}
			states[name] = st
		}
		st.def = d
		// At takeover each stored schedule is logged once, as limits are.
		r.log.Info().Str("schedule", name).Str("when", d.When()).Str("group", d.Group+"@…").Int("jobs", len(d.Jobs)).Bool("paused", d.Paused).Msg("schedule set")
		return
	}
	var f schedule.Fired
	if err := schedule.Decode(m.Data(), &f); err != nil || f.Name != name {
		reject(fmt.Sprintf("fired record of %q: %v", name, err))
		return
	}
	if st == nil {
		st = &scheduleState{}
		states[name] = st // its definition may come later in the stream
	}
	if f.Tick.After(st.fired) {
		st.fired = f.Tick
	}
}

// fireDue fires every schedule whose latest tick is due and not fired, and returns when the next
// tick of any schedule comes (zero if none).
func (r *run) fireDue(ctx context.Context, states map[string]*scheduleState) time.Time {
	var next time.Time
	now := r.cfg.now()
	for name, st := range states {
		if st.def.Name == "" || st.def.Paused {
			continue // a fired record whose definition is gone or not read yet; or paused
		}
		if tick, skipped := st.def.Latest(st.fired, now); !tick.IsZero() {
			if skipped > 0 && !st.fired.IsZero() {
				r.log.Warn().Str("schedule", name).Int("skipped", skipped).Time("tick", tick).Msg("schedules: ticks missed while no coordinator ran; firing the latest only")
			}
			if err := r.fire(ctx, st.def, tick); err != nil {
				if ctx.Err() == nil {
					r.log.Error().Err(err).Str("schedule", name).Time("tick", tick).Msg("schedules: firing failed; trying again in a second")
					retry := now.Add(time.Second)
					if next.IsZero() || retry.Before(next) {
						next = retry
					}
				}
				continue
			}
			st.fired = tick
		}
		from := now
		if st.fired.After(from) {
			from = st.fired
		}
		if t := st.def.Next(from); next.IsZero() || t.Before(next) {
			next = t
		}
	}
	return next
}

// fire publishes the group of def's tick, then records the tick fired. Every publish has a
// deadline and a Msg-Id derived from the tick (see the comment at the top).
func (r *run) fire(ctx context.Context, def schedule.Def, tick time.Time) error {
	group := schedule.GroupID(def, tick)
	gtok := wire.GroupToken(group)
	id := schedule.MsgID(def, tick)
	publish := func(m *nats.Msg, msgID string) error {
		m.Header.Set(wire.HdrMsgID, msgID)
		// One try with a deadline: a failure is tried again a second later (fireDue), never
		// ending the term; the message IDs make the retry's copies duplicates.
		tctx, cancel := context.WithTimeout(ctx, requestTimeout)
		defer cancel()
		_, err := r.c.js.PublishMsg(tctx, m)
		return err
	}
	open := &nats.Msg{Subject: r.names.GroupSubject(gtok), Header: wire.GroupControl{Group: group, Op: wire.OpOpen, Weight: def.Weight}.Header()}
	if err := publish(open, id+"/open"); err != nil {
		return err
	}
	for i, j := range def.Jobs {
		meta := wire.JobMeta{Group: group, Key: j.Key, Require: j.Require, Prefer: j.Prefer, MaxAttempts: j.MaxAttempts, Timeout: j.Timeout}
		msg := &nats.Msg{Subject: r.names.JobSubject(gtok), Header: meta.Header(), Data: j.Payload}
		if err := publish(msg, id+"/"+strconv.Itoa(i)); err != nil {
			return err
		}
	}
	seal := &nats.Msg{Subject: r.names.GroupSubject(gtok), Header: wire.GroupControl{Group: group, Op: wire.OpSeal, Count: uint64(len(def.Jobs))}.Header()}
	if err := publish(seal, id+"/seal"); err != nil {
		return err
	}
	if os.Getenv(killAfterFireEnv) == def.Name {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL) // fault injection (tests): die before the record
	}
	body, _ := json.Marshal(schedule.Fired{Name: def.Name, Tick: tick}) // plain fields: cannot fail
	rec := &nats.Msg{Subject: r.names.FiredSubject(def.Name), Header: nats.Header{}, Data: body}
	if err := publish(rec, id+"/fired"); err != nil {
		return err
	}
	r.log.Info().Str("schedule", def.Name).Str("group", group).Time("tick", tick).Int("jobs", len(def.Jobs)).Msg("schedule fired")
	return nil
}
