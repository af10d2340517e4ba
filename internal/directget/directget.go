// Package directget reads messages from a stream by sequence with JetStream's direct get API,
// many requests in flight at once. The coordinator uses it to fetch the payloads of the jobs it
// releases, so it never holds the payloads of the backlog.
package directget

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/nats-io/nats.go"
)

// ErrNotFound reports a sequence that is not (or no longer) in the stream.
var ErrNotFound = errors.New("weave: message not found")

// Client reads one stream. The stream must allow direct get. Batch requests share one reply
// subscription (opened on first use, closed by Close), and each request gets its own reply
// subject under it, so no request pays for a subscription of its own.
type Client struct {
	nc   *nats.Conn
	subj string

	mu      sync.Mutex
	sub     *nats.Subscription
	prefix  string // reply subjects are prefix.<token>
	next    uint64
	waiting map[string]chan *nats.Msg // by token; written by the subscription's callback
}

// New returns a client for stream on nc, using the default JetStream API prefix.
func New(nc *nats.Conn, stream string) *Client {
	return &Client{nc: nc, subj: "$JS.API.DIRECT.GET." + stream, waiting: map[string]chan *nats.Msg{}}
}

// Close ends the shared reply subscription. The client must not be used afterwards.
func (c *Client) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sub != nil {
		_ = c.sub.Unsubscribe()
		c.sub = nil
	}
}

// open registers a batch request expecting up to n messages, returning its reply subject, the
// channel its answers arrive on, and a function to call when done with it.
func (c *Client) open(n int) (string, chan *nats.Msg, func(), error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sub == nil {
		c.prefix = c.nc.NewInbox()
		sub, err := c.nc.Subscribe(c.prefix+".*", c.dispatch)
		if err != nil {
			return "", nil, nil, err
		}
		c.sub = sub
	}
	c.next++
	tok := strconv.FormatUint(c.next, 36)
	ch := make(chan *nats.Msg, n+2) // the messages, then the end-of-batch or error status
	c.waiting[tok] = ch
	return c.prefix + "." + tok, ch, func() {
		c.mu.Lock()
		delete(c.waiting, tok)
		c.mu.Unlock()
	}, nil
}

// dispatch routes an answer to its request. The channel holds a whole batch, so it never blocks;
// answers to a request that gave up are dropped.
func (c *Client) dispatch(m *nats.Msg) {
	c.mu.Lock()
	ch := c.waiting[m.Subject[len(c.prefix)+1:]]
	c.mu.Unlock()
	if ch != nil {
		select {
		case ch <- m:
		default:
		}
	}
}

// Msg is a stored message.
type Msg struct {
	Seq     uint64
	Subject string
	Header  nats.Header
	Data    []byte
}

// maxParallelGets bounds the direct get requests one Get has in flight.
const maxParallelGets = 64

// Get fetches the messages with the given sequences, up to maxParallelGets requests at once.
// out[i] answers seqs[i]; a missing message gives a nil entry and an error wrapping ErrNotFound
// for the first such sequence (the other entries are still filled in).
func (c *Client) Get(ctx context.Context, seqs []uint64) ([]*Msg, error) {
	out, errs := c.GetEach(ctx, seqs)
	return out, errors.Join(errs...)
}

// GetEach is Get with an error per sequence: errs[i] is nil when out[i] was read, wraps
// ErrNotFound when the message is not in the stream, and is another error when the request
// failed (no stream leader answering: nats.ErrNoResponders, a timeout): then the message may
// well be there.
//
// The requests are pipelined on the shared reply subscription, up to maxParallelGets in flight,
// with no goroutine or subscription per request.
func (c *Client) GetEach(ctx context.Context, seqs []uint64) (out []*Msg, errs []error) {
	out = make([]*Msg, len(seqs))
	errs = make([]error, len(seqs))
	type inFlight struct {
		i    int
		ch   chan *nats.Msg
		done func()
	}
	window := make([]inFlight, 0, min(len(seqs), maxParallelGets))
	var req []byte
	for next := 0; next < len(seqs) || len(window) > 0; {
		for next < len(seqs) && len(window) < maxParallelGets && ctx.Err() == nil {
			i := next
			next++
			reply, ch, done, err := c.open(0)
			if err == nil {
				req = append(strconv.AppendUint(append(req[:0], `{"seq":`...), seqs[i], 10), '}')
				if err = c.nc.PublishRequest(c.subj, reply, req); err != nil {
					done()
				}
			}
			if err != nil {
				errs[i] = fmt.Errorf("weave: direct get %d: %w", seqs[i], err)
				continue
			}
			window = append(window, inFlight{i, ch, done})
		}
		if len(window) == 0 {
			for ; next < len(seqs); next++ { // ctx ended before these were asked
				errs[next] = fmt.Errorf("weave: direct get %d: %w", seqs[next], ctx.Err())
			}
			break
		}
		f := window[0]
		window = window[1:]
		select {
		case m := <-f.ch:
			out[f.i], errs[f.i] = answer(seqs[f.i], m)
		case <-ctx.Done():
			errs[f.i] = fmt.Errorf("weave: direct get %d: %w", seqs[f.i], ctx.Err())
		}
		f.done()
	}
	return out, errs
}

// answer reads a direct get's response to the request for seq.
func answer(seq uint64, resp *nats.Msg) (*Msg, error) {
	switch status := resp.Header.Get("Status"); status {
	case "":
	case "404":
		return nil, fmt.Errorf("%w: sequence %d", ErrNotFound, seq)
	case "503": // no responders: the stream has no leader able to answer yet
		return nil, fmt.Errorf("weave: direct get %d: %w", seq, nats.ErrNoResponders)
	default:
		return nil, fmt.Errorf("weave: direct get %d: status %s %s", seq, status, resp.Header.Get("Description"))
	}
	got, err := strconv.ParseUint(resp.Header.Get("Nats-Sequence"), 10, 64)
	if err != nil || got != seq {
		return nil, fmt.Errorf("weave: direct get %d: answered sequence %q", seq, resp.Header.Get("Nats-Sequence"))
	}
	return &Msg{Seq: seq, Subject: resp.Header.Get("Nats-Subject"), Header: resp.Header, Data: resp.Data}, nil
}

// Scan reads every message of the stream from sequence from onwards, up to batch messages per
// request, calling fn for each in order. It uses batch direct get, so it needs no consumer (work
// queue streams forbid overlapping ones).
func (c *Client) Scan(ctx context.Context, from uint64, batch int, fn func(*Msg) error) error {
	for {
		got, err := c.batch(ctx, from, batch, "", func(m *Msg) error {
			from = m.Seq + 1
			return fn(m)
		})
		if err != nil || got == 0 {
			return err
		}
	}
}

// Next reads up to n messages on subject (wildcards allowed) with sequence ≥ from, in order,
// with one batch direct get request.
func (c *Client) Next(ctx context.Context, subject string, from uint64, n int) ([]*Msg, error) {
	return c.NextUpTo(ctx, subject, from, n, 0)
}

// NextUpTo is Next that also stops once the messages read hold maxBytes (subjects, headers and
// bodies): the server sends at least one, and stops after the one that reaches maxBytes. 0 is the
// server's limit (its max_pending, 64 MiB by default): a reader of messages of any size bounds
// what one page holds with it.
func (c *Client) NextUpTo(ctx context.Context, subject string, from uint64, n, maxBytes int) ([]*Msg, error) {
	var out []*Msg
	_, err := c.batchUpTo(ctx, from, n, maxBytes, subject, func(m *Msg) error {
		out = append(out, m)
		return nil
	})
	return out, err
}

// batch sends one batch direct get request (from sequence from, up to n messages, on subject if
// not empty) and passes each message to fn in order. It returns how many messages came.
func (c *Client) batch(ctx context.Context, from uint64, n int, subject string, fn func(*Msg) error) (int, error) {
	return c.batchUpTo(ctx, from, n, 0, subject, fn)
}

// batchUpTo is batch with a bound on the bytes of the messages, 0 for the server's (NextUpTo).
func (c *Client) batchUpTo(ctx context.Context, from uint64, n, maxBytes int, subject string, fn func(*Msg) error) (int, error) {
	reply, ch, done, err := c.open(n)
	if err != nil {
		return 0, err
	}
	defer done()
	req, _ := json.Marshal(struct {
		Seq      uint64 `json:"seq"`
		Batch    int    `json:"batch"`
		MaxBytes int    `json:"max_bytes,omitempty"`
		NextFor  string `json:"next_by_subj,omitempty"`
	}{from, n, maxBytes, subject})
	if err := c.nc.PublishRequest(c.subj, reply, req); err != nil {
		return 0, err
	}
	return c.readBatch(ctx, ch, from, fn)
}

// readBatch reads the answers to one batch request until its end-of-batch marker.
func (c *Client) readBatch(ctx context.Context, ch <-chan *nats.Msg, from uint64, fn func(*Msg) error) (int, error) {
	got := 0
	for {
		var resp *nats.Msg
		select {
		case resp = <-ch:
		case <-ctx.Done():
			return got, fmt.Errorf("weave: direct get batch from %d: %w", from, ctx.Err())
		}
		switch resp.Header.Get("Status") {
		case "":
		case "404": // nothing at or after from
			return got, nil
		case "204": // end of batch
			return got, nil
		case "503": // no responders: the stream has no leader able to answer yet
			return got, fmt.Errorf("weave: direct get batch from %d: %w", from, nats.ErrNoResponders)
		default:
			return got, fmt.Errorf("weave: direct get batch from %d: status %s %s", from, resp.Header.Get("Status"), resp.Header.Get("Description"))
		}
		seq, err := strconv.ParseUint(resp.Header.Get("Nats-Sequence"), 10, 64)
		if err != nil {
			return got, fmt.Errorf("weave: direct get batch: bad sequence %q", resp.Header.Get("Nats-Sequence"))
		}
		got++
		if err := fn(&Msg{Seq: seq, Subject: resp.Header.Get("Nats-Subject"), Header: resp.Header, Data: resp.Data}); err != nil {
			return got, err
		}
	}
}
