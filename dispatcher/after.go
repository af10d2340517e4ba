package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/weavejobs/weave/internal/wire"
)

// Condition is what a group waits for in a group it runs after.
type Condition = wire.When

// Conditions of a Dependency or a FollowUp.
const (
	// OnSuccess: the group completed with every job done (the default).
	OnSuccess = wire.WhenSuccess
	// OnCompletion: the group completed, whatever its jobs' outcomes.
	OnCompletion = wire.WhenComplete
	// OnFailure: the group completed with a job failed or canceled. A group that succeeded
	// cancels the groups waiting on its failure.
	OnFailure = wire.WhenFailure
)

// IfFailed is what a group waiting on another's success does when that group did not succeed.
type IfFailed = wire.IfFailed

const (
	// CancelIfFailed cancels the waiting group (its jobs end canceled, and the groups that wait
	// on its success are canceled in turn). The default of a Dependency.
	CancelIfFailed = wire.IfFailedCancel
	// WaitIfFailed keeps the waiting group held until a redrive of the failed group succeeds
	// (Redrive, 'weave failed retry'); it can be canceled meanwhile. The default of a FollowUp
	// on success, as Sidekiq's on(:success).
	WaitIfFailed = wire.IfFailedWait
)

// Dependency is a group a group runs after: none of its jobs is released until Group has
// completed as When asks.
//
// Which incarnation: the group ID's latest one opened before the dependent group's open (running,
// or complete with its outcomes retained), else its next one. A group that waits for one never
// published shows as waiting in 'weave group' and status, and can be canceled.
type Dependency struct {
	Group    string
	When     Condition
	IfFailed IfFailed // for OnSuccess: CancelIfFailed (default) or WaitIfFailed

	incarnation uint64 // a follow-up's: the incarnation of the group it follows
}

// After makes the group run after others: it is stored and counted at once, but holds no feeder
// slot and none of its jobs is released until every dependency has completed as its When asks;
// one that ends otherwise cancels it (CancelIfFailed) or keeps it waiting for a redrive
// (WaitIfFailed). Publish returns ErrCycle, and publishes nothing else, when the group would wait
// on itself through the groups it names. Jobs of the group receive how the groups ended
// (worker.Job.After). At most 256 dependencies.
func After(deps ...Dependency) GroupOption {
	return func(o *groupOptions) { o.after = append(o.after, deps...) }
}

// FollowUp is a group to publish with the one it follows and to run when that one completes as
// When asks (OnSuccess by default, which waits for a redrive if the group fails; OnCompletion;
// OnFailure). Its jobs are stored at once, with the group they follow, so the chain survives the
// producer; the coordinator runs it once, also across its own restart or failover. Group is its
// ID ("" for "<group>.then.<n>"). Its jobs receive the finished group's summary and failed job
// IDs (worker.Job.After).
type FollowUp struct {
	When  Condition
	Group string
	Jobs  []Job
}

// Then publishes follow-ups with the group (see FollowUp): Publish stores each after the group's
// jobs and before its seal, also when a job could not be published (the group is then sealed with
// the jobs it has, and still followed). The Handle's FollowUps returns theirs. Publishing the group again
// after a crash finds a follow-up stored and waiting: it is left as it is (its Handle returned).
func Then(f ...FollowUp) GroupOption {
	return func(o *groupOptions) { o.then = append(o.then, f...) }
}

// ErrCycle reports a group that would wait on itself through the groups it runs after: the
// coordinator refused its open, and Publish published nothing else.
var ErrCycle = errors.New("weave: dependency cycle")

func (o *groupOptions) edges() []wire.After {
	if len(o.after) == 0 {
		return nil
	}
	out := make([]wire.After, len(o.after))
	for i, dep := range o.after {
		out[i] = wire.After{Group: dep.Group, Incarnation: dep.incarnation, When: dep.When, IfFailed: dep.IfFailed}
	}
	return out
}

// validateAfter checks the dependencies and follow-ups of groupID.
func (o *groupOptions) validateAfter(groupID string) error {
	if err := wire.ValidateAfter(groupID, o.edges()); err != nil {
		return err
	}
	for i, f := range o.then {
		if f.When > OnFailure {
			return fmt.Errorf("follow-up %d: condition %v", i+1, f.When)
		}
		if f.Group != "" {
			if err := validateGroupID(f.Group); err != nil {
				return fmt.Errorf("follow-up %d: %w", i+1, err)
			}
		}
	}
	return nil
}

// openAnswers subscribes, before an open with dependencies is published, to the answer the
// coordinator gives it (refused for a cycle, or accepted).
func (d *Dispatcher) openAnswers(c wire.GroupControl) (*nats.Subscription, error) {
	if len(c.After) == 0 {
		return nil, nil
	}
	sub, err := d.nc.SubscribeSync(d.names.ReplySubject(d.reply))
	if err != nil {
		return nil, fmt.Errorf("weave: publish group %q: subscribe to %s: %w", c.Group, d.names.ReplySubject(d.reply), err)
	}
	return sub, nil
}

// awaitOpen waits for the coordinator's answer to the open stored at seq, at most
// RequestTimeout: a cycle is ErrCycle. Without an answer (no coordinator running) Publish goes
// on; a cycle is then refused and recorded when a coordinator reads the open. The caller
// unsubscribes sub.
func (d *Dispatcher) awaitOpen(ctx context.Context, sub *nats.Subscription, group string, seq uint64) error {
	if sub == nil {
		return nil
	}
	wctx, stop := context.WithTimeout(ctx, d.cfg.RequestTimeout)
	defer stop()
	for {
		msg, err := sub.NextMsgWithContext(wctx)
		if err != nil {
			d.log.Debug().Str("group", group).Msg("no answer to an open with dependencies: no coordinator running?")
			return nil
		}
		var a wire.ControlAnswer
		if json.Unmarshal(msg.Data, &a) != nil || a.Seq != seq || a.Op != wire.OpOpen || a.Group != group {
			continue
		}
		if a.OK {
			return nil
		}
		if a.Code == wire.AnswerCycle {
			return fmt.Errorf("%w: %s", ErrCycle, a.Reason)
		}
		return fmt.Errorf("weave: open of group %q refused by the coordinator: %s", group, a.Reason)
	}
}

// publishFollowUps publishes the follow-ups of the group h opened, each after h's incarnation.
func (d *Dispatcher) publishFollowUps(ctx context.Context, h *Handle, then []FollowUp) ([]*Handle, error) {
	// An open that resumed an unsealed group (a producer publishing again after a crash) joined
	// its incarnation, which the follow-ups must name: read it from the control messages.
	if err := h.resolveIncarnation(ctx); err != nil {
		return nil, fmt.Errorf("weave: follow-ups of group %q: %w", h.group, err)
	}
	var hs []*Handle
	for i, f := range then {
		id := f.Group
		if id == "" {
			id = h.group + ".then." + strconv.Itoa(i+1)
		}
		dep := Dependency{Group: h.group, When: f.When, incarnation: h.openSeq}
		if f.When == OnSuccess {
			dep.IfFailed = WaitIfFailed
		}
		fh, err := d.Publish(ctx, id, slices.Values(f.Jobs), After(dep))
		if fh != nil {
			hs = append(hs, fh)
		}
		if errors.Is(err, ErrGroupRunning) {
			continue // stored by an earlier Publish of the group (a producer publishing it again after a crash)
		}
		if err != nil {
			return hs, fmt.Errorf("weave: follow-up %q of group %q: %w", id, h.group, err)
		}
	}
	return hs, nil
}

// FollowUps returns the Handles of the follow-ups Publish stored with the group (Then), in order.
func (h *Handle) FollowUps() []*Handle { return slices.Clone(h.followUps) }
