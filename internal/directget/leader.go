package directget

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
)

// LastBySubject reads the last message on subject (wildcards allowed) of stream from the
// stream's leader, with the message get API, not a direct get: any replica answers a direct get,
// and a lagging one answers with an older message, or none. It returns an error wrapping
// ErrNotFound when the stream holds no message on subject.
func LastBySubject(ctx context.Context, nc *nats.Conn, stream, subject string) (*Msg, error) {
	req, _ := json.Marshal(struct {
		LastBySubject string `json:"last_by_subj"`
	}{subject})
	resp, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+stream, req)
	if err != nil {
		return nil, fmt.Errorf("weave: last message of %s on %s: %w", stream, subject, err)
	}
	var got struct {
		Message *struct {
			Subject string `json:"subject"`
			Seq     uint64 `json:"seq"`
			Header  []byte `json:"hdrs"`
			Data    []byte `json:"data"`
		} `json:"message"`
		Error *struct {
			Code        int    `json:"code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &got); err != nil {
		return nil, fmt.Errorf("weave: last message of %s on %s: %w", stream, subject, err)
	}
	switch {
	case got.Error != nil && got.Error.Code == 404:
		return nil, fmt.Errorf("%w: no message of %s on %s", ErrNotFound, stream, subject)
	case got.Error != nil:
		return nil, fmt.Errorf("weave: last message of %s on %s: %s", stream, subject, got.Error.Description)
	case got.Message == nil:
		return nil, fmt.Errorf("%w: no message of %s on %s", ErrNotFound, stream, subject)
	}
	m := &Msg{Seq: got.Message.Seq, Subject: got.Message.Subject, Data: got.Message.Data}
	if len(got.Message.Header) > 0 {
		if m.Header, err = nats.DecodeHeadersMsg(got.Message.Header); err != nil {
			return nil, fmt.Errorf("weave: last message of %s on %s: headers: %w", stream, subject, err)
		}
	}
	return m, nil
}

// Last reads the last message on subject of stream with a direct get, which any replica may
// answer (a lagging one with an older message, or none: pair a write that depends on it with
// Nats-Expected-Last-Subject-Sequence). It returns an error wrapping ErrNotFound when the stream
// holds no message on subject. Unlike LastBySubject it needs only the direct get permission.
func Last(ctx context.Context, nc *nats.Conn, stream, subject string) (*Msg, error) {
	req, _ := json.Marshal(struct {
		Last string `json:"last_by_subj"`
	}{subject})
	resp, err := nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+stream, req)
	if err != nil {
		return nil, fmt.Errorf("weave: last message of %s on %s: %w", stream, subject, err)
	}
	switch status := resp.Header.Get("Status"); status {
	case "":
	case "404":
		return nil, fmt.Errorf("%w: no message of %s on %s", ErrNotFound, stream, subject)
	default:
		return nil, fmt.Errorf("weave: last message of %s on %s: status %s %s", stream, subject, status, resp.Header.Get("Description"))
	}
	seq, err := strconv.ParseUint(resp.Header.Get("Nats-Sequence"), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("weave: last message of %s on %s: sequence %q", stream, subject, resp.Header.Get("Nats-Sequence"))
	}
	return &Msg{Seq: seq, Subject: resp.Header.Get("Nats-Subject"), Header: resp.Header, Data: resp.Data}, nil
}
