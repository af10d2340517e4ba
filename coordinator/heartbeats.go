package coordinator

import (
	"errors"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weavejobs/weave/coordinator/internal/engine"
	"github.com/weavejobs/weave/internal/wire"
)

// heartbeatIn is a heartbeat or a join as the loop receives it, with the subjects it came on.
type heartbeatIn struct {
	subject, reply string
	hb             wire.Heartbeat
	join           bool   // a join: answer whether the worker may start, apply nothing
	err            string // the message is not a heartbeat: record the rejection
	// probed marks a join handed back by probe; gone then names the run holding the worker's
	// ID that no longer listens on its heartbeats' inbox ("" if it does, or no answer came).
	probed bool
	gone   string
}

// subscribeHeartbeats hands heartbeats and joins to the loop (hbCh). Called by replay.
func (r *run) subscribeHeartbeats() error {
	for _, subject := range []string{r.names.AllHeartbeats(), r.names.AllJoins()} {
		sub, err := r.c.nc.Subscribe(subject, func(m *nats.Msg) {
			in := heartbeatIn{subject: m.Subject, reply: m.Reply}
			hb, err := wire.ParseHeartbeat(m.Data)
			if err != nil {
				in.err = err.Error()
			}
			// The subject, not the body, says whether it is a join.
			_, _, join := r.names.ParseJoinSubject(m.Subject)
			in.hb, in.join = hb, join
			select {
			case r.hbCh <- in:
			case <-r.done:
			default: // the loop is behind; the next heartbeat carries the same news
			}
		})
		if err != nil {
			return err
		}
		r.stop = append(r.stop, func() { _ = sub.Unsubscribe() })
	}
	return nil
}

// callRoll asks every worker to heartbeat now, as the term's scheduling starts: the engine
// knows a worker only from its heartbeats, and an idle worker's come every
// IdleHeartbeatInterval (30s once dormant), so until then a restarted coordinator released
// nothing to it. The answers come within the workers' jitter (rollCallJitter), to the loop.
// Best effort: a lost roll call costs a heartbeat period.
func (r *run) callRoll() {
	if err := r.c.nc.Publish(r.names.RollCallSubject(), nil); err != nil {
		r.log.Warn().Err(err).Msg("roll call not sent: idle workers are known from their next heartbeat")
	}
}

// heartbeat applies a heartbeat, or answers a join, and answers a refusal on the message's reply
// subject. Workers send heartbeats with a reply subject to learn of a refusal (a coordinator
// that started after them found another run of their ID). Called by the loop.
func (r *run) heartbeat(in heartbeatIn) {
	now := r.cfg.now()
	var ref engine.Refusal
	switch {
	case in.err != "":
		ref = r.e.RefuseHeartbeat(in.subject, in.err)
	case in.join:
		if in.gone != "" {
			r.e.ForgetRun(in.hb.Worker, in.gone, now)
		}
		if inbox, run := r.e.OtherRun(in.hb); inbox != "" && !in.probed {
			r.wg.Go(func() { r.probe(in, inbox, run) })
			return
		}
		ref = r.e.CheckHeartbeat(in.subject, in.hb, now)
	default:
		if ref = r.e.Heartbeat(in.subject, in.hb, now); ref.Reason == "" {
			r.e.HeardFrom(in.hb, in.reply)
		}
	}
	if in.reply == "" || ref.Reason == "" && !in.join {
		return
	}
	reply := wire.HeartbeatReply{Refused: ref.Reason}
	if ref.Reason != "" {
		reply.RetryMS = ref.Retry.Milliseconds()
	}
	if err := r.c.nc.Publish(in.reply, reply.Marshal()); err != nil {
		r.log.Warn().Err(err).Str("subject", in.subject).Msg("answering a heartbeat failed")
	}
}

// probeTimeout bounds probe's wait, well within a joining worker's wait for its answer.
const probeTimeout = 500 * time.Millisecond

// probe asks whether run, which holds the ID of a worker asking to join, still listens on its
// heartbeats' inbox, then hands the join back to the loop. When that run's connection is gone (a
// worker that crashed, restarted under its ID), the server answers at once that nobody listens,
// and the loop forgets the dead run rather than refuse the new one until the dead one's
// heartbeats are missed (HeartbeatMisses of its period: a dormant worker's is 30s). A live run
// answers, or (a worker of an earlier release) lets the request time out: the join is refused,
// as before.
func (r *run) probe(in heartbeatIn, inbox, run string) {
	_, err := r.c.nc.Request(inbox, nil, probeTimeout)
	in.probed = true
	if errors.Is(err, nats.ErrNoResponders) {
		in.gone = run
	}
	select {
	case r.hbCh <- in:
	case <-r.done:
	}
}
