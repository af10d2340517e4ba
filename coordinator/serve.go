package coordinator

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weavejobs/weave/internal/wire"
)

// inspectQuery is an inspection request handed to the loop.
type inspectQuery struct {
	req   wire.InspectRequest
	reply chan wire.InspectReply
}

// inspector is the term's inspection state: the channel its responder hands requests to the
// loop on (read by the loop only), and the standbys heard (owned by standbys' mutex).
type inspector struct {
	ch       chan inspectQuery
	standbys standbys
}

func newInspector() *inspector { return &inspector{ch: make(chan inspectQuery)} }

// subscribeInspect starts the inspection responder and the standby listener of the term.
func (r *run) subscribeInspect() error {
	sub, err := r.c.nc.Subscribe(r.names.InspectSubject(), r.serveInspect)
	if err != nil {
		return err
	}
	r.stop = append(r.stop, func() { _ = sub.Unsubscribe() })
	sb, err := r.c.nc.Subscribe(r.names.StandbySubject(), func(m *nats.Msg) {
		a, err := wire.ParseStandbyAnnounce(m.Data)
		if err != nil {
			r.log.Debug().Err(err).Msg("ignoring a malformed standby announcement")
			return
		}
		r.insp.standbys.heard(a, time.Now())
	})
	if err != nil {
		return err
	}
	r.stop = append(r.stop, func() { _ = sb.Unsubscribe() })
	return nil
}

// serveInspect answers an inspection request: a bad one at once, with the reason; a good one
// from the loop.
func (r *run) serveInspect(m *nats.Msg) {
	req, err := wire.ParseInspectRequest(m.Data)
	var rep wire.InspectReply
	if err != nil {
		rep.Error = err.Error()
	} else {
		q := inspectQuery{req: req, reply: make(chan wire.InspectReply, 1)}
		select {
		case r.insp.ch <- q:
		case <-r.done:
			return
		case <-time.After(2 * time.Second):
			return
		}
		rep = <-q.reply
	}
	if err := m.Respond(rep.Marshal()); err != nil && !errors.Is(err, nats.ErrMsgNoReply) {
		r.log.Warn().Err(err).Msg("inspect reply failed")
	}
}

// standbys are the standby coordinators heard lately. Written by the standby subscription, read
// by the status responder; mu guards m.
type standbys struct {
	mu sync.Mutex
	m  map[string]StandbyStatus
}

func (s *standbys) heard(a wire.StandbyAnnounce, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]StandbyStatus{}
	}
	s.m[a.Holder] = StandbyStatus{Holder: a.Holder, Since: a.Since, LastSeen: now}
}

// list returns the standbys heard within three announcement intervals, by holder, and forgets
// the others.
func (s *standbys) list(now time.Time) []StandbyStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []StandbyStatus
	for h, st := range s.m {
		if now.Sub(st.LastSeen) > 3*wire.StandbyInterval {
			delete(s.m, h)
			continue
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b StandbyStatus) int { return cmp.Compare(a.Holder, b.Holder) })
	return out
}

// announceStandby publishes a standby announcement every wire.StandbyInterval, the first after
// one interval (a coordinator that takes a free lease at once never announces), until the
// returned stop is called.
func (c *Coordinator) announceStandby(ctx context.Context, holder string) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		a := wire.StandbyAnnounce{Holder: holder, Since: time.Now()}
		t := time.NewTicker(wire.StandbyInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := c.nc.Publish(c.names.StandbySubject(), a.Marshal()); err != nil {
					c.cfg.Logger.Debug().Err(err).Msg("standby announcement failed")
				}
			}
		}
	}()
	return func() { cancel(); <-done }
}

// statusMargin is the room left in a status answer for what the server adds to it.
const statusMargin = 4 << 10

// serveStatus answers a status request from the loop's state (core NATS request/reply).
func (r *run) serveStatus(m *nats.Msg) {
	reply := make(chan *Status, 1)
	select {
	case r.statusCh <- reply:
	case <-time.After(2 * time.Second):
		return
	}
	st := <-reply
	st.Standbys = r.insp.standbys.list(time.Now())
	if err := m.Respond(st.Fit(int(r.c.nc.MaxPayload()) - statusMargin)); err != nil && !errors.Is(err, nats.ErrMsgNoReply) {
		r.log.Warn().Err(err).Msg("status reply failed")
	}
}

// QueryStatus asks the namespace's running coordinator for its status.
func QueryStatus(ctx context.Context, nc *nats.Conn, namespace string) (*Status, error) {
	names, err := wire.NewNames(namespace)
	if err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	resp, err := nc.RequestWithContext(ctx, names.StatusSubject(), nil)
	if err != nil {
		return nil, fmt.Errorf("weave: status of namespace %q (is a coordinator running?): %w", names.Namespace(), err)
	}
	var s Status
	if err := json.Unmarshal(resp.Data, &s); err != nil {
		return nil, fmt.Errorf("weave: status: %w", err)
	}
	return &s, nil
}
