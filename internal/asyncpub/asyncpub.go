// Package asyncpub publishes messages to JetStream streams without waiting, and resolves each
// acknowledgement on one reply subscription kept for the publisher's life.
//
// It does what nats.go's jetstream.PublishMsgAsync does for Weave's hot paths (a worker's
// reports, the coordinator's work batches and outcomes), at a fraction of the cost per message:
// a publish registers its future under a token of a shared reply prefix, and one goroutine, only
// while publishes are pending, fails those whose acknowledgement did not come within the timeout,
// instead of a timer per publish; and the acknowledgement is parsed by hand in its common forms
// ({"stream":"S","seq":N} and with "duplicate":true), with encoding/json for any other: with
// many small batches, reflection-based decoding and a timer per publish would be a noticeable
// share of Weave's CPU.
//
// A publish still unanswered when the connection reconnects fails with ErrAckLost once
// reconnectGrace has passed since the sweep saw the reconnect, rather than at its timeout: the
// server answers on the connection the publish came by, so an answer sent while that connection
// was being replaced is lost, and a caller that waited out the whole timeout held up everything
// behind it (a coordinator connected to a node that stopped paused every release for the 5 s
// timeout). The message may have been stored: callers publish again (with a message ID, stored
// once) or give the work back, as for a timeout.
//
// Other errors are jetstream's: jetstream.ErrNoStreamResponse when no stream answers (a 503
// status), jetstream.ErrAsyncPublishTimeout when nothing answers in time, a *jetstream.APIError
// when the stream refuses the message, jetstream.ErrInvalidJSAck for an answer that is not an
// acknowledgement, nats.ErrConnectionClosed for publishes pending when the publisher is closed.
package asyncpub

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrAckLost is the error of a publish whose acknowledgement did not come before the connection
// reconnected, and not within reconnectGrace after: it was lost with the connection.
var ErrAckLost = errors.New("weave: no acknowledgement: the connection reconnected since the publish")

// reconnectGrace is how long after a reconnect is seen the publishes sent before it may still be
// answered (an answer the server sent after the client subscribed again on its new connection).
const reconnectGrace = 500 * time.Millisecond

// maxSweep bounds the sweep's period, so a reconnect is seen soon whatever the timeout.
const maxSweep = 250 * time.Millisecond

// Publisher publishes on one connection. Its methods are safe for concurrent use.
type Publisher struct {
	nc      *nats.Conn
	timeout time.Duration

	mu       sync.Mutex
	sub      *nats.Subscription
	prefix   string // reply subjects are prefix + token
	next     uint64
	pending  map[string]*Future
	sweeping bool // a sweep goroutine runs
	// The connection's reconnect count when the sweep last looked, and when it saw it change.
	reconnects    uint64
	reconnectedAt time.Time
	closed        bool
	stop          chan struct{} // closed by Close: the sweep goroutine ends
}

// New returns a publisher on nc whose publishes fail with jetstream.ErrAsyncPublishTimeout when
// not acknowledged within timeout.
func New(nc *nats.Conn, timeout time.Duration) *Publisher {
	return &Publisher{nc: nc, timeout: timeout, pending: map[string]*Future{}, stop: make(chan struct{})}
}

// Future is one publish's outcome: an acknowledgement on Ok, or an error on Err (exactly one
// of them, once). It implements jetstream.PubAckFuture.
type Future struct {
	msg      *nats.Msg
	ok       chan *jetstream.PubAck
	err      chan error
	deadline time.Time
	epoch    uint64 // the connection's reconnect count when it was published
}

// Ok implements jetstream.PubAckFuture.
func (f *Future) Ok() <-chan *jetstream.PubAck { return f.ok }

// Err implements jetstream.PubAckFuture.
func (f *Future) Err() <-chan error { return f.err }

// Msg implements jetstream.PubAckFuture.
func (f *Future) Msg() *nats.Msg { return f.msg }

// Publish publishes m to its subject, with its reply subject set to one of the publisher's, and
// returns its future. An error means m was not sent.
func (p *Publisher) Publish(m *nats.Msg) (*Future, error) {
	f := &Future{msg: m, ok: make(chan *jetstream.PubAck, 1), err: make(chan error, 1), deadline: time.Now().Add(p.timeout),
		epoch: p.nc.Stats().Reconnects}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, nats.ErrConnectionClosed
	}
	if p.sub == nil {
		prefix := p.nc.NewInbox() + "."
		sub, err := p.nc.Subscribe(prefix+"*", p.resolve)
		if err != nil {
			p.mu.Unlock()
			return nil, err
		}
		p.sub, p.prefix = sub, prefix
	}
	p.next++
	tok := strconv.FormatUint(p.next, 36)
	p.pending[tok] = f
	if !p.sweeping {
		p.sweeping = true
		p.reconnects = f.epoch // reconnects while nothing was pending concern no publish
		go p.sweep()
	}
	m.Reply = p.prefix + tok
	p.mu.Unlock()
	if err := p.nc.PublishMsg(m); err != nil {
		p.mu.Lock()
		delete(p.pending, tok)
		p.mu.Unlock()
		return nil, err
	}
	return f, nil
}

// Close fails the publishes still pending with nats.ErrConnectionClosed and ends the reply
// subscription. Publish fails afterwards.
func (p *Publisher) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	close(p.stop)
	if p.sub != nil {
		_ = p.sub.Unsubscribe()
	}
	for tok, f := range p.pending {
		delete(p.pending, tok)
		f.err <- nats.ErrConnectionClosed
	}
}

// resolve hands an answer to its publish's future; an answer to a publish that is no longer
// pending (timed out, closed) is dropped.
func (p *Publisher) resolve(m *nats.Msg) {
	p.mu.Lock()
	tok := m.Subject[min(len(p.prefix), len(m.Subject)):]
	f := p.pending[tok]
	delete(p.pending, tok)
	p.mu.Unlock()
	if f == nil {
		return
	}
	if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
		f.err <- jetstream.ErrNoStreamResponse
		return
	}
	ack, err := ParseAck(m.Data)
	if err != nil {
		f.err <- err
		return
	}
	f.ok <- ack
}

// sweep fails the publishes whose acknowledgement is late, or was lost with a reconnect, every
// tenth of the timeout (at most maxSweep), while any is pending.
func (p *Publisher) sweep() {
	t := time.NewTicker(max(min(p.timeout/10, maxSweep), time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-p.stop:
			return
		}
		reconnects := p.nc.Stats().Reconnects
		now := time.Now()
		p.mu.Lock()
		if reconnects != p.reconnects {
			p.reconnects, p.reconnectedAt = reconnects, now
		}
		lostBefore := uint64(0) // publishes of an earlier connection than this are lost
		if !p.reconnectedAt.IsZero() && now.Sub(p.reconnectedAt) >= reconnectGrace {
			lostBefore = p.reconnects
		}
		for tok, f := range p.pending {
			switch {
			case f.epoch < lostBefore:
				delete(p.pending, tok)
				f.err <- ErrAckLost
			case now.After(f.deadline):
				delete(p.pending, tok)
				f.err <- jetstream.ErrAsyncPublishTimeout
			}
		}
		if len(p.pending) == 0 {
			p.sweeping = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
}

// ParseAck reads a stream's answer to a publish: the acknowledgement, or the error it holds.
// The common forms are read by hand; any other goes through encoding/json.
func ParseAck(data []byte) (*jetstream.PubAck, error) {
	if ack, ok := parseCommonAck(data); ok {
		return ack, nil
	}
	var resp struct {
		Error *jetstream.APIError `json:"error"`
		jetstream.PubAck
	}
	if err := json.Unmarshal(data, &resp); err != nil {
		return nil, jetstream.ErrInvalidJSAck
	}
	if resp.Error != nil {
		return nil, resp.Error
	}
	if resp.Stream == "" {
		return nil, jetstream.ErrInvalidJSAck
	}
	return &resp.PubAck, nil
}

// parseCommonAck reads {"stream":"S","seq":N} and {"stream":"S","seq":N,"duplicate":true},
// exactly (no space, no escape in the name, a sequence without sign or leading zero that fits
// a uint64). ok is false for anything else.
func parseCommonAck(data []byte) (ack *jetstream.PubAck, ok bool) {
	rest, found := bytes.CutPrefix(data, []byte(`{"stream":"`))
	if !found {
		return nil, false
	}
	end := bytes.IndexByte(rest, '"')
	if end <= 0 || bytes.IndexByte(rest[:end], '\\') >= 0 {
		return nil, false
	}
	stream := rest[:end]
	rest, found = bytes.CutPrefix(rest[end:], []byte(`","seq":`))
	if !found {
		return nil, false
	}
	n := 0
	for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
		n++
	}
	if n == 0 || n > 1 && rest[0] == '0' {
		return nil, false
	}
	seq, err := strconv.ParseUint(string(rest[:n]), 10, 64)
	if err != nil {
		return nil, false
	}
	switch string(rest[n:]) {
	case `}`:
		return &jetstream.PubAck{Stream: string(stream), Sequence: seq}, true
	case `,"duplicate":true}`:
		return &jetstream.PubAck{Stream: string(stream), Sequence: seq, Duplicate: true}, true
	}
	return nil, false
}
