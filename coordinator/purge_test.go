package coordinator

import (
	"testing"
	"time"

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

// TestSingleGroup: a single job's group, its open its one message in JOBS, is single (its message
// is deleted by sequence); one with a cancel stored after it is not (purged by subject, the cancel
// with it), nor a group of one job.
func TestSingleGroup(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{})
	id := te.job(wire.JobMeta{Group: "s", Single: true})
	canceled := te.job(wire.JobMeta{Group: "c", Single: true, RunAt: te.now.Add(time.Hour)})
	te.control(wire.GroupControl{Group: "c", Op: wire.OpCancel, Jobs: []uint64{canceled}})
	te.open("g")
	te.job(wire.JobMeta{Group: "g"})
	te.seal("g")
	if g := te.e.group("s"); !g.single() || g.openSeq != id {
		t.Fatalf("single job's group: single %v, open %d, want %d", g.single(), g.openSeq, id)
	}
	if c := te.e.group("c"); !c.complete || c.single() {
		t.Fatalf("a single job canceled by a later message: complete %v, single %v; want complete and not single", c.complete, c.single())
	}
	if te.e.group("g").single() {
		t.Fatal("a group of one job taken for a single job")
	}
}
