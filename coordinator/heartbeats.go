package coordinator

import (
	"github.com/nats-io/nats.go"

	"github.com/weavejobs/weave/internal/wire"
)

// heartbeatIn is a heartbeat or a join as the loop receives it, with the subjects it came on.
type heartbeatIn struct {
	subject, reply string
	hb             wire.Heartbeat
	join           bool   // a join: answer whether the worker may start, apply nothing
	err            string // the message is not a heartbeat: record the rejection
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

// heartbeat applies a heartbeat, or answers a join, and answers a refusal on the message's reply
// subject. Workers send heartbeats with a reply subject to learn of a refusal (a coordinator
// that started after them found another run of their ID). Called by the loop.
func (r *run) heartbeat(in heartbeatIn) {
	now := r.cfg.now()
	var ref refusal
	switch {
	case in.err != "":
		ref = r.e.refuseHeartbeat(in.subject, in.err)
	case in.join:
		ref = r.e.checkHeartbeat(in.subject, in.hb, now)
	default:
		ref = r.e.heartbeat(in.subject, in.hb, now)
	}
	if in.reply == "" || ref.reason == "" && !in.join {
		return
	}
	reply := wire.HeartbeatReply{Refused: ref.reason}
	if ref.reason != "" {
		reply.RetryMS = ref.retry.Milliseconds()
	}
	if err := r.c.nc.Publish(in.reply, reply.Marshal()); err != nil {
		r.log.Warn().Err(err).Str("subject", in.subject).Msg("answering a heartbeat failed")
	}
}
