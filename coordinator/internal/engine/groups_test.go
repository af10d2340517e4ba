package engine

import (
	"testing"
	"time"

	"github.com/weavejobs/weave/internal/jobindex"
	"github.com/weavejobs/weave/internal/journal"
	"github.com/weavejobs/weave/internal/wire"
)

// replayEngine is a fresh engine of a later epoch that replays streams the test writes.
type replayEngine struct {
	t     *testing.T
	e     *Engine
	names wire.Names
}

func newReplayEngine(t *testing.T, epoch uint64) *replayEngine {
	t.Helper()
	cfg := withTestDefaults(Config{})
	names, _ := wire.NewNames("weave")
	e, err := New(cfg, names, epoch)
	if err != nil {
		t.Fatal(err)
	}
	return &replayEngine{t: t, e: e, names: names}
}

func (r *replayEngine) control(seq uint64, c wire.GroupControl) {
	r.e.Feed(r.names.GroupSubject(wire.GroupToken(c.Group)), seq, c.Header(), nil, time.Time{})
}

func (r *replayEngine) job(seq uint64, m wire.JobMeta) {
	r.e.Feed(r.names.JobSubject(wire.GroupToken(m.Group)), seq, m.Header(), nil, time.Time{})
}

// TestReplayKeepsEveryIncarnation, at the engine's level: group g ends
// with a failed job, a redrive (or a re-publish) starts a second incarnation, and the
// coordinator restarts while it runs. The first incarnation's messages are still in JOBS (its
// failed job's payload is kept), so the feed shows a sealed g when the second open comes:
// replay must not refuse that open (which would delete the new incarnation's messages and drop
// their outcomes as stale), and both incarnations must end where they are.
func TestReplayKeepsEveryIncarnation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		alive bool // the second incarnation's job is still in WORK, else it was reported ok
	}{{"running", true}, {"reported", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newReplayEngine(t, 2)
			now := time.Unix(1_700_000_000, 0)
			// Incarnation 1 (open at 1): job 2 done, job 3 failed; its summary is stored.
			r.control(1, wire.GroupControl{Group: "g", Op: wire.OpOpen})
			r.job(2, wire.JobMeta{Group: "g", Key: "a"})
			r.job(3, wire.JobMeta{Group: "g", Key: "b"})
			r.control(4, wire.GroupControl{Group: "g", Op: wire.OpSeal, Count: 2})
			// Incarnation 2 (open at 5): the redrive of job 3 as job 6.
			r.control(5, wire.GroupControl{Group: "g", Op: wire.OpOpen})
			r.job(6, wire.JobMeta{Group: "g", Key: "b"})
			r.control(7, wire.GroupControl{Group: "g", Op: wire.OpSeal, Count: 1})
			if n := len(r.e.out.Rejections); n != 0 {
				t.Fatalf("replay refused %d messages: %+v", n, r.e.out.Rejections)
			}
			r.e.JournalRecord(journal.Record{Kind: journal.KindEpoch, Epoch: 1})
			alive := map[uint64]AliveJob{}
			if tc.alive {
				alive[6] = AliveJob{Attempt: 1, Pool: "any"}
			} else {
				r.e.Report("any", "w", 20, proven(r.e, "any", 0, wire.Report{ID: 6, Attempt: 1, Status: wire.StatusOK}), now)
			}
			r.e.OutcomeReplay("g", 1, []wire.Outcome{{ID: 2, Key: "a", State: wire.FinalDone, Attempts: 1}, {ID: 3, Key: "b", State: wire.FinalFailed, Attempts: 5}}, nil, 0, 1, now, false)
			r.e.OutcomeReplay("g", 1, nil, &wire.GroupSummary{Jobs: 2, Done: 1, Failed: 1}, 0, 2, now, false)
			r.e.EndReplay(alive, now)

			if len(r.e.out.purges) != 1 || r.e.out.purges[0].openSeq != 1 {
				t.Fatalf("the complete first incarnation is not purged: %+v", r.e.out.purges)
			}
			second := r.e.group("g")
			if second == nil || second.openSeq != 5 || second.admitted != 1 {
				t.Fatalf("second incarnation after replay: %+v", second)
			}
			if tc.alive {
				if st, _ := r.e.idx.State(6); st != jobindex.Running {
					t.Fatalf("job 6 is %v after replay, want running", st)
				}
				r.e.Learn(6, &wire.JobMeta{Key: "b"}) // the next release would learn it; here the report follows
				r.e.Report("any", "w", 21, wire.Report{ID: 6, Attempt: 1, Status: wire.StatusOK}, now)
			}
			if st, _ := r.e.idx.State(6); st != jobindex.Done {
				t.Fatalf("job 6 is %v, want done", st)
			}
			if len(r.e.out.summaries) != 1 || r.e.out.summaries[0] != second || second.done != 1 {
				t.Fatalf("second incarnation did not complete: summaries %+v", r.e.out.summaries)
			}
		})
	}
}

// TestReplayOlderIncarnationIncomplete: the coordinator decided the first incarnation's last
// outcome, accepted the second open, and crashed before storing the first one's outcome and
// summary. Replay has both incarnations; the first completes from its report, the second runs.
func TestReplayOlderIncarnationIncomplete(t *testing.T) {
	t.Parallel()
	r := newReplayEngine(t, 2)
	now := time.Unix(1_700_000_000, 0)
	r.control(1, wire.GroupControl{Group: "g", Op: wire.OpOpen})
	r.job(2, wire.JobMeta{Group: "g"})
	r.control(3, wire.GroupControl{Group: "g", Op: wire.OpSeal, Count: 1})
	r.control(4, wire.GroupControl{Group: "g", Op: wire.OpOpen})
	r.job(5, wire.JobMeta{Group: "g"})
	r.control(6, wire.GroupControl{Group: "g", Op: wire.OpSeal, Count: 1})
	r.e.Report("any", "w", 10, proven(r.e, "any", 0, wire.Report{ID: 2, Attempt: 1, Status: wire.StatusOK}), now)
	r.e.EndReplay(nil, now)
	if len(r.e.out.summaries) != 1 || r.e.out.summaries[0].openSeq != 1 {
		t.Fatalf("first incarnation not complete from its report: %+v", r.e.out.summaries)
	}
	if st, _ := r.e.idx.State(5); st != jobindex.Pending {
		t.Fatalf("second incarnation's job is %v, want pending", st)
	}
	if rec := r.e.groups.table.latest("g"); rec == nil || rec.openSeq != 4 || rec.flags&recInLine == 0 {
		t.Fatalf("second incarnation not waiting for a slot: %+v", rec)
	}
}

// TestLiveOpenOfRunningSealedGroupRefused: outside replay, an open of a sealed group that still
// runs is refused, as before.
func TestLiveOpenOfRunningSealedGroupRefused(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{})
	te.open("g")
	te.job(wire.JobMeta{Group: "g"})
	te.seal("g")
	te.open("g")
	if len(te.e.out.Rejections) != 1 {
		t.Fatalf("rejections %+v, want the second open refused", te.e.out.Rejections)
	}
}

// TestOpenGroupsWithoutJobsDoNotBlock: groups opened and never fed (producers that died after
// open) hold no feeder slot, so a later group runs at once.
func TestOpenGroupsWithoutJobsDoNotBlock(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{Feeders: 2})
	te.worker("w", 4)
	for _, g := range []string{"s1", "s2", "s3"} {
		te.open(g)
	}
	te.open("g")
	for range 3 {
		te.job(wire.JobMeta{Group: "g"})
	}
	te.seal("g")
	if n := len(te.releases()["any"]); n != 3 {
		t.Fatalf("released %d of g's 3 jobs behind 3 open groups without jobs", n)
	}
}

// TestAbandonSilentGroup: an unsealed group whose producer publishes nothing for AbandonAfter
// is sealed by the coordinator (a stored seal marked abandoned), completes with the jobs it has,
// and its summary says so. A keep-alive or a job puts the deadline off.
func TestAbandonSilentGroup(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{AbandonAfter: time.Minute})
	te.worker("w", 4)
	te.open("g")
	a := te.job(wire.JobMeta{Group: "g"})
	for _, j := range te.releases()["any"] {
		te.report(j, wire.StatusOK, "")
	}
	te.now = te.now.Add(50 * time.Second)
	te.control(wire.GroupControl{Group: "g", Op: wire.OpKeepAlive})
	te.now = te.now.Add(50 * time.Second)
	te.e.Tick(te.now)
	if len(te.e.out.abandons) != 0 {
		t.Fatal("abandoned a group kept alive 50s ago")
	}
	te.now = te.now.Add(11 * time.Second)
	te.e.Tick(te.now)
	if len(te.e.out.abandons) != 1 || te.e.out.abandons[0].id != "g" {
		t.Fatalf("abandons %+v, want g", te.e.out.abandons)
	}
	te.e.out.abandons = nil
	te.now = te.now.Add(2 * time.Second)
	te.e.Tick(te.now)
	if len(te.e.out.abandons) != 0 {
		t.Fatal("asked for the seal again before another AbandonAfter")
	}
	if st := te.e.Status(); st.Unsealed != 1 || len(st.Groups) != 1 || st.Groups[0].LastHeard.IsZero() {
		t.Fatalf("status of the unsealed group: unsealed %d, groups %+v", st.Unsealed, st.Groups)
	}
	// The seal the coordinator stored comes back through the feed.
	te.control(wire.GroupControl{Group: "g", Op: wire.OpSeal, Count: 1, Abandoned: true})
	if len(te.e.out.summaries) != 1 || !te.e.out.summaries[0].abandoned {
		t.Fatalf("summaries %+v, want g complete and abandoned", te.e.out.summaries)
	}
	late := te.job(wire.JobMeta{Group: "g"})
	if te.e.stats.Admitted != 1 || len(te.e.out.Rejections) != 1 {
		t.Fatalf("a job after the abandon seal: admitted %d, rejections %+v (job %d after %d)", te.e.stats.Admitted, te.e.out.Rejections, late, a)
	}
	if st := te.e.Status(); st.Unsealed != 0 {
		t.Fatalf("status still counts %d unsealed groups", st.Unsealed)
	}
}

// TestCancelUnsealedGroup: cancel ends a group that is not sealed (its producer may be gone):
// pending jobs end canceled, running ones are told to stop, and the group completes once they
// report. Later jobs are refused; the producer's own seal is not an error.
func TestCancelUnsealedGroup(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{Prefetch: -1})
	te.worker("w", 1)
	te.open("g")
	a := te.job(wire.JobMeta{Group: "g"})
	b := te.job(wire.JobMeta{Group: "g"})
	rel := te.releases()["any"]
	te.control(wire.GroupControl{Group: "g", Op: wire.OpCancel})
	if te.state(b) != jobindex.Canceled || len(te.e.out.Cancels) != 1 || te.e.out.Cancels[0] != a {
		t.Fatalf("after cancel: b %v, cancels %v", te.state(b), te.e.out.Cancels)
	}
	te.report(rel[0], wire.StatusCanceled, "context canceled")
	if len(te.e.out.summaries) != 1 || te.e.out.summaries[0].canceled != 2 {
		t.Fatalf("canceled unsealed group did not complete: %+v", te.e.out.summaries)
	}
	te.job(wire.JobMeta{Group: "g"})
	te.seal("g")
	if len(te.e.out.Rejections) != 1 {
		t.Fatalf("rejections %+v, want only the late job", te.e.out.Rejections)
	}
}
