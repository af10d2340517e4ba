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

// Client reads one stream. The stream must allow direct get.
type Client struct {
	nc   *nats.Conn
	subj string
}

// New returns a client for stream on nc, using the default JetStream API prefix.
func New(nc *nats.Conn, stream string) *Client {
	return &Client{nc: nc, subj: "$JS.API.DIRECT.GET." + stream}
}

// Msg is a stored message.
type Msg struct {
	Seq     uint64
	Subject string
	Header  nats.Header
	Data    []byte
}

// Get fetches the messages with the given sequences concurrently. out[i] answers seqs[i]; a
// missing message gives a nil entry and an error wrapping ErrNotFound for the first such sequence
// (the other entries are still filled in).
func (c *Client) Get(ctx context.Context, seqs []uint64) ([]*Msg, error) {
	out := make([]*Msg, len(seqs))
	errs := make([]error, len(seqs))
	var wg sync.WaitGroup
	for i, seq := range seqs {
		wg.Go(func() {
			out[i], errs[i] = c.get(ctx, seq)
		})
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

func (c *Client) get(ctx context.Context, seq uint64) (*Msg, error) {
	req, _ := json.Marshal(struct {
		Seq uint64 `json:"seq"`
	}{seq})
	resp, err := c.nc.RequestWithContext(ctx, c.subj, req)
	if err != nil {
		return nil, fmt.Errorf("weave: direct get %d: %w", seq, err)
	}
	if status := resp.Header.Get("Status"); status != "" {
		if status == "404" {
			return nil, fmt.Errorf("%w: sequence %d", ErrNotFound, seq)
		}
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
	inbox := c.nc.NewInbox()
	sub, err := c.nc.SubscribeSync(inbox)
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	for {
		req, _ := json.Marshal(struct {
			Seq   uint64 `json:"seq"`
			Batch int    `json:"batch"`
		}{from, batch})
		if err := c.nc.PublishRequest(c.subj, inbox, req); err != nil {
			return err
		}
		got, err := c.readBatch(ctx, sub, &from, fn)
		if err != nil || got == 0 {
			return err
		}
	}
}

// Next reads up to n messages on subject (wildcards allowed) with sequence ≥ from, in order,
// with one batch direct get request.
func (c *Client) Next(ctx context.Context, subject string, from uint64, n int) ([]*Msg, error) {
	inbox := c.nc.NewInbox()
	sub, err := c.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	req, _ := json.Marshal(struct {
		Seq     uint64 `json:"seq"`
		Batch   int    `json:"batch"`
		NextFor string `json:"next_by_subj"`
	}{from, n, subject})
	if err := c.nc.PublishRequest(c.subj, inbox, req); err != nil {
		return nil, err
	}
	var out []*Msg
	_, err = c.readBatch(ctx, sub, &from, func(m *Msg) error {
		out = append(out, m)
		return nil
	})
	return out, err
}

// readBatch reads the answers to one batch request until its end-of-batch marker, advancing
// *from past every message read. It returns how many messages the batch held.
func (c *Client) readBatch(ctx context.Context, sub *nats.Subscription, from *uint64, fn func(*Msg) error) (int, error) {
	got := 0
	for {
		resp, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return got, fmt.Errorf("weave: direct get batch from %d: %w", *from, err)
		}
		switch resp.Header.Get("Status") {
		case "":
		case "404": // nothing at or after *from
			return got, nil
		case "204": // end of batch
			return got, nil
		default:
			return got, fmt.Errorf("weave: direct get batch from %d: status %s %s", *from, resp.Header.Get("Status"), resp.Header.Get("Description"))
		}
		seq, err := strconv.ParseUint(resp.Header.Get("Nats-Sequence"), 10, 64)
		if err != nil {
			return got, fmt.Errorf("weave: direct get batch: bad sequence %q", resp.Header.Get("Nats-Sequence"))
		}
		got++
		*from = seq + 1
		if err := fn(&Msg{Seq: seq, Subject: resp.Header.Get("Nats-Subject"), Header: resp.Header, Data: resp.Data}); err != nil {
			return got, err
		}
	}
}
