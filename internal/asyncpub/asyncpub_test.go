package asyncpub

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/integration/jstest"
	"github.com/weavejobs/weave/internal/leakcheck"
)

func TestMain(m *testing.M) {
	leakcheck.Main(m) // the sweep goroutine ends with Close, or once nothing is pending
}

func TestParseAck(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want *jetstream.PubAck
		err  error
	}{
		{`{"stream":"S","seq":22}`, &jetstream.PubAck{Stream: "S", Sequence: 22}, nil},
		{`{"stream":"NS_EVENTS","seq":18446744073709551615,"duplicate":true}`, &jetstream.PubAck{Stream: "NS_EVENTS", Sequence: 1<<64 - 1, Duplicate: true}, nil},
		{`{"stream":"S","domain":"hub","seq":3}`, &jetstream.PubAck{Stream: "S", Domain: "hub", Sequence: 3}, nil},
		{`{"stream": "S", "seq": 4}`, &jetstream.PubAck{Stream: "S", Sequence: 4}, nil},
		{`{"stream":"S\u003c","seq":5}`, &jetstream.PubAck{Stream: "S<", Sequence: 5}, nil},
		{`{"error":{"code":400,"err_code":10060,"description":"expected stream does not match"},"stream":"S","seq":0}`, nil, &jetstream.APIError{Code: 400, ErrorCode: 10060, Description: "expected stream does not match"}},
		{`{"stream":"","seq":1}`, nil, jetstream.ErrInvalidJSAck},
		{`{"stream":"S","seq":18446744073709551616}`, nil, jetstream.ErrInvalidJSAck},
		{`{"seq":1}`, nil, jetstream.ErrInvalidJSAck},
		{`not json`, nil, jetstream.ErrInvalidJSAck},
		{``, nil, jetstream.ErrInvalidJSAck},
	} {
		got, err := ParseAck([]byte(tc.in))
		if !reflect.DeepEqual(got, tc.want) || !reflect.DeepEqual(err, tc.err) && !errors.Is(err, tc.err) {
			t.Errorf("ParseAck(%s) = %+v, %v; want %+v, %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

// FuzzParseAck: the hand-read forms agree with encoding/json on everything they accept, and
// ParseAck never panics.
func FuzzParseAck(f *testing.F) {
	for _, s := range []string{`{"stream":"S","seq":22}`, `{"stream":"S","seq":1,"duplicate":true}`, `{"stream":"S","seq":01}`, `{"error":{"code":503}}`, `{"stream":"S","seq":1,"duplicate":false}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ack, err := ParseAck(data)
		if (ack == nil) == (err == nil) {
			t.Fatalf("ParseAck(%q) = %v, %v: want exactly one", data, ack, err)
		}
		fast, ok := parseCommonAck(data)
		if !ok {
			return
		}
		var slow jetstream.PubAck
		if err := json.Unmarshal(data, &slow); err != nil || !reflect.DeepEqual(*fast, slow) {
			t.Fatalf("parseCommonAck(%q) = %+v; encoding/json: %+v, %v", data, *fast, slow, err)
		}
	})
}

func TestPublisher(t *testing.T) {
	t.Parallel()
	srv := jstest.New(t)
	nc := jstest.NewConn(t, srv.ClientURL())
	js := jstest.NewJetStream(t, nc)
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	// Someone listens on "quiet" and never answers: the publish times out.
	if _, err := nc.Subscribe("quiet", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	p := New(nc, 200*time.Millisecond)
	defer p.Close()

	result := func(f *Future) (*jetstream.PubAck, error) {
		t.Helper()
		select {
		case ack := <-f.Ok():
			return ack, nil
		case err := <-f.Err():
			return nil, err
		case <-time.After(10 * time.Second):
			t.Fatal("the future never resolved")
			return nil, nil
		}
	}
	publish := func(m *nats.Msg) *Future {
		t.Helper()
		f, err := p.Publish(m)
		if err != nil {
			t.Fatal(err)
		}
		if f.Msg() != m {
			t.Fatal("the future holds another message")
		}
		return f
	}

	// Acknowledged, each with its sequence, many in flight at once.
	var fs []*Future
	for range 100 {
		fs = append(fs, publish(&nats.Msg{Subject: "s.a", Data: []byte("x")}))
	}
	for i, f := range fs {
		if ack, err := result(f); err != nil || ack.Stream != "S" || ack.Sequence != uint64(i+1) {
			t.Fatalf("publish %d: %+v, %v", i, ack, err)
		}
	}
	// A duplicate by message ID.
	for i, want := range []bool{false, true} {
		m := &nats.Msg{Subject: "s.b", Header: nats.Header{jetstream.MsgIDHeader: []string{"once"}}}
		if ack, err := result(publish(m)); err != nil || ack.Duplicate != want {
			t.Fatalf("publish %d of a message ID: %+v, %v", i, ack, err)
		}
	}
	// Refused by the stream.
	m := &nats.Msg{Subject: "s.c", Header: nats.Header{jetstream.ExpectedStreamHeader: []string{"OTHER"}}}
	var apiErr *jetstream.APIError
	if _, err := result(publish(m)); !errors.As(err, &apiErr) || apiErr.Code != 400 {
		t.Fatalf("a publish the stream refuses: %v", err)
	}
	// No stream.
	if _, err := result(publish(&nats.Msg{Subject: "nowhere"})); !errors.Is(err, jetstream.ErrNoStreamResponse) {
		t.Fatalf("a publish no stream takes: %v, want %v", err, jetstream.ErrNoStreamResponse)
	}
	// No answer.
	start := time.Now()
	if _, err := result(publish(&nats.Msg{Subject: "quiet"})); !errors.Is(err, jetstream.ErrAsyncPublishTimeout) {
		t.Fatalf("a publish nobody answers: %v, want %v", err, jetstream.ErrAsyncPublishTimeout)
	}
	if took := time.Since(start); took < 200*time.Millisecond {
		t.Fatalf("timed out after %v, before the timeout", took)
	}
	// Pending at Close.
	f := publish(&nats.Msg{Subject: "quiet"})
	p.Close()
	if _, err := result(f); !errors.Is(err, nats.ErrConnectionClosed) {
		t.Fatalf("a publish pending at Close: %v", err)
	}
	if _, err := p.Publish(&nats.Msg{Subject: "s.a"}); !errors.Is(err, nats.ErrConnectionClosed) {
		t.Fatalf("Publish after Close: %v", err)
	}
}

// TestAckLostWithReconnect: a publish whose answer had not come when the connection was replaced
// fails with ErrAckLost soon after the reconnect, not at its timeout (a minute here); a publish on
// the new connection is answered as usual.
func TestAckLostWithReconnect(t *testing.T) {
	t.Parallel()
	srv := jstest.New(t)
	proxy, err := jstest.StartProxy(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	// Someone listens on "quiet" and never answers, as a stream whose answer is lost.
	other := jstest.NewConn(t, srv.ClientURL())
	if _, err := other.Subscribe("quiet", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	if err := other.Flush(); err != nil {
		t.Fatal(err)
	}
	js := jstest.NewJetStream(t, other)
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	reconnected := make(chan struct{}, 1)
	nc, err := nats.Connect(proxy.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond),
		nats.ReconnectHandler(func(*nats.Conn) {
			select {
			case reconnected <- struct{}{}:
			default: // a second reconnect: the first is what the test waits for
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	p := New(nc, time.Minute)
	defer p.Close()

	lost, err := p.Publish(&nats.Msg{Subject: "quiet"})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	proxy.Cut()
	select {
	case <-reconnected:
	case <-time.After(10 * time.Second):
		t.Fatal("no reconnect through the proxy")
	}
	after, err := p.Publish(&nats.Msg{Subject: "s.a"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ack := <-after.Ok():
		if ack.Stream != "S" {
			t.Fatalf("a publish after the reconnect: %+v", ack)
		}
	case err := <-after.Err():
		t.Fatalf("a publish after the reconnect: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("a publish after the reconnect: no answer")
	}
	select {
	case ack := <-lost.Ok():
		t.Fatalf("answered: %+v", ack)
	case err := <-lost.Err():
		if !errors.Is(err, ErrAckLost) {
			t.Fatalf("a publish pending at the reconnect: %v, want %v", err, ErrAckLost)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a publish pending at the reconnect still waits 10s later (its timeout is a minute)")
	}
}
