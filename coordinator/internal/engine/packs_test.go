package engine

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weavejobs/weave/internal/jobindex"
	"github.com/weavejobs/weave/internal/wire"
)

// pack feeds the engine a pack of jobs of group g and returns the stored message's sequence and
// what feed returned.
func (te *testEngine) pack(g string, jobs ...wire.PackJob) (uint64, []wire.StoredJob) {
	te.seq++
	got, _ := te.e.Feed(te.e.names.JobSubject(wire.GroupToken(g)), te.seq, wire.PackHeader(g, len(jobs), 0), wire.AppendPack(nil, jobs), time.Time{})
	return te.seq, got
}

// TestPackAdmission: a pack's jobs are admitted one by one under the IDs that name their place
// in it, each with its own options; the ones to release now come back for the payload cache;
// they run and end like any job. A pack that is not valid, or may not join its group, is
// rejected whole.
func TestPackAdmission(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{Prefetch: -1})
	te.worker("w", 8)
	te.open("g")
	seq, cache := te.pack("g",
		wire.PackJob{Payload: []byte("a")},
		wire.PackJob{Payload: []byte("b"), RunAt: te.now.Add(time.Hour)},
		wire.PackJob{Payload: []byte("c"), Require: []string{"gpu"}, MaxAttempts: 2},
		wire.PackJob{Payload: []byte("d"), Timeout: time.Minute},
	)
	ids := []uint64{wire.PackedJobID(seq, 0), wire.PackedJobID(seq, 1), wire.PackedJobID(seq, 2), wire.PackedJobID(seq, 3)}
	if len(cache) != 3 || cache[0].ID != ids[0] || cache[1].ID != ids[2] || cache[2].ID != ids[3] || string(cache[2].Payload) != "d" || cache[2].Meta.Timeout != time.Minute {
		t.Fatalf("feed returned %+v, want jobs 0, 2 and 3 of the pack", cache)
	}
	for i, want := range []jobindex.State{jobindex.Pending, jobindex.Delayed, jobindex.Pending, jobindex.Pending} {
		if got := te.state(ids[i]); got != want {
			t.Errorf("job %d of the pack: %v, want %v", i, got, want)
		}
	}
	if g := te.e.group("g"); g.admitted != 4 || g.lastSeq != seq {
		t.Fatalf("group admitted %d, last sequence %d", g.admitted, g.lastSeq)
	}
	// No worker holds gpu: job 2 is parked; 0 and 3 run.
	var released []uint64
	for _, j := range te.releases()[wire.PoolKey(nil)] {
		released = append(released, j.id)
	}
	slices.Sort(released)
	if !slices.Equal(released, []uint64{ids[0], ids[3]}) {
		t.Fatalf("released %v, want %v", released, []uint64{ids[0], ids[3]})
	}
	te.report(te.e.jobs[ids[0]], wire.StatusOK, "")
	if te.state(ids[0]) != jobindex.Done {
		t.Errorf("job 0 of the pack is %v after its report", te.state(ids[0]))
	}

	n := len(te.e.group("g").outcomes)
	for name, c := range map[string]struct {
		subject string
		h       nats.Header
		body    []byte
		want    string
	}{
		"malformed":               {te.e.names.JobSubject("g"), wire.PackHeader("g", 2, 0), wire.AppendPack(nil, []wire.PackJob{{}, {Require: []string{"bad name"}}}), "job 1 of the pack"},
		"a count that lies":       {te.e.names.JobSubject("g"), wire.PackHeader("g", 3, 0), wire.AppendPack(nil, []wire.PackJob{{}, {}}), "holds 2"},
		"another group's subject": {te.e.names.JobSubject(wire.GroupToken("other")), wire.PackHeader("g", 2, 0), wire.AppendPack(nil, []wire.PackJob{{}, {}}), "does not match"},
		"a group not open":        {te.e.names.JobSubject(wire.GroupToken("nope")), wire.PackHeader("nope", 2, 0), wire.AppendPack(nil, []wire.PackJob{{}, {}}), "not open"},
	} {
		admitted := te.e.stats.Admitted
		te.seq++
		if got, _ := te.e.Feed(c.subject, te.seq, c.h, c.body, time.Time{}); len(got) != 0 || te.e.stats.Admitted != admitted {
			t.Errorf("%s: admitted %d jobs", name, te.e.stats.Admitted-admitted)
		}
		if _, ok := te.e.idx.State(wire.PackedJobID(te.seq, 0)); ok {
			t.Errorf("%s: its first job is indexed", name)
		}
		if reason := te.lastRejection(); !strings.Contains(reason, c.want) {
			t.Errorf("%s: rejected for %q, want %q", name, reason, c.want)
		}
	}
	if len(te.e.group("g").outcomes) != n {
		t.Error("a rejected pack produced outcomes")
	}

	// After the seal, a pack is refused like a job.
	te.seal("g")
	if _, got := te.pack("g", wire.PackJob{}, wire.PackJob{}); len(got) != 0 || !strings.Contains(te.lastRejection(), "after the seal") {
		t.Error("a pack after the seal was not refused")
	}
}

// TestPackedIDsAgree: the index keeps a group's packed jobs apart from its others at the ID where
// the wire's packed IDs start.
func TestPackedIDsAgree(t *testing.T) {
	if got := wire.PackedJobID(0, 0); got != jobindex.PackedIDs {
		t.Fatalf("packed IDs start at %d on the wire, at %d in the index", got, uint64(jobindex.PackedIDs))
	}
}
