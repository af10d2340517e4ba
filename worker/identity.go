package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weavejobs/weave/internal/wire"
)

// ErrDuplicateID is wrapped by the error Run returns when the coordinator refuses this worker
// because another running worker has its ID: at start, before any work is pulled, or later,
// when a coordinator that started after both workers sees the second one (Run then drains
// and stops).
var ErrDuplicateID = errors.New("weave: another running worker has this worker ID")

const (
	// joinTimeout bounds the wait for the coordinator's answer to the join heartbeat. Without
	// an answer the worker starts: a coordinator that starts later refuses a duplicate then.
	joinTimeout = 2 * time.Second
	// maxJoinWait bounds the wait the coordinator may ask for before a second join (see
	// wire.HeartbeatReply.RetryMS): HeartbeatMisses (3) dormant heartbeat periods and more.
	maxJoinWait = 2 * time.Minute
)

// join asks the coordinator, with a heartbeat marked Join on the worker's join subject, whether this worker may run under its
// ID. The coordinator first asks the run holding the ID whether it still listens, and forgets it
// at once if its connection is gone (a worker restarted after a crash). A refusal because
// another run of the ID is live comes with the time after which the coordinator would forget
// that run if it is dead: the worker waits that long and asks once more, and a second refusal
// means the other run is alive.
// No coordinator (no responders) or no answer lets the worker start.
func (w *Worker) join(ctx context.Context) error {
	subject := w.cfg.names.JoinSubject(w.cfg.pool, w.cfg.ID)
	for asked := 0; ; asked++ {
		hb := w.heartbeatMsg(false)
		hb.Join = true
		rctx, cancel := context.WithTimeout(ctx, joinTimeout)
		m, err := w.nc.RequestWithContext(rctx, subject, hb.Marshal())
		cancel()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, nats.ErrNoResponders):
			w.log.Debug().Msg("worker: no coordinator running; a duplicate ID is caught when one starts")
			return nil
		case err != nil:
			w.log.Warn().Err(err).Msg("worker: no answer from the coordinator to the join; starting")
			return nil
		}
		rep, err := wire.ParseHeartbeatReply(m.Data)
		if err != nil {
			w.log.Warn().Err(err).Msg("worker: bad answer from the coordinator to the join; starting")
			return nil
		}
		if rep.Refused == "" {
			return nil
		}
		if rep.RetryMS <= 0 || asked > 0 {
			return fmt.Errorf("%w: %s", ErrDuplicateID, rep.Refused)
		}
		wait := min(time.Duration(rep.RetryMS)*time.Millisecond+w.cfg.HeartbeatInterval, maxJoinWait)
		w.log.Info().Str("reason", rep.Refused).Stringer("wait", wait).Msg("worker: ID in use; asking again in case its run has died")
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

// watchRefusals subscribes to the answers to this worker's heartbeats: the coordinator answers a
// heartbeat only to refuse it (a coordinator that started after this worker and knows another
// run of its ID). A refusal calls stop with an error wrapping ErrDuplicateID, which makes Run
// drain and return it. The subscription's inbox is where heartbeats ask for answers; a request
// there is the coordinator asking whether this run still lives (another run of its ID asks to
// join), answered at once.
func (w *Worker) watchRefusals(stop context.CancelCauseFunc) (*nats.Subscription, error) {
	inbox := w.nc.NewRespInbox()
	sub, err := w.nc.Subscribe(inbox, func(m *nats.Msg) {
		if m.Reply != "" {
			_ = m.Respond(nil)
			return
		}
		rep, err := wire.ParseHeartbeatReply(m.Data)
		if err != nil || rep.Refused == "" {
			return
		}
		w.log.Error().Str("reason", rep.Refused).Msg("worker: the coordinator refused this worker's heartbeats; stopping")
		stop(fmt.Errorf("%w: %s", ErrDuplicateID, rep.Refused))
	})
	if err != nil {
		return nil, err
	}
	w.hbInbox = inbox
	return sub, nil
}

// heartbeatMsg is the worker's current heartbeat.
func (w *Worker) heartbeatMsg(stopped bool) wire.Heartbeat {
	st := w.Stats()
	return wire.Heartbeat{
		Worker:      w.cfg.ID,
		Pool:        w.cfg.pool,
		Resources:   w.cfg.resources,
		Concurrency: w.cfg.Concurrency,
		Busy:        st.Busy,
		Sleeping:    st.Sleeping,
		Held:        &st.Held,
		Draining:    st.Draining,
		Stopped:     stopped,
		IntervalMS:  w.cfg.HeartbeatInterval.Milliseconds(),
		Run:         w.runID,
	}
}
