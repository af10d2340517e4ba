package coordinator

import (
	"strings"
	"testing"
	"time"

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
	tl := newTestLoop(t, Config{Namespace: "now", MaxBatchBytes: 1000})
	r := tl.run(&Coordinator{nc: nc, js: js})
	r.payloads, r.pub = newPayloads(directget.New(nc, tl.names.JobsStream()), 1<<20), asyncpub.New(nc, requestTimeout)
	t.Cleanup(r.pub.Close)
	tl.worker("w", 8)
	tl.open("g")
	// learned is the key and attempt limit the engine knows of job id.
	learned := func(id uint64) (string, int) {
		jl := tl.e.Inspect(wire.InspectRequest{Job: id}).Job
		if jl == nil {
			t.Fatalf("job %d unknown", id)
		}
		return jl.Key, jl.MaxAttempts
	}
	cache := func(id uint64, key string, maxAttempts int, payload string) {
		meta := wire.JobMeta{Group: "g", Key: key, MaxAttempts: maxAttempts}
		r.payloads.add([]wire.StoredJob{{ID: id, Meta: meta, Payload: []byte(payload)}}, 0)
	}
	a := tl.job(wire.JobMeta{Group: "g", Key: "a", MaxAttempts: 7}, time.Time{})
	b := tl.job(wire.JobMeta{Group: "g", Key: "b"}, time.Time{})
	cache(a, "a", 7, "payload a")
	cache(b, "b", 0, "payload b")
	rels := tl.releases()
	if len(rels) != 1 || len(rels[0].Jobs) != 2 {
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
	if ka, ma := learned(a); ka != "a" || ma != 7 {
		t.Fatalf("learned: %q/%d, want a/7", ka, ma)
	}
	if kb, _ := learned(b); kb != "b" {
		t.Fatalf("learned: %q, want b", kb)
	}
	if r.payloads.has(a) || r.payloads.has(b) {
		t.Fatal("released jobs' messages still cached")
	}
	ws, err := js.Stream(ctx, tl.names.WorkStream())
	if err != nil {
		t.Fatal(err)
	}
	m, err := ws.GetLastMsgForSubject(ctx, tl.names.WorkSubject(rels[0].Pool))
	if err != nil {
		t.Fatal(err)
	}
	work, err := wire.DecodeWork(m.Data)
	if err != nil || len(work) != 2 || work[0].ID != a || work[0].Key != "a" || string(work[0].Payload) != "payload a" || work[1].ID != b || work[0].Attempt != 1 {
		t.Fatalf("work batch in WORK: %+v, %v", work, err)
	}

	// Not cached: the pipeline's (nothing taken, nothing learned).
	c := tl.job(wire.JobMeta{Group: "g", Key: "c"}, time.Time{})
	d := tl.job(wire.JobMeta{Group: "g", Key: "d"}, time.Time{})
	cache(c, "c", 0, "payload c")
	rel := tl.releases()[0]
	kc, _ := learned(c)
	kd, _ := learned(d)
	if sent := r.releaseAtOnce(rel); sent != nil || !r.payloads.has(c) || kc != "" || kd != "" {
		t.Fatalf("a release with a job not cached: sent %+v, c cached %v, keys %q %q", sent, r.payloads.has(c), kc, kd)
	}

	// Too large for one batch (MaxBatchBytes 1000): the pipeline splits it.
	e := tl.job(wire.JobMeta{Group: "g", Key: "e"}, time.Time{})
	f := tl.job(wire.JobMeta{Group: "g", Key: "f"}, time.Time{})
	cache(e, "e", 0, strings.Repeat("x", 600))
	cache(f, "f", 0, strings.Repeat("y", 600))
	for _, rel := range tl.releases() {
		if sent := r.releaseAtOnce(rel); sent != nil {
			t.Fatalf("a release of %d jobs over MaxBatchBytes was published by the loop", len(rel.Jobs))
		}
	}
}
