package integration_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/integration/jstest"
	"github.com/weavejobs/weave/internal/testwait"
	"github.com/weavejobs/weave/worker"
)

// TestRawProtocol publishes a group with plain NATS messages, as the nats CLI would (see
// ARCHITECTURE.md, "Publishing a group"), and waits for it with the dispatcher.
func TestRawProtocol(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.coordinator(coordinator.Config{})
	e.worker(worker.Config{Concurrency: 2}, func(ctx context.Context, j *worker.Job) ([]byte, error) {
		return append([]byte(j.Key+"="), j.Payload...), nil
	})
	js, err := jetstream.New(e.nc)
	if err != nil {
		t.Fatal(err)
	}
	pub := func(subject string, data string, hdr ...string) {
		t.Helper()
		m := nats.NewMsg(subject)
		m.Data = []byte(data)
		for i := 0; i < len(hdr); i += 2 {
			m.Header.Set(hdr[i], hdr[i+1])
		}
		// The streams may not exist until a component created them; retry until stored.
		testwait.For(t, 30*time.Second, "publish "+subject, func() bool {
			_, err := js.PublishMsg(e.ctx, m)
			return err == nil
		})
	}
	ns := e.ns
	pub(ns+".group.site-1", "", "Weave-Version", "1", "Weave-Group", "site-1", "Weave-Op", "open")
	pub(ns+".jobs.site-1", "home", "Weave-Version", "1", "Weave-Group", "site-1", "Weave-Key", "/", "Weave-Timeout", "5s")
	pub(ns+".jobs.site-1", "about", "Weave-Version", "1", "Weave-Group", "site-1", "Weave-Key", "/about", "Weave-Max-Attempts", "2")
	// Malformed: recorded as a rejection, the rest of the group runs.
	pub(ns+".jobs.site-1", "bad", "Weave-Version", "1", "Weave-Group", "site-1", "Weave-Timeout", "soon")
	pub(ns+".group.site-1", "", "Weave-Version", "1", "Weave-Group", "site-1", "Weave-Op", "seal", "Weave-Count", "3")
	res := e.wait(e.d.Attach("site-1"))
	if res.Summary.Done != 2 || len(res.Jobs) != 2 {
		t.Fatalf("summary %+v", res.Summary)
	}
	got := map[string]string{}
	for _, o := range res.Jobs {
		got[o.Key] = string(o.Result)
	}
	if got["/"] != "/=home" || got["/about"] != "/about=about" {
		t.Fatalf("results %v", got)
	}
	st, err := coordinator.QueryStatus(e.ctx, e.nc, e.ns)
	if err != nil {
		t.Fatal(err)
	}
	if st.Totals.Rejected != 1 {
		t.Fatalf("%d rejections recorded, want 1", st.Totals.Rejected)
	}
	rej, err := js.Stream(e.ctx, e.ns+"_REJECTED")
	if err != nil {
		t.Fatal(err)
	}
	m, err := rej.GetLastMsgForSubject(e.ctx, e.ns+".rejected")
	if err != nil {
		t.Fatal(err)
	}
	if m.Header.Get("Weave-Reason") == "" || m.Header.Get("Weave-Subject") != ns+".jobs.site-1" {
		t.Fatalf("rejection record %v", m.Header)
	}
}

// TestEndToEndCluster runs Weave on a 3-node JetStream cluster with replicated streams, the
// components connected to different nodes.
func TestEndToEndCluster(t *testing.T) {
	t.Parallel()
	c := jstest.NewCluster(t, 3)
	urls := c.Servers()
	ncs := make([]*nats.Conn, 3)
	for i, s := range urls {
		ncs[i] = jstest.NewConn(t, s.ClientURL())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := "c" + randomHex(4)
	streams := coordinator.StreamOptions{Replicas: 3}
	initNamespace(ctx, t, ncs[0], ns, streams) // workers and producers do not create streams
	e := &env{t: t, nc: ncs[0], ns: ns, ctx: ctx}
	co, err := coordinator.New(ncs[0], coordinator.Config{Namespace: ns, Streams: streams})
	if err != nil {
		t.Fatal(err)
	}
	e.background("coordinator", co.Run)
	w, err := worker.New(ncs[1], worker.Config{Namespace: ns, Concurrency: 4, HeartbeatInterval: 250 * time.Millisecond},
		worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) { return j.Payload, nil }))
	if err != nil {
		t.Fatal(err)
	}
	e.background("worker", w.Run)
	d, err := dispatcher.New(ncs[2], dispatcher.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	var hs []*dispatcher.Handle
	for g := range 5 {
		h, err := d.Publish(ctx, fmt.Sprint("g", g), jobs(50, nil))
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	for _, h := range hs {
		sum, err := h.WaitSummary(ctx)
		if err != nil || sum.Done != 50 {
			t.Fatalf("group %s: %+v %v", h.GroupID(), sum, err)
		}
	}
}
