package engine

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/weavejobs/weave/internal/jobindex"
	"github.com/weavejobs/weave/internal/journal"
	"github.com/weavejobs/weave/internal/wire"
	"github.com/weavejobs/weave/spreader"
)

// testEngine drives an engine without NATS: the test plays the streams and the workers.
type testEngine struct {
	t     *testing.T
	e     *Engine
	seq   uint64 // last JOBS sequence
	evSeq uint64 // last EVENTS sequence
	now   time.Time
}

func newTestEngine(t *testing.T, cfg Config) *testEngine {
	t.Helper()
	te := &testEngine{t: t, now: time.Unix(1_700_000_000, 0)}
	cfg.Now = func() time.Time { return te.now }
	names, _ := wire.NewNames("weave")
	e, err := New(withTestDefaults(cfg), names, 1)
	if err != nil {
		t.Fatal(err)
	}
	e.EndReplay(nil, te.now)
	te.e = e
	return te
}

// withTestDefaults gives cfg's unset fields the coordinator's defaults (coordinator.Config),
// as the coordinator hands the engine its configuration.
func withTestDefaults(cfg Config) Config {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	dur := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&cfg.MaxAttempts, 5)
	def(&cfg.MaxBatch, 64)
	def(&cfg.HeartbeatMisses, 3)
	dur(&cfg.RetryBase, time.Second)
	dur(&cfg.RetryMax, 5*time.Minute)
	dur(&cfg.AbandonAfter, 5*time.Minute)
	dur(&cfg.LearnAffinity, time.Minute)
	dur(&cfg.OutcomeLinger, 10*time.Millisecond)
	dur(&cfg.ResultRetention, 24*time.Hour)
	return cfg
}

// restarted returns a new engine of the next epoch with te's configuration, in replay: what a
// coordinator taking over starts from. The test feeds it the streams, then ends its replay.
func (te *testEngine) restarted() *Engine {
	te.t.Helper()
	e, err := New(te.e.cfg, te.e.names, te.e.epoch+1)
	if err != nil {
		te.t.Fatal(err)
	}
	return e
}

// joinAny has a worker "w" of 4 slots, holding nothing, heartbeat to e at now.
func joinAny(e *Engine, now time.Time) {
	e.Heartbeat(e.names.HeartbeatSubject("any", "w"), wire.Heartbeat{Version: wire.Version, Worker: "w", Pool: "any", Concurrency: 4, IntervalMS: 1000}, now)
}

func (te *testEngine) control(c wire.GroupControl) uint64 {
	te.seq++
	te.e.Feed(te.e.names.GroupSubject(wire.GroupToken(c.Group)), te.seq, c.Header(), nil, time.Time{})
	return te.seq
}

func (te *testEngine) open(g string) { te.control(wire.GroupControl{Group: g, Op: wire.OpOpen}) }
func (te *testEngine) seal(g string) { te.control(wire.GroupControl{Group: g, Op: wire.OpSeal}) }

func (te *testEngine) job(m wire.JobMeta) uint64 {
	te.seq++
	te.e.Feed(te.e.names.JobSubject(wire.GroupToken(m.Group)), te.seq, m.Header(), nil, time.Time{})
	return te.seq
}

func (te *testEngine) worker(id string, conc int, resources ...string) {
	pool := wire.PoolKey(resources)
	hb := wire.Heartbeat{Version: wire.Version, Worker: id, Pool: pool, Resources: resources, Concurrency: conc, Sleeping: conc, IntervalMS: 1000, Run: "run-" + id}
	if ref := te.e.Heartbeat(te.e.names.HeartbeatSubject(pool, id), hb, te.now); ref.Reason != "" {
		te.t.Fatalf("heartbeat of %s refused: %s", id, ref.Reason)
	}
}

// releases runs a release decision and returns the released jobs per pool key.
func (te *testEngine) releases() map[string][]*job {
	te.e.ReleaseAll()
	got := map[string][]*job{}
	for _, r := range te.e.out.releases {
		got[r.pool.key] = append(got[r.pool.key], r.jobs...)
		for _, j := range r.jobs {
			te.e.Learn(j.id, &wire.JobMeta{Key: fmt.Sprint("key-", j.id)})
		}
	}
	te.e.out.releases = nil
	return got
}

// poolOf is the pool a running job was released to, as its worker's report subject names it.
func poolOf(j *job) string {
	if j.pool != nil {
		return j.pool.key
	}
	return "any"
}

func (te *testEngine) report(j *job, st wire.Status, data string) {
	te.evSeq++
	r := proven(te.e, poolOf(j), j.rel, wire.Report{ID: j.id, Attempt: j.attempt, Status: st, Data: []byte(data)})
	te.e.Report(poolOf(j), "w", te.evSeq, r, te.now)
	te.e.retention.noteEvent(te.evSeq)
}

// proven returns r with the proof of its attempt's release to pool after the returned report at
// rel (0: the attempt's first release), as the worker that ran it echoes it.
func proven(e *Engine, pool string, rel uint64, r wire.Report) wire.Report {
	r.Proof = e.key.Proof(pool, r.ID, r.Attempt, rel)
	return r
}

func (te *testEngine) state(id uint64) jobindex.State {
	st, ok := te.e.idx.State(id)
	if !ok {
		te.t.Fatalf("job %d unknown", id)
	}
	return st
}

func TestReleaseFollowsCapacity(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{})
	te.open("g")
	for range 10 {
		te.job(wire.JobMeta{Group: "g"})
	}
	te.seal("g")
	if got := te.releases(); len(got) != 0 {
		t.Fatalf("released %v with no workers", got)
	}
	te.worker("w1", 3)
	got := te.releases()["any"]
	if len(got) != 3+1 {
		t.Fatalf("released %d jobs to 3 free slots and 1 prefetch place (nothing measured yet)", len(got))
	}
	if again := te.releases(); len(again) != 0 {
		t.Fatalf("released beyond capacity: %v", again)
	}
	te.report(got[0], wire.StatusOK, "r")
	if n := len(te.releases()["any"]); n != 1 {
		t.Fatalf("one completion freed %d releases, want 1", n)
	}
	if te.state(got[0].id) != jobindex.Done {
		t.Fatalf("reported job is %v", te.state(got[0].id))
	}
}

func TestGroupCompletesWithSummary(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{})
	te.worker("w1", 8)
	te.open("g")
	te.job(wire.JobMeta{Group: "g", Key: "a"})
	te.job(wire.JobMeta{Group: "g", Key: "b"})
	te.seal("g")
	rel := te.releases()["any"]
	te.report(rel[0], wire.StatusOK, "one")
	if len(te.e.out.summaries) != 0 {
		t.Fatal("summary before every job is terminal")
	}
	te.report(rel[1], wire.StatusPermanent, "bad input")
	if len(te.e.out.summaries) != 1 {
		t.Fatalf("no summary after the last job")
	}
	g := te.e.out.summaries[0]
	if g.done != 1 || g.failed != 1 || len(g.outcomes) != 2 || string(g.outcomes[1].Data) != "bad input" {
		t.Fatalf("group %+v outcomes %+v", g, g.outcomes)
	}
}

func TestEmptySealedGroupCompletes(t *testing.T) {
	t.Parallel()
	var logs strings.Builder
	te := newTestEngine(t, Config{Logger: zerolog.New(&logs).Level(zerolog.WarnLevel)})
	te.open("empty")
	te.seal("empty")
	if len(te.e.out.summaries) != 1 {
		t.Fatal("an empty sealed group did not complete")
	}
	te.e.forget(te.e.out.summaries[0])
	if logs.Len() > 0 {
		t.Fatalf("forgetting a complete empty group logged: %s", logs.String())
	}
}

func TestRetryWithBackoff(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{MaxAttempts: 3, RetryBase: time.Second, RetryMax: time.Minute, Prefetch: -1})
	te.worker("w1", 1)
	te.open("g")
	id := te.job(wire.JobMeta{Group: "g"})
	te.seal("g")
	for attempt := uint32(1); attempt <= 3; attempt++ {
		rel := te.releases()["any"]
		if len(rel) != 1 || rel[0].attempt != attempt {
			t.Fatalf("attempt %d: released %+v", attempt, rel)
		}
		te.report(rel[0], wire.StatusError, "boom")
		if attempt == 3 {
			break
		}
		if te.state(id) != jobindex.RetryWait {
			t.Fatalf("after failed attempt %d job is %v", attempt, te.state(id))
		}
		if len(te.releases()) != 0 {
			t.Fatal("a retry-waiting job was released before its time")
		}
		due := te.e.retries.nextDue()
		if ceiling := te.now.Add(time.Second << (attempt - 1)); due.After(ceiling) || due.Before(te.now) {
			t.Fatalf("retry at %v, outside [now, %v]", due, ceiling)
		}
		if len(te.e.out.Retries) != 1 {
			t.Fatalf("retry not journaled: %+v", te.e.out.Retries)
		}
		te.e.out.Retries = nil
		te.now = due
		te.e.Tick(te.now)
	}
	if te.state(id) != jobindex.Failed {
		t.Fatalf("after MaxAttempts the job is %v", te.state(id))
	}
}

func TestRetryAfterRequested(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{})
	te.worker("w1", 1)
	te.open("g")
	te.job(wire.JobMeta{Group: "g"})
	rel := te.releases()["any"]
	te.e.Report(poolOf(rel[0]), "w", 1, wire.Report{ID: rel[0].id, Attempt: 1, Status: wire.StatusError, RetryAfter: 42 * time.Second}, te.now)
	if due := te.e.retries.nextDue(); due != te.now.Add(42*time.Second) {
		t.Fatalf("retry at %v, want now+42s", due)
	}
}

func TestAffinity(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{Feeders: 10})
	te.worker("plain", 4)
	te.open("g")
	need := te.job(wire.JobMeta{Group: "g", Require: []string{"gpu"}})
	te.seal("g")
	if got := te.releases(); len(got) != 0 {
		t.Fatalf("a job requiring gpu went to %v", got)
	}
	te.worker("gpu-box", 1, "gpu")
	got := te.releases()
	if len(got[wire.PoolKey([]string{"gpu"})]) != 1 || got[wire.PoolKey([]string{"gpu"})][0].id != need {
		t.Fatalf("required job not released to the holder: %v", got)
	}
}

func TestPreferenceGoesToFreeHolderElseAnywhere(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{Feeders: 10})
	cache := wire.PoolKey([]string{"cache"})
	te.worker("plain", 4)
	te.worker("cached", 1, "cache")
	for i := range 3 {
		g := fmt.Sprint("g", i)
		te.open(g)
		te.job(wire.JobMeta{Group: g, Prefer: []string{"cache"}})
		te.seal(g)
	}
	got := te.releases()
	if len(got[cache]) != 1 || len(got["any"]) != 2 {
		t.Fatalf("want 1 job on the cache holder and 2 elsewhere, got %d and %d", len(got[cache]), len(got["any"]))
	}
}

// TestSpreadOneJobPerGroup is the spread property: with F = slots + 1 and least in-flight, no
// group has two jobs in flight while at least F groups remain.
func TestSpreadOneJobPerGroup(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{Feeders: 5, Policy: spreader.LeastInFlight})
	te.worker("w", 4)
	for g := range 50 {
		name := fmt.Sprint("g", g)
		te.open(name)
		for range 20 {
			te.job(wire.JobMeta{Group: name})
		}
		te.seal(name)
	}
	running := map[*job]bool{}
	for step := 0; ; step++ {
		for _, j := range te.releases()["any"] {
			running[j] = true
		}
		if len(running) == 0 {
			break
		}
		perGroup := map[*group]int{}
		for j := range running {
			perGroup[j.g]++
		}
		if te.e.groups.table.len() >= 5 {
			for g, n := range perGroup {
				if n > 1 {
					t.Fatalf("step %d: group %s has %d jobs in flight with %d groups left", step, g.id, n, te.e.groups.table.len())
				}
			}
		}
		// End the oldest running job.
		var oldest *job
		for j := range running {
			if oldest == nil || j.id < oldest.id {
				oldest = j
			}
		}
		te.report(oldest, wire.StatusOK, "")
		delete(running, oldest)
		for _, g := range te.e.out.summaries {
			te.e.forget(g)
		}
		te.e.out.summaries = nil
	}
	if te.e.idx.Count(jobindex.Done) != 0 && te.e.groups.table.len() != 0 {
		t.Fatalf("%d groups left incomplete", te.e.groups.table.len())
	}
}

func TestCancelGroup(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{Prefetch: -1})
	te.worker("w", 1)
	te.open("g")
	a := te.job(wire.JobMeta{Group: "g"})
	b := te.job(wire.JobMeta{Group: "g"})
	te.seal("g")
	rel := te.releases()["any"]
	te.control(wire.GroupControl{Group: "g", Op: wire.OpCancel})
	if te.state(b) != jobindex.Canceled {
		t.Fatalf("queued job is %v after cancel", te.state(b))
	}
	if len(te.e.out.Cancels) != 1 || te.e.out.Cancels[0] != a {
		t.Fatalf("running job not told to cancel: %v", te.e.out.Cancels)
	}
	te.report(rel[0], wire.StatusCanceled, "context canceled")
	if te.state(a) != jobindex.Canceled || len(te.e.out.summaries) != 1 {
		t.Fatalf("running job %v, summaries %d", te.state(a), len(te.e.out.summaries))
	}
}

func TestRejections(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{})
	te.job(wire.JobMeta{Group: "never-opened"})
	te.open("g")
	te.job(wire.JobMeta{Group: "g"})
	te.seal("g")
	te.open("g") // sealed and still running: refused
	te.job(wire.JobMeta{Group: "g"})
	h := wire.Header(wire.JobMeta{Group: "g"}.Header())
	h.Set(wire.HdrVersion, "9")
	te.e.Feed(te.e.names.JobSubject("g"), 99, h, nil, time.Time{})
	if n := len(te.e.out.Rejections); n != 4 {
		t.Fatalf("want 4 rejections, got %d: %+v", n, te.e.out.Rejections)
	}
	if te.e.stats.Admitted != 1 {
		t.Fatalf("admitted %d jobs, want only the 1 valid one", te.e.stats.Admitted)
	}
}

// TestReplay rebuilds an engine from the streams: a job still in WORK stays running, a decided
// retry waits, an undecided report is decided now, a never-released job is pending, and a
// fenced-off epoch's late record is ignored. A job whose latest attempt was reported (or
// retried) is not running although its batch is still in WORK (acked after the report; the
// chaos test caught 115 such jobs held in flight for good after a takeover, stalling the
// namespace).
func TestReplay(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{})
	names, now := te.e.names, te.now
	e2 := te.restarted()
	e2.Feed(names.GroupSubject("g"), 1, wire.GroupControl{Group: "g", Op: wire.OpOpen}.Header(), nil, time.Time{})
	for id := uint64(2); id <= 6; id++ {
		e2.Feed(names.JobSubject("g"), id, wire.JobMeta{Group: "g"}.Header(), nil, time.Time{})
	}
	e2.Feed(names.JobSubject("g"), 8, wire.JobMeta{Group: "g"}.Header(), nil, time.Time{})
	e2.Feed(names.JobSubject("g"), 9, wire.JobMeta{Group: "g"}.Header(), nil, time.Time{})
	e2.Feed(names.GroupSubject("g"), 7, wire.GroupControl{Group: "g", Op: wire.OpSeal, Count: 7}.Header(), nil, time.Time{})
	e2.JournalRecord(journal.Record{Kind: journal.KindEpoch, Epoch: 1})
	e2.Report("any", "w", 10, proven(e2, "any", 0, wire.Report{ID: 2, Attempt: 1, Status: wire.StatusOK}), now)
	e2.Report("any", "w", 11, proven(e2, "any", 0, wire.Report{ID: 3, Attempt: 1, Status: wire.StatusError}), now)
	e2.JournalRecord(journal.Record{Kind: journal.KindRetry, Epoch: 1, Entries: []journal.Entry{{ID: 3, Attempt: 1, At: now.Add(time.Minute)}}})
	e2.Report("any", "w", 13, proven(e2, "any", 0, wire.Report{ID: 5, Attempt: 1, Status: wire.StatusError}), now)
	// A fenced-off epoch-0 coordinator's late retry decision for job 5 is ignored.
	e2.JournalRecord(journal.Record{Kind: journal.KindRetry, Epoch: 0, Entries: []journal.Entry{{ID: 5, Attempt: 1, At: now.Add(time.Hour)}}})
	// Jobs 8 and 9: reported (9 then retried), their batches still in WORK.
	e2.Report("any", "w", 14, proven(e2, "any", 0, wire.Report{ID: 8, Attempt: 1, Status: wire.StatusOK}), now)
	e2.Report("any", "w", 15, proven(e2, "any", 0, wire.Report{ID: 9, Attempt: 1, Status: wire.StatusError}), now)
	e2.JournalRecord(journal.Record{Kind: journal.KindRetry, Epoch: 1, Entries: []journal.Entry{{ID: 9, Attempt: 1, At: now.Add(time.Minute)}}})
	e2.EndReplay(map[uint64]AliveJob{4: {Attempt: 1, Pool: "any"}, 8: {Attempt: 1, Pool: "any"}, 9: {Attempt: 1, Pool: "any"}}, now)
	want := map[uint64]jobindex.State{2: jobindex.Done, 3: jobindex.RetryWait, 4: jobindex.Running, 5: jobindex.RetryWait, 6: jobindex.Pending,
		8: jobindex.Done, 9: jobindex.RetryWait}
	for id, st := range want {
		if got, _ := e2.idx.State(id); got != st {
			t.Errorf("job %d is %v after replay, want %v", id, got, st)
		}
	}
	if e2.jobs[3].retryAt != now.Add(time.Minute) {
		t.Errorf("job 3 retries at %v, want the journaled time", e2.jobs[3].retryAt)
	}
	if e2.jobs[5].retryAt.After(now.Add(time.Hour - time.Second)) {
		t.Errorf("job 5 took the fenced-off decision (retry at %v)", e2.jobs[5].retryAt)
	}
	if p := e2.fleet.pools["any"]; p == nil || p.outstanding != 1 {
		t.Errorf("the pool of the running job does not count it outstanding: %+v", p)
	}
	if len(e2.out.outcomes) != 1 || e2.out.outcomes[0].done != 2 {
		t.Errorf("the undecided ok reports (jobs 2 and 8) did not produce their outcomes")
	}
}

// TestReplaySealedGroup: a group opened, filled and sealed before a restart is scheduled with
// all its pending jobs after replay.
func TestReplaySealedGroup(t *testing.T) {
	t.Parallel()
	cfg := withTestDefaults(Config{})
	names, _ := wire.NewNames("")
	e, err := New(cfg, names, 1)
	if err != nil {
		t.Fatal(err)
	}
	e.Feed(names.GroupSubject("g"), 1, wire.GroupControl{Group: "g", Op: wire.OpOpen}.Header(), nil, time.Time{})
	e.Feed(names.JobSubject("g"), 2, wire.JobMeta{Group: "g"}.Header(), nil, time.Time{})
	e.Feed(names.JobSubject("g"), 3, wire.JobMeta{Group: "g"}.Header(), nil, time.Time{})
	e.Feed(names.GroupSubject("g"), 4, wire.GroupControl{Group: "g", Op: wire.OpSeal, Count: 2}.Header(), nil, time.Time{})
	e.EndReplay(nil, time.Unix(0, 0))
	e.Heartbeat(names.HeartbeatSubject("any", "w"), wire.Heartbeat{Version: wire.Version, Worker: "w", Pool: "any", Concurrency: 4, IntervalMS: 1000}, time.Unix(0, 0))
	e.ReleaseAll()
	if len(e.out.releases) != 1 || len(e.out.releases[0].jobs) != 2 {
		t.Fatalf("after replay of a sealed group, released %+v", e.out.releases)
	}
}

// TestUnplaceableJobDoesNotBlockItsGroup: a head job requiring a resource no live worker holds
// is parked; the rest of its group runs; it runs once a holder joins.
func TestUnplaceableJobDoesNotBlockItsGroup(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{})
	te.worker("plain", 4)
	te.open("g")
	gpu := te.job(wire.JobMeta{Group: "g", Require: []string{"gpu"}})
	te.job(wire.JobMeta{Group: "g"})
	te.job(wire.JobMeta{Group: "g"})
	te.seal("g")
	if n := len(te.releases()["any"]); n != 2 {
		t.Fatalf("released %d of the 2 jobs without requirement", n)
	}
	if te.state(gpu) != jobindex.Pending || len(te.e.retries.parked) != 1 {
		t.Fatalf("gpu job %v, parked %d", te.state(gpu), len(te.e.retries.parked))
	}
	te.worker("gpu-box", 1, "gpu")
	got := te.releases()[wire.PoolKey([]string{"gpu"})]
	if len(got) != 1 || got[0].id != gpu {
		t.Fatalf("parked job not released to the new holder: %v", got)
	}
}

func TestPrefetchDisabled(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{Prefetch: -1})
	te.worker("w", 2)
	te.open("g")
	for range 5 {
		te.job(wire.JobMeta{Group: "g"})
	}
	if n := len(te.releases()["any"]); n != 2 {
		t.Fatalf("with prefetch off, released %d jobs to 2 slots", n)
	}
}

func TestGroupIncarnations(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{})
	te.worker("w", 4)
	te.open("g")
	a := te.job(wire.JobMeta{Group: "g"})
	te.open("g") // open again while open: resume
	b := te.job(wire.JobMeta{Group: "g"})
	te.seal("g")
	if te.e.stats.Admitted != 2 || len(te.e.out.Rejections) != 0 {
		t.Fatalf("resumed group: admitted %d, rejections %v", te.e.stats.Admitted, te.e.out.Rejections)
	}
	for _, j := range te.releases()["any"] {
		te.report(j, wire.StatusOK, "")
	}
	if len(te.e.out.summaries) != 1 {
		t.Fatal("group did not complete")
	}
	old := te.e.out.summaries[0]
	te.open("g") // complete: a new incarnation, before the old one is forgotten
	c := te.job(wire.JobMeta{Group: "g"})
	te.e.forget(old)
	if g := te.e.group("g"); g == nil || g == old || g.admitted != 1 {
		t.Fatalf("new incarnation %+v", g)
	}
	if te.state(c) != jobindex.Pending {
		t.Fatalf("new incarnation's job is %v", te.state(c))
	}
	if _, ok := te.e.idx.State(a); ok {
		t.Fatalf("old incarnation's job %d still indexed after forget (b=%d)", a, b)
	}
}

// TestPreferenceDoesNotBreakSpread: a group preferring what a pool holds does not take all its
// slots while other groups wait; preference only breaks ties among the least loaded groups.
func TestPreferenceDoesNotBreakSpread(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{Feeders: 6})
	te.worker("eu", 4, "eu")
	te.open("site-eu")
	for range 10 {
		te.job(wire.JobMeta{Group: "site-eu", Prefer: []string{"eu"}})
	}
	for i := range 5 {
		g := fmt.Sprint("other-", i)
		te.open(g)
		for range 10 {
			te.job(wire.JobMeta{Group: g})
		}
	}
	perGroup := map[string]int{}
	for _, j := range te.releases()[wire.PoolKey([]string{"eu"})] {
		perGroup[j.g.id]++
	}
	for g, n := range perGroup {
		if n > 1 {
			t.Fatalf("group %s got %d of the pool's slots while other groups had none: %v", g, n, perGroup)
		}
	}
	if perGroup["site-eu"] != 1 {
		t.Fatalf("the preferring group did not get the holder's first slot: %v", perGroup)
	}
}

// TestRetriesCountInFlight: a retried job counts against MaxInFlightPerGroup.
func TestRetriesCountInFlight(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{MaxInFlightPerGroup: 1, RetryBase: time.Millisecond})
	te.worker("w", 4)
	te.open("g")
	te.job(wire.JobMeta{Group: "g"})
	te.job(wire.JobMeta{Group: "g"})
	rel := te.releases()["any"]
	if len(rel) != 1 {
		t.Fatalf("released %d with a cap of 1", len(rel))
	}
	te.report(rel[0], wire.StatusError, "boom")
	te.now = te.now.Add(time.Second)
	te.e.Tick(te.now)
	rel = te.releases()["any"]
	if len(rel) != 1 {
		t.Fatalf("after a failure released %d with a cap of 1", len(rel))
	}
	if more := te.releases()["any"]; len(more) != 0 {
		t.Fatalf("a retry plus %d more exceed the cap", len(more))
	}
}

// TestLowWater: EVENTS is needed from the report behind a job waiting to be released again, and
// from reports whose outcomes are not stored yet; nothing else.
func TestLowWater(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{Prefetch: -1, RetryBase: time.Millisecond})
	te.worker("w", 1)
	te.open("g")
	te.job(wire.JobMeta{Group: "g"})
	if got := te.e.LowWater(); got != 0 {
		t.Fatalf("before any event lowWater = %d, want 0", got)
	}
	rel := te.releases()["any"]
	te.report(rel[0], wire.StatusError, "boom") // EVENTS 1: retry decided from it
	te.e.retention.noteEvent(2)                 // an unrelated record
	if got := te.e.LowWater(); got != 1 {
		t.Fatalf("with a retry pending lowWater = %d, want 1 (its report)", got)
	}
	te.now = te.now.Add(time.Second)
	te.e.Tick(te.now)
	if got := te.e.LowWater(); got != 1 {
		t.Fatalf("due for release lowWater = %d, want 1", got)
	}
	rel = te.releases()["any"]
	if got := te.e.LowWater(); got != 3 {
		t.Fatalf("released again (attempt in WORK) lowWater = %d, want 3", got)
	}
	te.evSeq = 2
	te.report(rel[0], wire.StatusOK, "") // EVENTS 3: outcome decided, not stored yet
	if got := te.e.LowWater(); got != 3 {
		t.Fatalf("outcome unstored lowWater = %d, want 3", got)
	}
	te.e.retention.outcomeStored([]uint64{3})
	if got := te.e.LowWater(); got != 4 {
		t.Fatalf("outcome stored lowWater = %d, want 4", got)
	}
}

func TestRetentionExpiry(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{ResultRetention: time.Hour})
	t0 := te.now
	te.e.retain("a", 1, 10, false, 0, t0, wire.GroupSummary{}, false)
	te.e.retain("b c", 5, 12, true, 0, t0.Add(time.Minute), wire.GroupSummary{}, false)   // bound unknown (as after a restart)
	te.e.retain("b c", 60, 14, true, 70, t0.Add(2*time.Hour), wire.GroupSummary{}, false) // a later incarnation of the ID
	te.e.retention.jobsApplied = 99
	te.e.ExpireRetained(t0.Add(time.Hour - time.Nanosecond))
	if len(te.e.out.retentionPurges) != 0 {
		t.Fatalf("purged before the retention: %+v", te.e.out.retentionPurges)
	}
	te.e.ExpireRetained(t0.Add(time.Hour + time.Minute))
	// The first "b c" purges its job messages only up to the later incarnation's open.
	want := []Purge{{Tok: "a", SummarySeq: 10}, {Tok: wire.GroupToken("b c"), SummarySeq: 12, JobsSeq: 59}}
	if fmt.Sprint(te.e.out.retentionPurges) != fmt.Sprint(want) {
		t.Fatalf("purges %+v, want %+v", te.e.out.retentionPurges, want)
	}
	if te.e.retention.retained.len() != 1 {
		t.Fatalf("%d groups still retained, want the later one", te.e.retention.retained.len())
	}
}

// TestHistoryAndJobCancel: a failed job's outcome lists each failed attempt; cancelling single
// jobs ends pending ones at once and running ones when their attempt ends, without retry.
func TestHistoryAndJobCancel(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{MaxAttempts: 2, RetryBase: time.Millisecond, Prefetch: -1})
	te.worker("w", 1)
	te.open("g")
	a := te.job(wire.JobMeta{Group: "g"})
	b := te.job(wire.JobMeta{Group: "g"})
	c := te.job(wire.JobMeta{Group: "g"})
	te.seal("g")
	rel := te.releases()["any"]
	if rel[0].id != a {
		t.Fatalf("released %d first, want %d", rel[0].id, a)
	}
	te.report(rel[0], wire.StatusError, "first")
	te.now = te.now.Add(time.Second)
	te.e.Tick(te.now)
	rel = te.releases()["any"]
	te.report(rel[0], wire.StatusError, "second")
	g := te.e.group("g")
	if len(g.outcomes) != 1 || g.outcomes[0].State != wire.FinalFailed {
		t.Fatalf("outcomes %+v", g.outcomes)
	}
	if h := g.outcomes[0].History; len(h) != 2 || h[0].Error != "first" || h[1].Error != "second" || h[0].Worker != "w" {
		t.Fatalf("history %+v", h)
	}
	rel = te.releases()["any"] // b runs
	te.control(wire.GroupControl{Group: "g", Op: wire.OpCancel, Jobs: []uint64{b, c}})
	if te.state(c) != jobindex.Canceled {
		t.Fatalf("pending job %d is %v after its cancel", c, te.state(c))
	}
	if len(te.e.out.Cancels) != 1 || te.e.out.Cancels[0] != b {
		t.Fatalf("running job not told to stop: %v", te.e.out.Cancels)
	}
	te.report(rel[0], wire.StatusError, "context canceled") // it raced to an error: no retry
	if te.state(b) != jobindex.Canceled || len(te.e.out.summaries) != 1 {
		t.Fatalf("job %d is %v, summaries %d", b, te.state(b), len(te.e.out.summaries))
	}
}

// TestAdaptivePrefetch: the prefetch window follows the measured busy share: deep for jobs that
// run a small share of their release time, about one for long ones, capped, and within Feeders.
func TestAdaptivePrefetch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		busy    float64
		feeders int
		want    int
	}{
		{busy: 1, want: 1},
		{busy: 0.8, want: 2},              // 8·(1/0.8 − 1) = 2
		{busy: 0.5, want: 8},              // 8·1
		{busy: 0.01, want: 128},           // capped at 16 per slot
		{busy: 0, want: 128},              // no division by zero
		{busy: 0.5, feeders: 10, want: 2}, // within Feeders − slots
	} {
		te := newTestEngine(t, Config{Feeders: tc.feeders})
		te.worker("w", 8)
		te.e.fleet.busy = tc.busy
		if got := te.e.fleet.prefetch(&te.e.cfg); got != tc.want {
			t.Errorf("busy %.2f feeders %d: prefetch %d, want %d", tc.busy, tc.feeders, got, tc.want)
		}
		if tc.feeders == 0 && te.e.fleet.feeders(&te.e.cfg) != 8+tc.want {
			t.Errorf("busy %.2f: auto feeders %d, want slots + prefetch = %d", tc.busy, te.e.fleet.feeders(&te.e.cfg), 8+tc.want)
		}
	}
}

// TestOrphanedPoolRescue: a pool whose last worker is gone is named for rescue only after
// RescueAfter and only while jobs released to it are unreported; the rescuer's released reports
// send those jobs to another pool with their attempt unchanged, or park a job only the gone pool
// could run until a holder joins.
func TestOrphanedPoolRescue(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{Feeders: 10, Prefetch: -1})
	const rescueAfter = 5 * time.Second
	gpu := wire.PoolKey([]string{"gpu"})
	te.worker("gpu-box", 2, "gpu")
	te.open("g")
	prefers := te.job(wire.JobMeta{Group: "g", Prefer: []string{"gpu"}})
	requires := te.job(wire.JobMeta{Group: "g", Require: []string{"gpu"}})
	te.seal("g")
	held := te.releases()[gpu]
	if len(held) != 2 {
		t.Fatalf("released %d jobs to the gpu pool, want 2", len(held))
	}
	if got := te.e.fleet.orphans(te.now, rescueAfter); len(got) != 0 {
		t.Fatalf("orphans %v while the pool has a worker", got)
	}

	te.e.Heartbeat(te.e.names.HeartbeatSubject(gpu, "gpu-box"), wire.Heartbeat{Version: wire.Version, Worker: "gpu-box", Pool: gpu, Resources: []string{"gpu"}, Stopped: true, Run: "run-gpu-box"}, te.now)
	te.now = te.now.Add(5*time.Second - time.Millisecond)
	if got := te.e.fleet.orphans(te.now, rescueAfter); len(got) != 0 {
		t.Fatalf("orphans %v before RescueAfter", got)
	}
	te.now = te.now.Add(time.Millisecond)
	if got := te.e.fleet.orphans(te.now, rescueAfter); len(got) != 1 || got[0] != gpu {
		t.Fatalf("orphans %v, want [%s]", got, gpu)
	}

	te.worker("plain", 4)
	for _, j := range held {
		te.evSeq++
		te.e.Report(gpu, wire.RescueWorker, te.evSeq, wire.Report{ID: j.id, Attempt: j.attempt, Status: wire.StatusReturned}, te.now)
		te.e.retention.noteEvent(te.evSeq)
	}
	if got := te.e.fleet.orphans(te.now, rescueAfter); len(got) != 0 {
		t.Fatalf("orphans %v with nothing left to rescue", got)
	}
	if te.e.stats.Rescued != 2 {
		t.Fatalf("Rescued = %d, want 2", te.e.stats.Rescued)
	}
	got := te.releases()
	if len(got["any"]) != 1 || got["any"][0].id != prefers || got["any"][0].attempt != 1 {
		t.Fatalf("released %v to the plain pool, want only the preferring job, attempt 1", got["any"])
	}
	if st := te.state(requires); st != jobindex.Pending {
		t.Fatalf("the job requiring gpu is %v, want pending (parked)", st)
	}
	te.worker("gpu-box-2", 1, "gpu")
	if got := te.releases()[gpu]; len(got) != 1 || got[0].id != requires || got[0].attempt != 1 {
		t.Fatalf("released %v to the new gpu holder, want the job requiring gpu, attempt 1", got)
	}
	if got := te.e.fleet.orphans(te.now, rescueAfter); len(got) != 0 {
		t.Fatalf("orphans %v after a worker joined", got)
	}
}

// TestLapsedAttemptsCount: an attempt that lapsed with its worker's lease is a failed attempt, retried with
// backoff, recorded in the history without a worker, and a job that lapsed MaxAttempts times (one that
// kills every worker it runs on) ends failed instead of going round for ever.
func TestLapsedAttemptsCount(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{MaxAttempts: 2, RetryBase: time.Second, Prefetch: -1})
	te.worker("w1", 1)
	te.open("g")
	id := te.job(wire.JobMeta{Group: "g"})
	te.seal("g")
	for attempt := uint32(1); attempt <= 2; attempt++ {
		rel := te.releases()["any"]
		if len(rel) != 1 || rel[0].attempt != attempt {
			t.Fatalf("attempt %d: released %+v", attempt, rel)
		}
		te.e.Report("any", "w1", uint64(attempt), wire.LapsedReports([]wire.WorkJob{{ID: id, Attempt: attempt}}, 2)[0], te.now)
		if attempt == 1 {
			if te.state(id) != jobindex.RetryWait {
				t.Fatalf("after a lapsed attempt the job is %v, want retry-waiting", te.state(id))
			}
			te.now = te.e.retries.nextDue()
			te.e.Tick(te.now)
		}
	}
	if te.state(id) != jobindex.Failed || te.e.stats.LostAttempts != 2 {
		t.Fatalf("job %v with %d lapsed attempts, want failed after 2", te.state(id), te.e.stats.LostAttempts)
	}
	outs := te.e.group("g").outcomes
	if len(outs) != 1 || len(outs[0].History) != 2 || outs[0].History[1].Worker != "" || !strings.Contains(outs[0].History[1].Error, "worker lost") {
		t.Fatalf("outcome %+v, want 2 lapsed attempts in the history, without a worker", outs)
	}
}

// TestBusyShareIsARatioOfAverages: a group whose 1 ms jobs take 2 ms and 10 ms from release to
// report, in turn, runs 1 ms in every 6: its busy share is 1/6 (Little's law), not the 0.3 that
// averaging each job's ratio gives, which would undercount its running jobs under least in-flight.
func TestBusyShareIsARatioOfAverages(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{})
	g := &group{busy: te.e.groups.busy}
	for i := range 200 {
		cycle := 2 * time.Millisecond
		if i%2 == 1 {
			cycle = 10 * time.Millisecond
		}
		j := &job{g: g, since: te.now.Add(-cycle)}
		te.e.learnBusy(j, nil, time.Millisecond, 0, te.now)
	}
	if want := 1.0 / 6; g.busy < want*0.9 || g.busy > want*1.1 {
		t.Fatalf("busy share %.3f, want %.3f ± 10%%", g.busy, want)
	}
}

// TestReleaseWithMoreRetriesThanCandidates: with more retries ready than one selection looks
// at (maxCandidates), the selection is all retries, and least in-flight still compares their
// loads: the retries are released, oldest first. (The loads were once computed only after the
// offers, and a selection full of retries panicked in the loop.)
func TestReleaseWithMoreRetriesThanCandidates(t *testing.T) {
	t.Parallel()
	const n = maxCandidates + 6
	te := newTestEngine(t, Config{RetryBase: time.Second, RetryMax: time.Second, Prefetch: -1})
	te.worker("w", n)
	te.open("g")
	for range n {
		te.job(wire.JobMeta{Group: "g"})
	}
	te.seal("g")
	first := te.releases()["any"]
	if len(first) != n {
		t.Fatalf("released %d jobs, want %d", len(first), n)
	}
	for _, j := range first {
		te.report(j, wire.StatusError, "boom")
	}
	te.now = te.now.Add(time.Minute)
	te.e.Tick(te.now)
	te.worker("w", n) // its heartbeat, a minute on
	if len(te.e.retries.ready) != n {
		t.Fatalf("%d retries ready, want %d", len(te.e.retries.ready), n)
	}
	again := te.releases()["any"]
	if len(again) != n {
		t.Fatalf("released %d retries, want %d", len(again), n)
	}
	for _, j := range again {
		if j.attempt != 2 {
			t.Fatalf("job %d released at attempt %d, want its retry (2)", j.id, j.attempt)
		}
	}
}

// TestLostBatches: a pool is named for taking back its batches lost in delivery only while it
// owes jobs, every worker of it has said, for lostAfter since the last release, that it runs
// nothing and holds no batch, and a heartbeat well after the release said so; a worker that
// does not say what it holds (before Held), or holds a batch, or runs a job, keeps it off.
func TestLostBatches(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{Feeders: 10, Prefetch: -1})
	pool := wire.PoolKey(nil)
	beat := func(busy, held int, noHeld bool) {
		hb := wire.Heartbeat{Version: wire.Version, Worker: "w", Pool: pool, Concurrency: 2, Busy: busy, Sleeping: 2 - busy,
			IntervalMS: 100, Run: "run-w"}
		if !noHeld {
			hb.Held = &held
		}
		if ref := te.e.Heartbeat(te.e.names.HeartbeatSubject(pool, "w"), hb, te.now); ref.Reason != "" {
			t.Fatalf("heartbeat refused: %s", ref.Reason)
		}
	}
	lost := func() bool { return len(te.e.fleet.lost(te.now, lostAfter)) == 1 }
	beat(0, 0, false)
	te.open("g")
	te.job(wire.JobMeta{Group: "g"})
	te.seal("g")
	if len(te.releases()[pool]) != 1 {
		t.Fatal("the job was not released")
	}
	step := func(d time.Duration, busy, held int, noHeld bool) {
		te.now = te.now.Add(d)
		beat(busy, held, noHeld)
	}
	for range 29 {
		step(100*time.Millisecond, 0, 0, false)
	}
	if lost() {
		t.Fatal("lost before lostAfter")
	}
	step(100*time.Millisecond, 0, 0, false)
	if !lost() {
		t.Fatal("not lost after lostAfter of quiet heartbeats")
	}
	for _, tc := range []struct {
		name       string
		busy, held int
		noHeld     bool
	}{{"holding a batch", 0, 1, false}, {"running a job", 1, 0, false}, {"not saying what it holds", 0, 0, true}} {
		step(100*time.Millisecond, tc.busy, tc.held, tc.noHeld)
		te.now = te.now.Add(lostAfter)
		if lost() {
			t.Fatalf("lost with a worker %s", tc.name)
		}
		for range 31 { // quiet again for lostAfter
			step(100*time.Millisecond, 0, 0, false)
		}
		if !lost() {
			t.Fatalf("not lost after quiet again (%s)", tc.name)
		}
	}
}
