package worker

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// puller sends the worker's pull requests to its pool's consumer and receives what the server
// sends back on long-lived subscriptions, one per pull that may be open at once (a lane): the
// lane's n-th pull answers on <the lane's inbox>.<n>.
//
// Not nats.go's Fetch: each Fetch subscribes a new inbox and unsubscribes it when the pull ends,
// and a worker pulls about once per work batch, so with small batches the subscriptions' churn
// would be a large part of the process's CPU, most of it in the server, whose subject index
// changes (and drops its match cache) with every subscription.
//
// A lane, not a pull, owns its subscription because the server delivers a pull's messages with
// their own subject (the work subject), not the pull's reply subject: only the subscription they
// arrive on tells which pull they answer. Status messages (a heartbeat, the pull's end) do carry
// the reply subject, so a stale one, of a pull the lane had before, is told apart and dropped. A
// pull the worker gives up on (it lost its heartbeats, or is renewed after a reconnect) moves its
// lane to a new subscription, so nothing the server still sends for it reaches the next pull.
type puller struct {
	nc      *nats.Conn
	now     func() time.Time // cfg.now: the clock receipts are stamped with
	subject string           // $JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>
	lanes   []*lane
	mu      sync.Mutex // guards the lanes' pull state
}

// lane is one subscription and the pull it serves, if any.
type lane struct {
	prefix string // the lane's inbox and a dot
	sub    *nats.Subscription
	// msgs carries the lane's work batches and the current pull's ending status. The server
	// sends a pull no more messages than it asked for, and a lane serves one pull at a time.
	msgs chan laneMsg
	// The current (or last) pull's state seen by route; guarded by the puller's mu.
	gen       uint64        // its number
	heartbeat time.Duration // its heartbeat interval
	seen      time.Time     // when the server last sent anything for it (or it was sent)
	silence   time.Time     // see stamp; zero until a silence is met
	// The current pull's accounting, owned by the one goroutine that opens and reads the
	// puller's pulls (the shepherd).
	busy      bool      // a pull is open
	requested int       // messages it asked for
	received  int       // work batches it delivered
	started   time.Time // when it was sent
	expires   time.Duration
}

// laneMsg is a message as it arrived on a lane, stamped with its receipt (see stamp).
type laneMsg struct {
	m  *nats.Msg
	at time.Time
}

// stamp returns the receipt time of a message arriving now on lane l: the moment from which the
// worker counts its batch's lease. The server started the lease when it delivered the message,
// a little before, so the worker's count must not start later than that delivery, or the worker
// would go on starting the batch's jobs after the server has redelivered it. Normally the
// message is read as soon as it comes, and now will do. But if the lane heard nothing for
// longer than two heartbeats, which an open pull's server sends every heartbeat while it
// has nothing to send, the worker could not read: its process was stopped, or starved, or its
// connection stalled. The message may then have waited in a buffer since just after the last
// thing read before that silence, so the rest of the pull counts from then. Called with the
// puller's mu held.
func (l *lane) stamp(now time.Time) time.Time {
	if l.silence.IsZero() && l.heartbeat > 0 && now.Sub(l.seen) > 2*l.heartbeat {
		l.silence = l.seen
	}
	l.seen = now
	if !l.silence.IsZero() {
		return l.silence
	}
	return now
}

func newPuller(nc *nats.Conn, now func() time.Time, stream, consumer string, lanes, maxBatch int) (*puller, error) {
	p := &puller{nc: nc, now: now, subject: fmt.Sprintf("$JS.API.CONSUMER.MSG.NEXT.%s.%s", stream, consumer)}
	for range lanes {
		l := &lane{msgs: make(chan laneMsg, 2*maxBatch+2)}
		if err := p.subscribe(l); err != nil {
			p.close()
			return nil, err
		}
		p.lanes = append(p.lanes, l)
	}
	return p, nil
}

// subscribe gives lane l a subscription of its own on a new inbox.
func (p *puller) subscribe(l *lane) error {
	prefix := p.nc.NewInbox() + "."
	var sub *nats.Subscription
	sub, err := p.nc.Subscribe(prefix+"*", func(m *nats.Msg) { p.route(l, sub, m) })
	if err != nil {
		return fmt.Errorf("subscribe to pull replies: %w", err)
	}
	p.mu.Lock()
	l.prefix, l.sub = prefix, sub
	p.mu.Unlock()
	return nil
}

func (p *puller) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.lanes {
		if l.sub != nil {
			_ = l.sub.Unsubscribe()
		}
	}
}

// route hands a message that arrived on lane l's subscription sub to its pull. A message of a
// subscription the lane has left, or a status message of another pull than the lane's current
// one (late), is dropped; so is a heartbeat once it is noted. A work batch the lane has no room
// for is dropped too (never expected). A dropped work batch is not acknowledged: it is delivered
// again after its lease.
//
// The send happens under the lock (it never blocks), so a message routed as current is on the
// lane before anything can change the lane: abandon, which delivers what the lane holds, and the
// next pull, which starts from an empty lane, both see it or neither does.
func (p *puller) route(l *lane, sub *nats.Subscription, m *nats.Msg) {
	status := isStatus(m)
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if sub != l.sub || status && m.Subject != l.prefix+strconv.FormatUint(l.gen, 36) {
		return
	}
	at := l.stamp(now)
	if status && m.Header.Get("Status") == "100" {
		return
	}
	select {
	case l.msgs <- laneMsg{m: m, at: at}:
	default:
	}
}

// isStatus reports whether m is a status message of a pull (a heartbeat, its end), not a work
// batch.
func isStatus(m *nats.Msg) bool { return len(m.Data) == 0 && m.Header.Get("Status") != "" }

// pullRequest is the JSON body of a pull request: {"batch":…,"expires":…,"idle_heartbeat":…},
// durations in nanoseconds, the heartbeat left out if 0. Written by hand because it goes with
// every pull, and json.Marshal's reflection would be a large part of a pull's own cost.
func pullRequest(batch int, expires, heartbeat time.Duration) []byte {
	b := make([]byte, 0, 80)
	b = append(b, `{"batch":`...)
	b = strconv.AppendInt(b, int64(batch), 10)
	b = append(b, `,"expires":`...)
	b = strconv.AppendInt(b, int64(expires), 10)
	if heartbeat > 0 {
		b = append(b, `,"idle_heartbeat":`...)
		b = strconv.AppendInt(b, int64(heartbeat), 10)
	}
	return append(b, '}')
}

// pull asks for up to batch messages on a free lane, waiting at the server up to expires, with a
// heartbeat. The caller keeps at most len(lanes) pulls open, reads each open lane's msgs and
// hands what it reads to receive, until the pull ends there, or is given up (abandon). With
// ack set, the request goes as that message's acknowledgement (+NXT): one message to the server
// instead of two; if it cannot be sent, neither is the acknowledgement.
func (p *puller) pull(batch int, expires, heartbeat time.Duration, ack workMsg) (*lane, error) {
	var l *lane
	for _, c := range p.lanes {
		if !c.busy {
			l = c
			break
		}
	}
	if l == nil {
		return nil, errors.New("weave: worker: every pull lane is busy") // a bug: the shepherd bounds its pulls
	}
	now := p.now()
	l.busy, l.requested, l.received, l.started, l.expires = true, batch, 0, now, expires
	p.mu.Lock()
	l.seen, l.heartbeat, l.silence = now, heartbeat, time.Time{}
	l.gen++
	reply := l.prefix + strconv.FormatUint(l.gen, 36)
	// The lane is normally empty here. Should a status of its pull before be left (none is
	// expected: a pull the server did not end is abandoned), it is not this pull's: drop it,
	// keeping any work batch, in order. route sends under the lock, so nothing arrives meanwhile.
	for range len(l.msgs) {
		if m := <-l.msgs; !isStatus(m.m) {
			l.msgs <- m
		}
	}
	p.mu.Unlock()
	req := pullRequest(batch, expires, heartbeat)
	var err error
	if ack != nil {
		err = ack.AckNext(reply, req)
	} else {
		err = p.nc.PublishRequest(p.subject, reply, req)
	}
	if err != nil {
		l.busy = false
		return nil, err
	}
	return l, nil
}

// lastSeen is when the server last sent anything for l's pull.
func (p *puller) lastSeen(l *lane) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return l.seen
}

// pullStatus is what a status message ends a pull with: nil for its normal ends (expired, or no
// messages), else the error, in the terms of nats.go's jetstream package, so that the shepherd
// tells a deleted consumer from a passing failure as it did with Fetch.
func pullStatus(m *nats.Msg) error {
	code, descr := m.Header.Get("Status"), strings.ToLower(m.Header.Get("Description"))
	switch {
	case code == "408", code == "404":
		return nil
	case code == "503":
		return nats.ErrNoResponders
	case code == "409" && strings.Contains(descr, "consumer deleted"):
		return jetstream.ErrConsumerDeleted
	case code == "409" && strings.Contains(descr, "leadership change"):
		return jetstream.ErrConsumerLeadershipChanged
	case code == "409" && strings.Contains(descr, "server shutdown"):
		return jetstream.ErrServerShutdown
	}
	return fmt.Errorf("nats: pull ended with status %s: %s", code, m.Header.Get("Description"))
}

// errMissedHeartbeats ends a pull whose server sent nothing for two heartbeats: lost with a node,
// or left at a consumer leader that moved away.
var errMissedHeartbeats = errors.New("pull request: no heartbeat from the server")

// receive takes m, read from the msgs of lane l, whose pull is open: a work batch (returned, nil
// for a status) and whether the pull ended with it, and how: it has received what it requested,
// or the server ended it (err nil for its normal ends). An ended pull frees its lane.
func (p *puller) receive(l *lane, m laneMsg) (w workMsg, ended bool, err error) {
	if isStatus(m.m) {
		l.busy = false
		return nil, true, pullStatus(m.m)
	}
	l.received++
	if l.received >= l.requested {
		l.busy = false
		ended = true
	}
	return pulledMsg{m: m.m, at: m.at, nc: p.nc}, ended, nil
}

// overdue tells whether lane l's open pull is to be given up at now (abandon): the server sent
// nothing for two heartbeats (err errMissedHeartbeats; a pull without heartbeats tells nothing
// by its silence), or the pull outlived its expiry by a second without the server's end (err
// nil, as for that end).
func (p *puller) overdue(l *lane, now time.Time) (bool, error) {
	switch {
	case l.heartbeat > 0 && now.Sub(p.lastSeen(l)) > 2*l.heartbeat:
		return true, errMissedHeartbeats
	case now.Sub(l.started) > l.expires+time.Second:
		return true, nil
	}
	return false, nil
}

// abandon gives up lane l's open pull (on a drain, a reconnect, or when overdue): the server
// keeps a pull request until it expires and would go on delivering to it, so the lane leaves its
// subscription (the server then drops the request, which has no listener left) for a new one,
// after delivering the work batches that had arrived, which count as received. A batch on its
// way at that moment is not acknowledged, so it is delivered again after its lease, as with a
// pull that ends by itself. The lane is free afterwards.
func (p *puller) abandon(l *lane, deliver func(workMsg)) {
	p.mu.Lock()
	old := l.sub
	l.sub = nil // route drops what the old subscription still brings
	p.mu.Unlock()
	if old != nil {
		_ = old.Unsubscribe()
	}
	for len(l.msgs) > 0 { // nothing is added now: route drops what comes
		if m := <-l.msgs; !isStatus(m.m) {
			l.received++
			deliver(pulledMsg{m: m.m, at: m.at, nc: p.nc})
		}
	}
	l.busy = false
	if err := p.subscribe(l); err != nil {
		// The connection is closing: the lane stays without a subscription, and a pull on
		// it fails (the shepherd backs off and ends with the connection).
		p.mu.Lock()
		l.prefix = p.nc.NewInbox() + "." // a pull on it is answered to nobody: it times out
		p.mu.Unlock()
	}
}

// workMsg is a work batch as the worker handles it.
type workMsg interface {
	Data() []byte
	Headers() nats.Header
	Subject() string
	Metadata() (*nats.MsgMetadata, error)
	Ack() error
	InProgress(reply string) error // answered on reply once the server has it
	// AckNext acknowledges the message and, in the same message, asks the consumer for more
	// (req, a pull request's JSON body), answered on reply.
	AckNext(reply string, req []byte) error
	ReceivedAt() time.Time // see lane.stamp
	TermWithReason(reason string) error
}

// pulledMsg is a work batch received on the puller's subscription; acknowledgements go to its
// reply subject, as nats.go's do.
type pulledMsg struct {
	m  *nats.Msg
	at time.Time // its receipt, from which its lease counts (lane.stamp)
	nc *nats.Conn
}

func (w pulledMsg) Data() []byte                         { return w.m.Data }
func (w pulledMsg) Headers() nats.Header                 { return w.m.Header }
func (w pulledMsg) Subject() string                      { return w.m.Subject }
func (w pulledMsg) Metadata() (*nats.MsgMetadata, error) { return w.m.Metadata() }
func (w pulledMsg) Ack() error                           { return w.nc.Publish(w.m.Reply, []byte("+ACK")) }
func (w pulledMsg) InProgress(reply string) error {
	return w.nc.PublishRequest(w.m.Reply, reply, []byte("+WPI"))
}
func (w pulledMsg) AckNext(reply string, req []byte) error {
	return w.nc.PublishRequest(w.m.Reply, reply, append([]byte("+NXT "), req...))
}
func (w pulledMsg) ReceivedAt() time.Time { return w.at }
func (w pulledMsg) TermWithReason(reason string) error {
	return w.nc.Publish(w.m.Reply, []byte("+TERM "+reason))
}
