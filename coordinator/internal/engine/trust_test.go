package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/weavejobs/weave/internal/jobindex"
	"github.com/weavejobs/weave/internal/journal"
	"github.com/weavejobs/weave/internal/wire"
)

// reportAs applies a report about j from worker of pool, as it would arrive on that pool's and
// worker's report subject.
func (te *testEngine) reportAs(pool, worker string, j *job, attempt uint32, st wire.Status) {
	te.evSeq++
	te.e.Report(pool, worker, te.evSeq, wire.Report{ID: j.id, Attempt: attempt, Status: st}, te.now)
	te.e.retention.noteEvent(te.evSeq)
}

// lastRejection returns the reason of the last rejection recorded, and clears them.
func (te *testEngine) lastRejection() string {
	te.t.Helper()
	rj := te.e.out.Rejections
	te.e.out.Rejections = nil
	if len(rj) == 0 {
		te.t.Fatal("nothing was rejected")
	}
	return rj[len(rj)-1].Reason
}

// TestForeignReportRefused: a report from a worker of another pool, on its own (permitted) report
// subject, about a job released to the gpu pool changes nothing: the job keeps running, the
// report is recorded as rejected, counted, and journaled for replay; the real report decides.
func TestForeignReportRefused(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{Prefetch: -1})
	gpu := wire.PoolKey([]string{"gpu"})
	te.worker("gpu-1", 1, "gpu")
	te.worker("plain-1", 1)
	te.open("g")
	te.job(wire.JobMeta{Group: "g", Require: []string{"gpu"}})
	te.seal("g")
	rel := te.releases()[gpu]
	if len(rel) != 1 {
		t.Fatalf("released %v to the gpu pool, want 1 job", rel)
	}
	j := rel[0]

	te.reportAs("any", "plain-1", j, j.attempt, wire.StatusOK)
	if st := te.state(j.id); st != jobindex.Running {
		t.Fatalf("after a foreign report the job is %v, want still running", st)
	}
	if r := te.lastRejection(); !strings.Contains(r, "released to pool "+gpu) {
		t.Fatalf("rejection reason %q does not name the pool the job was released to", r)
	}
	if got := te.e.out.Refused; len(got) != 1 || got[0].ID != j.id || got[0].Seq != te.evSeq {
		t.Fatalf("refused reports to journal %+v, want job %d at EVENTS %d", got, j.id, te.evSeq)
	}
	st := te.e.Status()
	if st.Totals.RejectedReports != 1 || st.Totals.Rejected != 1 || st.Totals.Done != 0 {
		t.Fatalf("totals %+v, want one rejected report and nothing done", st.Totals)
	}

	// A worker live in pool any publishing on the gpu pool's subject (possible only without
	// permissions) is refused too.
	te.reportAs(gpu, "plain-1", j, j.attempt, wire.StatusOK)
	if r := te.lastRejection(); !strings.Contains(r, "live in pool any") {
		t.Fatalf("rejection reason %q, want the worker's live pool named", r)
	}

	te.reportAs(gpu, "gpu-1", j, j.attempt, wire.StatusPermanent)
	if st := te.state(j.id); st != jobindex.Failed {
		t.Fatalf("after the real report the job is %v, want failed (the real outcome)", st)
	}
	if n := te.e.stats.RejectedReports; n != 2 {
		t.Fatalf("RejectedReports = %d, want 2", n)
	}
}

// TestUnreleasedAttemptRefused: reports about an attempt later than the job's latest release, or
// about a job never released, are refused (no worker can have run them); an earlier attempt's
// report is only stale.
func TestUnreleasedAttemptRefused(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{Prefetch: -1})
	te.worker("w", 1)
	te.open("g")
	te.job(wire.JobMeta{Group: "g"})
	never := te.job(wire.JobMeta{Group: "g"})
	te.seal("g")
	j := te.releases()["any"][0]

	te.reportAs("any", "w", j, j.attempt+1, wire.StatusOK)
	if r := te.lastRejection(); !strings.Contains(r, "latest release is attempt 1") {
		t.Fatalf("rejection %q", r)
	}
	te.reportAs("any", "w", &job{id: never}, 1, wire.StatusOK)
	if r := te.lastRejection(); !strings.Contains(r, "is pending and has no proven release") {
		t.Fatalf("rejection %q", r)
	}
	te.reportAs("any", "w", j, 0, wire.StatusOK)
	if len(te.e.out.Rejections) != 0 || te.e.stats.StaleReports != 1 {
		t.Fatalf("an earlier attempt's report: rejections %+v, stale %d; want stale only", te.e.out.Rejections, te.e.stats.StaleReports)
	}
	if st := te.state(j.id); st != jobindex.Running {
		t.Fatalf("job is %v, want running", st)
	}
	if st := te.state(never); st != jobindex.Pending {
		t.Fatalf("never-released job is %v, want pending", st)
	}
}

// TestSilentWorkerReportAccepted: a worker forgotten after missing its heartbeats is still a
// worker of the pool its subject names; its report is accepted (refusing it would leave the job
// running for ever, since the worker acks the batch once the report is stored).
func TestSilentWorkerReportAccepted(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{Prefetch: -1})
	te.worker("w", 1)
	te.open("g")
	te.job(wire.JobMeta{Group: "g"})
	te.seal("g")
	j := te.releases()["any"][0]
	te.now = te.now.Add(10 * time.Second)
	te.e.Tick(te.now)
	if len(te.e.fleet.workers) != 0 {
		t.Fatalf("the silent worker is still live")
	}
	te.reportAs("any", "w", j, j.attempt, wire.StatusOK)
	if st := te.state(j.id); st != jobindex.Done {
		t.Fatalf("job is %v, want done", st)
	}
}

// TestHeartbeatChecks: a heartbeat is applied only on its own worker's subject, for the pool its
// resources hash to, with the resources the pool was first seen with, from the live run of its
// ID; anything else is refused, recorded and counted, and changes nothing.
func TestHeartbeatChecks(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{})
	gpu := wire.PoolKey([]string{"gpu"})
	te.worker("w1", 2, "gpu")
	hb := func(worker, run string, conc int, resources ...string) wire.Heartbeat {
		return wire.Heartbeat{Version: wire.Version, Worker: worker, Pool: wire.PoolKey(resources), Resources: resources,
			Concurrency: conc, Sleeping: conc, IntervalMS: 1000, Run: run}
	}
	for _, tc := range []struct {
		name, subject string
		hb            wire.Heartbeat
		want          string
	}{
		{"another worker's subject", te.e.names.HeartbeatSubject(gpu, "w1"), hb("w2", "r2", 1000, "gpu"), `on the subject of worker "w1"`},
		{"another pool's subject", te.e.names.HeartbeatSubject("any", "w2"), hb("w2", "r2", 1000, "gpu"), "of pool " + gpu + " on the subject"},
		{"not a heartbeat subject", "weave.hb.w2", hb("w2", "r2", 1, "gpu"), "not a worker's heartbeat"},
		{"a second run of a live ID", te.e.names.HeartbeatSubject(gpu, "w1"), hb("w1", "other", 1000, "gpu"), `worker ID "w1" is in use by another running worker`},
		{"a second run stopping", te.e.names.HeartbeatSubject(gpu, "w1"), func() wire.Heartbeat { h := hb("w1", "other", 1, "gpu"); h.Stopped = true; return h }(), "in use by another"},
	} {
		ref := te.e.Heartbeat(tc.subject, tc.hb, te.now)
		if !strings.Contains(ref.Reason, tc.want) {
			t.Errorf("%s: refusal %q, want it to contain %q", tc.name, ref.Reason, tc.want)
		}
		if r := te.lastRejection(); r != ref.Reason {
			t.Errorf("%s: recorded %q, want %q", tc.name, r, ref.Reason)
		}
	}
	if te.e.fleet.slots != 2 || len(te.e.fleet.workers) != 1 || te.e.fleet.workers["w1"].hb.Run != "run-w1" {
		t.Fatalf("refused heartbeats changed the fleet: slots %d, workers %d", te.e.fleet.slots, len(te.e.fleet.workers))
	}
	if n := te.e.stats.RejectedHeartbeats; n != 5 {
		t.Fatalf("RejectedHeartbeats = %d, want 5", n)
	}

	// A crafted resource set whose key is gpu's is refused: the pool keeps the resources it
	// was first seen with.
	forged := hb("w3", "r3", 1000, "everything")
	forged.Pool = gpu
	if ref := te.e.CheckHeartbeat(te.e.names.HeartbeatSubject(gpu, "w3"), forged, te.now); !strings.Contains(ref.Reason, "which holds [gpu]") {
		t.Fatalf("refusal %q, want the pool's resources named", ref.Reason)
	}

	// The refusal of a second run says how long the live run may stay silent: after that, if it
	// is dead, a new run is accepted.
	ref := te.e.CheckHeartbeat(te.e.names.JoinSubject(gpu, "w1"), hb("w1", "restarted", 1, "gpu"), te.now.Add(time.Second))
	if ref.Retry != 2*time.Second {
		t.Fatalf("retry %v, want 2s (3 missed heartbeats of 1s, the last 1s ago)", ref.Retry)
	}
	te.now = te.now.Add(3*time.Second + time.Millisecond)
	te.e.Tick(te.now)
	if ref := te.e.Heartbeat(te.e.names.HeartbeatSubject(gpu, "w1"), hb("w1", "restarted", 1, "gpu"), te.now); ref.Reason != "" {
		t.Fatalf("the restarted run was refused after the old one went silent: %s", ref.Reason)
	}
}

// TestReplaySkipsRefusedReport: a report refused before a restart is stored in EVENTS like any
// other; replay skips it (journal.KindRefused) and the job is decided from its real report.
func TestReplaySkipsRefusedReport(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{})
	names, now := te.e.names, te.now
	e2 := te.restarted()
	e2.Feed(names.GroupSubject("g"), 1, wire.GroupControl{Group: "g", Op: wire.OpOpen}.Header(), nil, time.Time{})
	e2.Feed(names.JobSubject("g"), 2, wire.JobMeta{Group: "g"}.Header(), nil, time.Time{})
	e2.Feed(names.GroupSubject("g"), 3, wire.GroupControl{Group: "g", Op: wire.OpSeal, Count: 1}.Header(), nil, time.Time{})
	e2.JournalRecord(journal.Record{Kind: journal.KindEpoch, Epoch: 1})
	e2.Report("any", "w", 10, proven(e2, "any", 0, wire.Report{ID: 2, Attempt: 1, Status: wire.StatusError, Data: []byte("real")}), now)
	e2.Report("gpu", "intruder", 11, wire.Report{ID: 2, Attempt: 1, Status: wire.StatusError, Data: []byte("forged")}, now)
	e2.Report("gpu", "intruder", 12, wire.Report{ID: 2, Attempt: 9, Status: wire.StatusOK}, now)
	e2.JournalRecord(journal.Record{Kind: journal.KindRefused, Epoch: 1, Entries: []journal.Entry{{ID: 2, Attempt: 1, Seq: 11}}})
	e2.JournalRecord(journal.Record{Kind: journal.KindRefused, Epoch: 1, Entries: []journal.Entry{{ID: 2, Attempt: 9, Seq: 12}}})
	e2.EndReplay(nil, now)
	j := e2.jobs[2]
	if st, _ := e2.idx.State(2); st != jobindex.RetryWait || j == nil || j.attempt != 1 {
		t.Fatalf("job 2 after replay: %v %+v, want waiting to retry after attempt 1", st, j)
	}
	if len(j.history) != 1 || j.history[0].Error != "real" {
		t.Fatalf("history %+v, want only the real failed attempt", j.history)
	}
	if len(e2.out.Rejections) != 0 {
		t.Fatalf("reports refused before the restart recorded again: %+v", e2.out.Rejections)
	}
}

// TestReplayKeepsFirstReportOfAttempt: live, the first report of an attempt decides it and a
// later one is stale (not journaled); replay decides from the first one too, unless it gave the
// job back unrun (released), after which the attempt's next report decides.
func TestReplayKeepsFirstReportOfAttempt(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{})
	names, now := te.e.names, te.now
	e2 := te.restarted()
	e2.Feed(names.GroupSubject("g"), 1, wire.GroupControl{Group: "g", Op: wire.OpOpen}.Header(), nil, time.Time{})
	e2.Feed(names.JobSubject("g"), 2, wire.JobMeta{Group: "g"}.Header(), nil, time.Time{})
	e2.Feed(names.JobSubject("g"), 3, wire.JobMeta{Group: "g"}.Header(), nil, time.Time{})
	e2.Feed(names.GroupSubject("g"), 4, wire.GroupControl{Group: "g", Op: wire.OpSeal, Count: 2}.Header(), nil, time.Time{})
	e2.JournalRecord(journal.Record{Kind: journal.KindEpoch, Epoch: 1})
	e2.Report("any", "w", 10, proven(e2, "any", 0, wire.Report{ID: 2, Attempt: 1, Status: wire.StatusOK, Data: []byte("real")}), now)
	e2.Report("gpu", "intruder", 11, wire.Report{ID: 2, Attempt: 1, Status: wire.StatusPermanent, Data: []byte("forged")}, now)
	e2.Report("any", "w", 12, proven(e2, "any", 0, wire.Report{ID: 3, Attempt: 1, Status: wire.StatusReturned}), now)
	e2.Report("any", "w2", 13, proven(e2, "any", 12, wire.Report{ID: 3, Attempt: 1, Status: wire.StatusOK, Data: []byte("second release")}), now)
	e2.EndReplay(nil, now)
	for id, want := range map[uint64]string{2: "real", 3: "second release"} {
		if st, _ := e2.idx.State(id); st != jobindex.Done {
			t.Errorf("job %d is %v after replay, want done", id, st)
		}
		g := e2.group("g")
		found := false
		for _, o := range g.outcomes {
			if o.ID == id {
				found = string(o.Data) == want
			}
		}
		if !found {
			t.Errorf("job %d: outcomes %+v, want result %q", id, g.outcomes, want)
		}
	}
}

// TestReplayRefusesUnprovenReports, at the engine's level: reports stored while no
// coordinator ran, by a worker of pool b, about a job running in pool a (its batch in WORK), a
// job released before the restart whose batch was acknowledged, and a job never released, decide
// nothing at replay: each is refused, recorded, counted and journaled, as it would be live, also
// one stored before its job's real report. A proof for another pool does not verify, nor does
// one of a release that was returned since; the real reports, with their proofs, decide.
func TestReplayRefusesUnprovenReports(t *testing.T) {
	t.Parallel()
	r := newReplayEngine(t, 2)
	now := time.Unix(1_700_000_000, 0)
	a, b := wire.PoolKey([]string{"a"}), wire.PoolKey([]string{"b"})
	r.control(1, wire.GroupControl{Group: "g", Op: wire.OpOpen})
	r.job(2, wire.JobMeta{Group: "g"})                         // running in pool a
	r.job(3, wire.JobMeta{Group: "g"})                         // released to a before the restart, batch acknowledged, not reported
	r.job(4, wire.JobMeta{Group: "g", Require: []string{"x"}}) // never released: nobody holds x
	r.job(5, wire.JobMeta{Group: "g"})                         // returned by a, released again
	r.job(6, wire.JobMeta{Group: "g"})                         // reported by a while no coordinator ran, after a forgery
	r.control(7, wire.GroupControl{Group: "g", Op: wire.OpSeal, Count: 5})
	r.e.JournalRecord(journal.Record{Kind: journal.KindEpoch, Epoch: 1})
	alive := map[uint64]AliveJob{2: {Attempt: 1, Pool: a}}
	r.e.replay.alive = alive
	forged := []byte("FORGED-BY-ATTACKER")
	seq := uint64(10)
	report := func(pool string, rp wire.Report) {
		seq++
		r.e.Report(pool, "wb", seq, rp, now)
	}
	report(b, wire.Report{ID: 2, Attempt: 1, Status: wire.StatusOK, Data: forged})
	report(b, wire.Report{ID: 3, Attempt: 1, Status: wire.StatusPermanent, Data: forged})
	report(b, wire.Report{ID: 4, Attempt: 1, Status: wire.StatusOK, Data: forged})
	report(b, wire.Report{ID: 2, Attempt: 7, Status: wire.StatusOK, Data: forged})
	report(b, wire.Report{ID: 3, Attempt: 1, Status: wire.StatusOK, Data: forged, Proof: "0.AAAAAAAAAAAAAAAAAAAAAA"})
	report(b, proven(r.e, a, 0, wire.Report{ID: 3, Attempt: 1, Status: wire.StatusOK, Data: forged})) // pool a's proof on pool b's subject
	returned := seq + 1
	report(a, proven(r.e, a, 0, wire.Report{ID: 5, Attempt: 1, Status: wire.StatusReturned}))
	report(a, proven(r.e, a, 0, wire.Report{ID: 5, Attempt: 1, Status: wire.StatusOK, Data: forged})) // the returned release's proof
	report(b, wire.Report{ID: 6, Attempt: 1, Status: wire.StatusOK, Data: forged})
	report(a, proven(r.e, a, 0, wire.Report{ID: 6, Attempt: 1, Status: wire.StatusOK, Data: []byte("real")}))
	r.e.EndReplay(alive, now)

	want := map[uint64]jobindex.State{2: jobindex.Running, 3: jobindex.Pending, 4: jobindex.Pending, 5: jobindex.Pending, 6: jobindex.Done}
	for id, st := range want {
		if got, _ := r.e.idx.State(id); got != st {
			t.Errorf("job %d is %v after replay, want %v", id, got, st)
		}
	}
	// The seven on pool b's subject are refused (job 6's too: it came before the real report,
	// which decides); the returned release's report is stale, as it is live once a returned
	// report has put the job back to pending.
	if n := len(r.e.out.Rejections); n != 7 || r.e.stats.RejectedReports != 7 || len(r.e.out.Refused) != 7 || r.e.stats.StaleReports != 1 {
		t.Fatalf("rejections %d (counted %d, journaled %d), stale %d; want the 7 forged reports on pool b's subject refused, 1 stale: %+v",
			n, r.e.stats.RejectedReports, len(r.e.out.Refused), r.e.stats.StaleReports, r.e.out.Rejections)
	}
	for _, rj := range r.e.out.Rejections {
		if rj.Subject != r.names.ReportSubject(b, "wb") {
			t.Errorf("rejection %+v is not of a forged report", rj)
		}
	}
	if j := r.e.jobs[5]; j == nil || j.rel != returned {
		t.Fatalf("job 5's next release does not follow its returned report (at %d): %+v", returned, j)
	}
	if g := r.e.group("g"); len(g.outcomes) != 1 || g.outcomes[0].ID != 6 || string(g.outcomes[0].Data) != "real" || g.failed != 0 {
		t.Fatalf("outcomes %+v, want job 6's real one only", g.outcomes)
	}
	if j := r.e.jobs[2]; j == nil || j.pool == nil || j.pool.key != a {
		t.Fatalf("job 2 is not running in pool a: %+v", j)
	}

	// The real worker's report of job 2, with its proof, decides it.
	r.e.Report(a, "wa", 30, proven(r.e, a, 0, wire.Report{ID: 2, Attempt: 1, Status: wire.StatusOK, Data: []byte("real")}), now)
	g := r.e.group("g")
	if st, _ := r.e.idx.State(2); st != jobindex.Done || len(g.outcomes) != 2 || string(g.outcomes[1].Data) != "real" {
		t.Fatalf("job 2 after its real report: %v, outcomes %+v", st, g.outcomes)
	}
}

// TestReplayRecordsRefusalOnce: a report without a proof that was refused and journaled before
// the restart (live, or by the replay before) is not recorded again.
func TestReplayRecordsRefusalOnce(t *testing.T) {
	t.Parallel()
	r := newReplayEngine(t, 2)
	now := time.Unix(1_700_000_000, 0)
	r.control(1, wire.GroupControl{Group: "g", Op: wire.OpOpen})
	r.job(2, wire.JobMeta{Group: "g"})
	r.control(3, wire.GroupControl{Group: "g", Op: wire.OpSeal, Count: 1})
	r.e.JournalRecord(journal.Record{Kind: journal.KindEpoch, Epoch: 1})
	r.e.Report("any", "wb", 10, wire.Report{ID: 2, Attempt: 1, Status: wire.StatusOK}, now)
	r.e.JournalRecord(journal.Record{Kind: journal.KindRefused, Epoch: 2, Entries: []journal.Entry{{ID: 2, Attempt: 1, Seq: 10}}})
	r.e.EndReplay(nil, now)
	if len(r.e.out.Rejections) != 0 || r.e.stats.RejectedReports != 0 {
		t.Fatalf("a report refused before the restart was recorded again: %+v", r.e.out.Rejections)
	}
	if st, _ := r.e.idx.State(2); st != jobindex.Pending {
		t.Fatalf("job 2 is %v, want pending", st)
	}
}

// TestReturnedReleaseProofRefused: once a returned report ends a release, the proof of that
// release decides nothing, even from the pool the job is released to again; the new release's
// proof does. A report without a proof from the pool the coordinator released the job to is
// accepted (a worker of the release before proofs).
func TestReturnedReleaseProofRefused(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{Prefetch: -1})
	te.worker("w", 1)
	te.open("g")
	te.job(wire.JobMeta{Group: "g"})
	te.job(wire.JobMeta{Group: "g"})
	te.seal("g")
	j := te.releases()["any"][0]
	te.e.out = Effects{}
	te.report(j, wire.StatusReturned, "")
	returnedAt := te.evSeq
	again := te.releases()["any"]
	if len(again) != 1 || again[0] != j || j.attempt != 1 || j.rel != returnedAt {
		t.Fatalf("released again %+v, want job %d at attempt 1 after the returned report at %d", again, j.id, returnedAt)
	}
	te.evSeq++
	te.e.Report("any", "w", te.evSeq, proven(te.e, "any", 0, wire.Report{ID: j.id, Attempt: 1, Status: wire.StatusOK}), te.now)
	if r := te.lastRejection(); !strings.Contains(r, "about a release that was returned") {
		t.Fatalf("rejection %q", r)
	}
	te.report(j, wire.StatusOK, "real")
	if st := te.state(j.id); st != jobindex.Done {
		t.Fatalf("job is %v after the current release's report, want done", st)
	}

	k := te.releases()["any"][0]
	te.evSeq++
	te.e.Report("any", "w", te.evSeq, wire.Report{ID: k.id, Attempt: k.attempt, Status: wire.StatusOK}, te.now)
	if st := te.state(k.id); st != jobindex.Done || len(te.e.out.Rejections) != 0 {
		t.Fatalf("a report without a proof from the pool the job was released to: %v, rejections %+v", st, te.e.out.Rejections)
	}
}

// TestReplayReadsRecordsWithoutProofs: what a coordinator and workers of the release before
// proofs stored. A report without a proof about a job whose batch (without a proof either) is
// still in WORK, from that batch's pool, is proven by the batch and decides; one about a job
// whose batch was acknowledged proves nothing: it is refused and the job runs again (conservative:
// at least once, as for an attempt in flight); a journaled retry still holds.
func TestReplayReadsRecordsWithoutProofs(t *testing.T) {
	t.Parallel()
	r := newReplayEngine(t, 2)
	now := time.Unix(1_700_000_000, 0)
	r.control(1, wire.GroupControl{Group: "g", Op: wire.OpOpen})
	r.job(2, wire.JobMeta{Group: "g"})
	r.job(3, wire.JobMeta{Group: "g"})
	r.job(4, wire.JobMeta{Group: "g"})
	r.control(5, wire.GroupControl{Group: "g", Op: wire.OpSeal, Count: 3})
	r.e.JournalRecord(journal.Record{Kind: journal.KindEpoch, Epoch: 1})
	alive := map[uint64]AliveJob{2: {Attempt: 1, Pool: "any"}}
	r.e.replay.alive = alive
	r.e.Report("any", "w", 10, wire.Report{ID: 2, Attempt: 1, Status: wire.StatusOK, Data: []byte("old worker")}, now)
	r.e.Report("any", "w", 11, wire.Report{ID: 3, Attempt: 1, Status: wire.StatusOK, Data: []byte("old worker")}, now)
	r.e.Report("any", "w", 12, wire.Report{ID: 4, Attempt: 1, Status: wire.StatusError, Data: []byte("old worker")}, now)
	r.e.JournalRecord(journal.Record{Kind: journal.KindRetry, Epoch: 1, Entries: []journal.Entry{{ID: 4, Attempt: 1, At: now.Add(time.Minute)}}})
	r.e.EndReplay(alive, now)
	want := map[uint64]jobindex.State{2: jobindex.Done, 3: jobindex.Pending, 4: jobindex.RetryWait}
	for id, st := range want {
		if got, _ := r.e.idx.State(id); got != st {
			t.Errorf("job %d is %v after replay, want %v", id, got, st)
		}
	}
	if len(r.e.out.Rejections) != 1 || r.e.out.Rejections[0].Seq != 11 {
		t.Fatalf("rejections %+v, want job 3's report only", r.e.out.Rejections)
	}
}
