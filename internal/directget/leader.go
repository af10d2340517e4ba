package directget

import (
	"context"
	"encoding/json"
	"fmt"

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
