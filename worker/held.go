package worker

import (
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weavejobs/weave/internal/wire"
)

// Which worker runs a job: the coordinator releases a batch to a pool, and any worker of the pool
// may take it, so inspection (dispatcher.Job) asks the pool's workers on Names.HeldSubject. The
// worker running the job answers with its ID and when the handler started; the others, and a
// malformed request, get no answer.

// answerHeld subscribes to the pool's held-job requests.
func (w *Worker) answerHeld(running *cancelRegistry) (*nats.Subscription, error) {
	cfg := w.cfg
	return w.nc.Subscribe(cfg.names.HeldSubject(cfg.pool), func(m *nats.Msg) {
		var req wire.HeldRequest
		if json.Unmarshal(m.Data, &req) != nil || req.Version != wire.Version || m.Reply == "" {
			return
		}
		started, ok := running.startedAt(req.Job)
		if !ok {
			return
		}
		b, _ := json.Marshal(wire.HeldReply{Version: wire.Version, Worker: cfg.ID, Started: started}) // plain fields only
		if err := m.Respond(b); err != nil {
			w.log.Debug().Err(err).Msg("worker: held-job answer failed")
		}
	})
}

// startedAt reports when the handler of job id started, if it runs here.
func (r *cancelRegistry) startedAt(id uint64) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	j, ok := r.running[id]
	return j.started, ok
}
