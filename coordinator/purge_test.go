package coordinator

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/weavejobs/weave/internal/wire"
)

// TestPurgeGroupKeepsLaterIncarnation: purging a complete group removes its messages and keeps
// those of a later incarnation of the same group ID, stored before the purge ran.
func TestPurgeGroupKeepsLaterIncarnation(t *testing.T) {
	t.Parallel()
	_, _, js, ctx := onServer(t, "purge")
	names, _ := wire.NewNames("purge")
	pub := func(subject string, h nats.Header) uint64 {
		ack, err := js.PublishMsg(ctx, &nats.Msg{Subject: subject, Header: h})
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
	gs, js1 := names.GroupSubject("g"), names.JobSubject("g")
	pub(gs, wire.GroupControl{Group: "g", Op: wire.OpOpen}.Header())
	pub(js1, wire.JobMeta{Group: "g"}.Header())
	last := pub(gs, wire.GroupControl{Group: "g", Op: wire.OpSeal, Count: 1}.Header())
	pub(gs, wire.GroupControl{Group: "g", Op: wire.OpOpen}.Header()) // the next incarnation
	next := pub(js1, wire.JobMeta{Group: "g"}.Header())
	s, err := js.Stream(ctx, names.JobsStream())
	if err != nil {
		t.Fatal(err)
	}
	if err := purgeGroup(ctx, s, names, "g", last); err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 || info.State.FirstSeq != last+1 {
		t.Fatalf("after the purge: %d messages from %d, want the 2 of the next incarnation from %d", info.State.Msgs, info.State.FirstSeq, last+1)
	}
	if _, err := s.GetMsg(ctx, next); err != nil {
		t.Fatalf("the next incarnation's job is gone: %v", err)
	}
}
