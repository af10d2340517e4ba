package engine

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/weavejobs/weave/internal/jobindex"
	"github.com/weavejobs/weave/internal/wire"
)

// redriveCase is a group x whose first incarnation (open 1, job 2, seal 3) completed with job 2
// failed (its report at EVENTS 30), then inputs stored from 4 on. Its summary is stored before
// the inputs come, unless summaryLate: then it completes in memory and its summary is stored only
// after them (live), or never (replay). live returns the engine that read the inputs as they came;
// replayed the engine of a coordinator that started after they were stored.
type redriveCase struct {
	t           *testing.T
	inputs      []jobsMsg
	summaryLate bool
	report      wire.Report
	outcome     wire.Outcome
}

func (rc *redriveCase) first(names wire.Names) []jobsMsg {
	return []jobsMsg{
		controlMsg(names, wire.GroupControl{Group: "x", Op: wire.OpOpen}),
		jobMsg(names, wire.JobMeta{Group: "x", Key: "k"}),
		controlMsg(names, wire.GroupControl{Group: "x", Op: wire.OpSeal, Count: 1}),
	}
}

// live returns the live engine with the rejections and redrive decisions made before the inputs
// cleared.
func (rc *redriveCase) live() *Engine {
	te := newTestEngine(rc.t, Config{Prefetch: -1})
	e := te.e
	feedFrom(e, 1, rc.first(e.names))
	te.worker("w", 1)
	if rel := te.releases()["any"]; len(rel) != 1 || rel[0].id != 2 {
		rc.t.Fatalf("released %v, want job 2", ids(rel))
	}
	rc.report = proven(e, "any", 0, wire.Report{ID: 2, Attempt: 1, Status: wire.StatusPermanent, Data: []byte("no")})
	e.Report("any", "w", 30, rc.report, te.now)
	g := e.group("x")
	if g == nil || !g.complete || len(g.outcomes) != 1 {
		rc.t.Fatalf("x's first incarnation: %+v, want complete with its failed job", g)
	}
	rc.outcome = g.outcomes[0]
	stored := func() {
		g.keepJobs = e.keepsJobs(g)
		e.retain(g.id, g.openSeq, 40, g.keepJobs, g.lastSeq, te.now, g.summary(), false)
		e.forget(g)
	}
	if !rc.summaryLate {
		stored()
	}
	takeRejections(e)
	takeRedrives(e)
	feedFrom(e, 4, rc.inputs)
	if rc.summaryLate {
		stored()
	}
	return e
}

func (rc *redriveCase) replayed() *Engine {
	te := newTestEngine(rc.t, Config{Prefetch: -1})
	e := te.restarted()
	feedFrom(e, 1, rc.first(e.names))
	feedFrom(e, 4, rc.inputs)
	e.Report("any", "w", 30, rc.report, te.now)
	if !rc.summaryLate {
		e.OutcomeReplay("x", 1, []wire.Outcome{rc.outcome}, &wire.GroupSummary{Jobs: 1, Failed: 1}, 3, 40, te.now, false)
	} else {
		e.OutcomeReplay("x", 1, []wire.Outcome{rc.outcome}, nil, 0, 40, te.now, false)
	}
	e.EndReplay(nil, te.now)
	return e
}

// decisions are the redrive decisions e made, as "<request>: accepted" or "<request>: <code>
// <incarnation>".
func decisions(e *Engine) []string {
	var out []string
	for _, o := range e.out.Redrives {
		d := "accepted"
		if o.Refuse != nil {
			d = fmt.Sprintf("%s %d", o.Refuse.Code, o.Refuse.Incarnation)
		}
		out = append(out, fmt.Sprintf("%d: %s", o.Ask.Seq, d))
	}
	return out
}

// sameAsLive checks that the replayed engine rejected the messages the live one did, counted
// alike, and made the same redrive decisions; it returns the live rejections. A job's reason may
// differ: live, the incarnation before was forgotten once its summary was stored (a job "for a
// group that is not open"), which replay, reading JOBS before RESULTS, still tracks ("after the
// seal").
func sameAsLive(t *testing.T, live, replayed *Engine) []Rejection {
	t.Helper()
	want, got := takeRejections(live), takeRejections(replayed)
	same := len(got) == len(want)
	for i := 0; same && i < len(got); i++ {
		same = got[i].Subject == want[i].Subject && got[i].Seq == want[i].Seq && (got[i].Reason == want[i].Reason || strings.HasPrefix(got[i].Subject, live.names.JobSubject("")))
	}
	if !same {
		t.Errorf("replay rejected\n%+v\nlive\n%+v", got, want)
	}
	if w, g := decisions(live), decisions(replayed); !reflect.DeepEqual(g, w) {
		t.Errorf("replay decided redrives %v, live %v", g, w)
	}
	for _, s := range []struct {
		name      string
		got, want uint64
	}{{"rejected", replayed.stats.Rejected, live.stats.Rejected}, {"refused", replayed.stats.Refused, live.stats.Refused},
		{"admitted", replayed.stats.Admitted, live.stats.Admitted}} {
		if s.got != s.want {
			t.Errorf("%s: %d after replay, %d live", s.name, s.got, s.want)
		}
	}
	return want
}

// TestReplayRefusesOpenWhileRedriveStarts: a producer's open of x (with a job and a seal) stored
// after a redrive request of x, while no coordinator reads them, is refused at replay as live,
// where the request, read first, was accepted and the open came while the redrive started: the
// same records for the same reasons, counted alike, and the request accepted (replay used to
// start a new incarnation with the open, and refuse the request as running). Stored before the
// request, the open starts the next incarnation and the request is refused, live and at replay;
// and so when the summary of the incarnation before was not stored yet when the request came.
func TestReplayRefusesOpenWhileRedriveStarts(t *testing.T) {
	t.Parallel()
	names, _ := wire.NewNames("")
	redrive := controlMsg(names, wire.GroupControl{Group: "x", Op: wire.OpRedrive})
	open := controlMsg(names, wire.GroupControl{Group: "x", Op: wire.OpOpen})
	job := jobMsg(names, wire.JobMeta{Group: "x", Key: "p"})
	seal := controlMsg(names, wire.GroupControl{Group: "x", Op: wire.OpSeal, Count: 1})

	for _, tc := range []struct {
		name        string
		inputs      []jobsMsg // from 4 on
		summaryLate bool
		decided     string // live
		refused     int    // messages, live
	}{
		{"request first", []jobsMsg{redrive, open, job, seal}, false, "4: accepted", 3},
		{"open first", []jobsMsg{open, job, seal, redrive}, false, "7: running 4", 0},
		{"summary stored after the open", []jobsMsg{redrive, open, job, seal}, true, "4: running 5", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := &redriveCase{t: t, inputs: tc.inputs, summaryLate: tc.summaryLate}
			live, e := rc.live(), rc.replayed()
			if got := decisions(live); len(got) != 1 || got[0] != tc.decided {
				t.Fatalf("redrives decided live %v, want %s", got, tc.decided)
			}
			want := sameAsLive(t, live, e)
			if len(want) != tc.refused {
				t.Fatalf("live rejections %+v, want %d", want, tc.refused)
			}
			r := e.groups.table.latest("x")
			if tc.refused == 0 {
				if r == nil || r.openSeq == 1 {
					t.Errorf("x after replay: %+v, want the producer's incarnation", r)
				}
				return
			}
			if want[0].Seq != 5 || want[0].Reason != BeingRedriven("x", 4) || want[1].Seq != 6 || want[2].Seq != 7 {
				t.Errorf("live rejections %+v, want the open as being redriven, its job and its seal", want)
			}
			if r == nil || r.openSeq != 1 || e.groups.table.len() != 1 {
				t.Errorf("x after replay: %+v, %d incarnations; want only the first", r, e.groups.table.len())
			}
			if _, ok := e.idx.State(6); ok {
				t.Error("the refused open's job was admitted")
			}
		})
	}
}

// TestReplayRefusesOpenBeforeRedriveOpen: the redrive's own open (Weave-Redrive) stored after a
// producer's open says the request was accepted before that open came: the open is refused at
// replay as live, and the redrive's open starts its own incarnation (replay used to have it
// resume the producer's open incarnation, or defer it after that one), whether the producer's
// incarnation was sealed or not; a single job is refused alike.
func TestReplayRefusesOpenBeforeRedriveOpen(t *testing.T) {
	t.Parallel()
	names, _ := wire.NewNames("")
	for _, tc := range []struct {
		name string
		mid  []jobsMsg // stored between the request (4) and the redrive's open
	}{
		{"open", []jobsMsg{controlMsg(names, wire.GroupControl{Group: "x", Op: wire.OpOpen}), jobMsg(names, wire.JobMeta{Group: "x", Key: "p"})}},
		{"sealed", []jobsMsg{controlMsg(names, wire.GroupControl{Group: "x", Op: wire.OpOpen}), jobMsg(names, wire.JobMeta{Group: "x", Key: "p"}),
			controlMsg(names, wire.GroupControl{Group: "x", Op: wire.OpSeal, Count: 1})}},
		{"single", []jobsMsg{jobMsg(names, wire.JobMeta{Group: "x", Key: "p", Single: true})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inputs := append([]jobsMsg{controlMsg(names, wire.GroupControl{Group: "x", Op: wire.OpRedrive})}, tc.mid...)
			openSeq := uint64(4 + len(inputs))
			inputs = append(inputs,
				controlMsg(names, wire.GroupControl{Group: "x", Op: wire.OpOpen, Redrive: 4, Proof: testKey.RedriveProof("x", 4)}),
				redrivenJobMsg(names, wire.JobMeta{Group: "x", Key: "k", RedriveOf: 2}, openSeq),
				controlMsg(names, wire.GroupControl{Group: "x", Op: wire.OpSeal, Count: 1}))
			rc := &redriveCase{t: t, inputs: inputs}
			live, e := rc.live(), rc.replayed()
			if got := decisions(live); len(got) != 1 || got[0] != "4: accepted" {
				t.Fatalf("redrives decided live %v, want request 4 accepted", got)
			}
			takeRedrives(live) // replay read its open: nothing to decide
			want := sameAsLive(t, live, e)
			if len(want) != len(tc.mid) || want[0].Seq != 5 || want[0].Reason != BeingRedriven("x", 4) {
				t.Errorf("live rejections %+v, want the %d messages between the request and its open, the first as being redriven", want, len(tc.mid))
			}
			for _, eng := range []*Engine{live, e} {
				g := eng.group("x")
				if g == nil || g.openSeq != openSeq || g.admitted != 1 || !g.sealed || !g.redriven {
					t.Fatalf("x: %+v, want the redrive's incarnation opened at %d with its job, sealed", g, openSeq)
				}
				if st, _ := eng.idx.State(openSeq + 1); st != jobindex.Pending {
					t.Errorf("the redriven job is %v, want pending", st)
				}
			}
			if e.groups.table.len() != 2 {
				t.Errorf("%d incarnations after replay, want the first and the redrive's", e.groups.table.len())
			}
		})
	}
}

// TestReplayRefusesCancelAfterCompletionInMemory: group c's job was reported done, then a cancel
// of c was stored, and the coordinator stopped before storing c's summary (or none ran). Live, the
// group was complete when the cancel came: refused, recorded and counted; replay does the same,
// and c completes as it ended (replay used to apply the cancel, unrecorded). Had the cancel come
// while the job ran (and changed nothing), what is stored is the same: replay refuses it too, so
// that it never accepts a cancel the live coordinator refused. A cancel that sealed the group is
// applied, as live.
func TestReplayRefusesCancelAfterCompletionInMemory(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{Prefetch: -1})
	te.worker("w", 2)
	names := te.e.names
	inputs := []jobsMsg{
		controlMsg(names, wire.GroupControl{Group: "c", Op: wire.OpOpen}),
		jobMsg(names, wire.JobMeta{Group: "c"}), // 2
		controlMsg(names, wire.GroupControl{Group: "c", Op: wire.OpSeal, Count: 1}),
		controlMsg(names, wire.GroupControl{Group: "c", Op: wire.OpCancel}), // 4
		controlMsg(names, wire.GroupControl{Group: "u", Op: wire.OpOpen}),   // 5
		jobMsg(names, wire.JobMeta{Group: "u"}),                             // 6
		controlMsg(names, wire.GroupControl{Group: "u", Op: wire.OpCancel}), // 7: seals u
	}
	feedFrom(te.e, 1, inputs[:3])
	feedFrom(te.e, 5, inputs[4:6])
	rel := te.releases()["any"]
	if len(rel) != 2 {
		t.Fatalf("released %v, want jobs 2 and 6", ids(rel))
	}
	var reports []wire.Report
	for _, j := range rel {
		r := proven(te.e, "any", 0, wire.Report{ID: j.id, Attempt: 1, Status: wire.StatusOK})
		reports = append(reports, r)
		te.e.Report("any", "w", 30+j.id, r, te.now)
	}
	takeRejections(te.e)
	feedFrom(te.e, 4, inputs[3:4])
	feedFrom(te.e, 7, inputs[6:])
	want := takeRejections(te.e)
	if len(want) != 1 || want[0].Seq != 4 || want[0].Reason != CancelComplete("c") || te.e.stats.Refused != 1 {
		t.Fatalf("live: rejections %+v, refused %d; want the cancel at 4 refused", want, te.e.stats.Refused)
	}

	e := te.restarted()
	feedFrom(e, 1, inputs)
	for _, r := range reports {
		e.Report("any", "w", 30+r.ID, r, te.now)
	}
	e.EndReplay(nil, te.now)
	if got := takeRejections(e); !reflect.DeepEqual(got, want) {
		t.Errorf("replay rejected %+v, live %+v", got, want)
	}
	if e.stats.Refused != 1 || e.stats.Rejected != 0 {
		t.Errorf("replay: refused %d, rejected %d; want the cancel refused", e.stats.Refused, e.stats.Rejected)
	}
	sums := map[string]wire.GroupSummary{}
	for _, g := range e.out.summaries {
		sums[g.id] = g.summary()
	}
	if sums["c"] != (wire.GroupSummary{Jobs: 1, Done: 1}) || sums["u"] != (wire.GroupSummary{Jobs: 1, Done: 1}) {
		t.Errorf("summaries %+v, want c and u complete with their job done", sums)
	}

	// The other order: read while c's job runs, the cancel is applied (the job told to stop),
	// unrecorded, and the job ends done all the same. What is stored is the same as above, so
	// replay refuses it: the one case where it records a refusal live did not make.
	other := newTestEngine(t, Config{Prefetch: -1})
	other.worker("w", 2)
	feedFrom(other.e, 1, inputs[:3])
	if rel := other.releases()["any"]; len(rel) != 1 {
		t.Fatalf("released %v, want job 2", ids(rel))
	}
	feedFrom(other.e, 4, inputs[3:4])
	other.e.Report("any", "w", 32, proven(other.e, "any", 0, wire.Report{ID: 2, Attempt: 1, Status: wire.StatusOK}), other.now)
	if got := takeRejections(other.e); len(got) != 0 || other.e.stats.Refused != 0 || len(other.e.out.Cancels) != 1 || other.state(2) != jobindex.Done {
		t.Errorf("cancel while the job ran: rejections %+v, refused %d, cancels %v; want it applied", got, other.e.stats.Refused, other.e.out.Cancels)
	}
}

// TestReplayRedriveWithoutTrackedIncarnation: x's failed incarnation is retained but none of its
// messages is in JOBS (no incarnation of x is tracked). A redrive request, an open with a job and
// a cancel stored after it are decided at replay as live, where the request was accepted: the
// open and its job refused, the cancel refused as of a group not open, the request accepted.
func TestReplayRedriveWithoutTrackedIncarnation(t *testing.T) {
	t.Parallel()
	names, _ := wire.NewNames("")
	inputs := []jobsMsg{
		controlMsg(names, wire.GroupControl{Group: "x", Op: wire.OpRedrive}), // 4
		controlMsg(names, wire.GroupControl{Group: "x", Op: wire.OpOpen}),    // 5
		jobMsg(names, wire.JobMeta{Group: "x", Key: "p"}),                    // 6
		controlMsg(names, wire.GroupControl{Group: "x", Op: wire.OpCancel}),  // 7
	}
	te := newTestEngine(t, Config{Prefetch: -1})
	live, e := te.e, te.restarted()
	for _, eng := range []*Engine{live, e} {
		eng.retain("x", 1, 10, true, 3, te.now, wire.GroupSummary{Jobs: 1, Failed: 1}, false)
		feedFrom(eng, 4, inputs)
	}
	e.EndReplay(nil, te.now)
	want := sameAsLive(t, live, e)
	if len(want) != 3 || want[0].Reason != BeingRedriven("x", 4) || want[1].Reason != "job for a group that is not open: x" || want[2].Reason != CancelNotOpen("x") {
		t.Errorf("live rejections %+v, want the open, its job and the cancel", want)
	}
	if e.groups.table.latest("x") != nil || e.groups.table.len() != 0 {
		t.Errorf("x is tracked after replay: %+v", e.groups.table.latest("x"))
	}
}
