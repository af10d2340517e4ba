package coordinator

import (
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/weavejobs/weave/internal/asyncpub"
	"github.com/weavejobs/weave/internal/directget"
	"github.com/weavejobs/weave/internal/wire"
)

// TestReleaseAtOnce: the loop publishes a small release whose messages are cached itself (the
// batch is in WORK with the jobs' keys and payloads, and the jobs have learned their keys and
// limits before the pipeline sees it); a release with a message not cached, or too large for one
// batch, is left to the pipeline untouched.
func TestReleaseAtOnce(t *testing.T) {
	t.Parallel()
	_, nc, js, ctx := onServer(t, "now")
	te := newTestEngine(t, Config{Namespace: "now", MaxBatchBytes: 1000})
	r := &run{c: &Coordinator{nc: nc, js: js}, e: te.e, cfg: te.e.cfg, names: te.e.names, log: zerolog.Nop(),
		payloads: newPayloads(directget.New(nc, te.e.names.JobsStream()), 1<<20), pub: asyncpub.New(nc, requestTimeout)}
	t.Cleanup(r.pub.Close)
	te.worker("w", 8)
	te.open("g")
	cache := func(id uint64, key string, maxAttempts int, payload string) {
		meta := wire.JobMeta{Group: "g", Key: key, MaxAttempts: maxAttempts}
		r.payloads.add([]wire.StoredJob{{ID: id, Meta: meta, Payload: []byte(payload)}}, 0)
	}
	a := te.job(wire.JobMeta{Group: "g", Key: "a", MaxAttempts: 7})
	b := te.job(wire.JobMeta{Group: "g", Key: "b"})
	cache(a, "a", 7, "payload a")
	cache(b, "b", 0, "payload b")
	te.e.releaseAll()
	rels := te.e.out.releases
	te.e.out.releases = nil
	if len(rels) != 1 || len(rels[0].jobs) != 2 {
		t.Fatalf("releases %+v, want one of 2 jobs", rels)
	}
	sent := r.releaseAtOnce(rels[0])
	if sent == nil || sent.err != nil {
		t.Fatalf("a cached release of 2 jobs was not published by the loop: %+v", sent)
	}
	select {
	case <-sent.f.Ok():
	case err := <-sent.f.Err():
		t.Fatal(err)
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	if ja, jb := te.e.jobs[a], te.e.jobs[b]; ja.key != "a" || ja.maxAtt != 7 || jb.key != "b" {
		t.Fatalf("learned: %q/%d and %q, want a/7 and b", ja.key, ja.maxAtt, jb.key)
	}
	if r.payloads.has(a) || r.payloads.has(b) {
		t.Fatal("released jobs' messages still cached")
	}
	ws, err := js.Stream(ctx, te.e.names.WorkStream())
	if err != nil {
		t.Fatal(err)
	}
	m, err := ws.GetLastMsgForSubject(ctx, te.e.names.WorkSubject(rels[0].pool.key))
	if err != nil {
		t.Fatal(err)
	}
	work, err := wire.DecodeWork(m.Data)
	if err != nil || len(work) != 2 || work[0].ID != a || work[0].Key != "a" || string(work[0].Payload) != "payload a" || work[1].ID != b || work[0].Attempt != 1 {
		t.Fatalf("work batch in WORK: %+v, %v", work, err)
	}

	// Not cached: the pipeline's (nothing taken, nothing learned).
	c := te.job(wire.JobMeta{Group: "g", Key: "c"})
	d := te.job(wire.JobMeta{Group: "g", Key: "d"})
	cache(c, "c", 0, "payload c")
	te.e.releaseAll()
	rel := te.e.out.releases[0]
	te.e.out.releases = nil
	if sent := r.releaseAtOnce(rel); sent != nil || !r.payloads.has(c) || te.e.jobs[c].key != "" || te.e.jobs[d].key != "" {
		t.Fatalf("a release with a job not cached: sent %+v, c cached %v, keys %q %q", sent, r.payloads.has(c), te.e.jobs[c].key, te.e.jobs[d].key)
	}

	// Too large for one batch (MaxBatchBytes 1000): the pipeline splits it.
	e := te.job(wire.JobMeta{Group: "g", Key: "e"})
	f := te.job(wire.JobMeta{Group: "g", Key: "f"})
	cache(e, "e", 0, strings.Repeat("x", 600))
	cache(f, "f", 0, strings.Repeat("y", 600))
	te.e.releaseAll()
	for _, rel := range te.e.out.releases {
		if sent := r.releaseAtOnce(rel); sent != nil {
			t.Fatalf("a release of %d jobs over MaxBatchBytes was published by the loop", len(rel.jobs))
		}
	}
}
