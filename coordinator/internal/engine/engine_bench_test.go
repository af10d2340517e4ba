package engine

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/weavejobs/weave/internal/wire"
)

// BenchmarkReleaseFromBacklog measures the engine alone (no NATS) scheduling from a backlog:
// pending jobs in groups of 1,000, admitted and sealed, then one worker of 64 slots whose every
// job is reported done at once, and a group of 1,000 joins for every 1,000 jobs done. One op is one
// job released and reported; the cost per op should not grow with the backlog.
func BenchmarkReleaseFromBacklog(b *testing.B) {
	for _, pending := range []int{10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("pending=%d", pending), func(b *testing.B) {
			te := newTestEngine(&testing.T{}, Config{})
			groups := 0
			addGroup := func() {
				group := fmt.Sprint("g", groups)
				groups++
				te.open(group)
				for range 1000 {
					te.job(wire.JobMeta{Group: group})
				}
				te.seal(group)
			}
			for range pending / 1000 {
				addGroup()
			}
			te.worker("w", 64)
			var running []*job
			reported := 0
			b.ResetTimer()
			for b.Loop() {
				if len(running) == 0 {
					for _, js := range te.releases() {
						running = append(running, js...)
					}
					if len(running) == 0 {
						b.Fatal("nothing released")
					}
				}
				j := running[len(running)-1]
				running = running[:len(running)-1]
				te.report(j, wire.StatusOK, "")
				te.e.out = Effects{}
				// A group of 1,000 joins for every 1,000 jobs done, so the backlog stays at
				// pending however long the benchmark runs.
				if reported++; reported%1000 == 0 {
					b.StopTimer()
					addGroup()
					b.StartTimer()
				}
			}
		})
	}
}

// BenchmarkReleaseToFleet measures the engine alone (no NATS) sharing a fleet between 200
// groups, as `weave bench throughput` does: the oldest jobs released are reported done, and a
// release decision follows each worker's batch of reports, so each decision releases about one
// batch. One op is one job reported, and released in its place.
func BenchmarkReleaseToFleet(b *testing.B) {
	for _, fleet := range []struct{ workers, slots int }{{1, 8}, {4, 8}, {16, 4}, {1, 64}} {
		b.Run(fmt.Sprintf("fleet=%dx%d", fleet.workers, fleet.slots), func(b *testing.B) {
			te := newTestEngine(&testing.T{}, Config{})
			groups := 0
			publish := func() {
				for range 200 {
					group := fmt.Sprint("g", groups)
					groups++
					te.open(group)
					for range 100 {
						te.job(wire.JobMeta{Group: group})
					}
					te.seal(group)
				}
			}
			publish()
			for w := range fleet.workers {
				te.worker(fmt.Sprint("w", w), fleet.slots)
			}
			var running []*job
			release := func() {
				for _, js := range te.releases() {
					running = append(running, js...)
				}
				// What the run does once outcomes and summaries are stored.
				for _, g := range te.e.out.outcomes {
					te.e.retention.outcomeStored(g.outcomeSeqs)
					g.outcomes, g.outcomeSeqs = nil, nil
				}
				for _, g := range te.e.out.summaries {
					te.e.forget(g)
				}
				te.e.out = Effects{}
			}
			release()
			reported := 0
			for b.Loop() {
				te.report(running[0], wire.StatusOK, "")
				running = running[1:]
				if reported++; reported%fleet.slots == 0 || len(running) == 0 {
					release()
				}
				if len(running) == 0 {
					b.StopTimer()
					publish()
					release()
					b.StartTimer()
				}
			}
		})
	}
}

// BenchmarkExpireRetained measures the end of retention with many finished groups retained (as a
// day of single jobs makes): one op retains a group and expires the oldest, so the number retained
// stays put. The cost per op should not grow with it. heap-B/retained is the heap each retained
// group holds, its ID included.
func BenchmarkExpireRetained(b *testing.B) {
	for _, retained := range []int{10_000, 1_000_000} {
		b.Run(fmt.Sprintf("retained=%d", retained), func(b *testing.B) {
			te := newTestEngine(&testing.T{}, Config{ResultRetention: time.Hour})
			at := te.now
			seq := uint64(0)
			add := func() {
				seq++
				te.e.retain(fmt.Sprint("s", seq), seq, seq, false, seq, at.Add(time.Duration(seq)*time.Millisecond), wire.GroupSummary{Jobs: 1, Done: 1}, true)
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			for range retained {
				add()
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			b.ResetTimer()
			for range b.N {
				add()
				te.e.ExpireRetained(at.Add(time.Hour + time.Duration(seq-uint64(retained))*time.Millisecond))
			}
			if got := te.e.retention.retained.len(); got != retained {
				b.Fatalf("%d retained, want %d", got, retained)
			}
			b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(retained), "heap-B/retained")
		})
	}
}

// BenchmarkLookupRetained measures what asks about finished groups while many are retained (as a
// day of single jobs makes): one op opens a group that runs after a retained group, binding to
// its incarnation and reading how it ended, inspects another retained group by its ID, and a
// finished single job by its ID. The cost per op should not grow with the number retained.
func BenchmarkLookupRetained(b *testing.B) {
	for _, retained := range []int{10_000, 1_000_000} {
		b.Run(fmt.Sprintf("retained=%d", retained), func(b *testing.B) {
			te := newTestEngine(&testing.T{}, Config{ResultRetention: time.Hour})
			for i := range retained {
				seq := uint64(i + 1)
				te.e.retain(fmt.Sprint("s", seq), seq, seq, false, seq, te.now, wire.GroupSummary{Jobs: 1, Done: 1}, true)
			}
			te.seq = uint64(retained) // JOBS sequences continue after the retained groups'
			n := 0
			for b.Loop() {
				n++
				dep := fmt.Sprint("s", 1+(n*7919)%retained)
				te.control(wire.GroupControl{Group: fmt.Sprint("after", n), Op: wire.OpOpen, After: []wire.After{{Group: dep}}})
				if rep := te.e.Inspect(wire.InspectRequest{Group: fmt.Sprint("s", 1+(n*104729)%retained)}); rep.Group == nil {
					b.Fatal("a retained group not found")
				}
				job := uint64(1 + (n*15485863)%retained) // a single job: its own incarnation
				if rep := te.e.Inspect(wire.InspectRequest{Job: job}); len(rep.Candidates) == 0 || rep.Candidates[0].Incarnation != job {
					b.Fatalf("job %d: candidates %+v, want its incarnation first", job, rep.Candidates)
				}
			}
		})
	}
}

// BenchmarkInspectBesideDelayed measures inspecting a running group (weave group) while other
// groups hold many delayed jobs: one op is one inspection of a group that has none. Its cost
// should not grow with the delayed jobs.
func BenchmarkInspectBesideDelayed(b *testing.B) {
	for _, delayed := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("delayed=%d", delayed), func(b *testing.B) {
			te := newTestEngine(&testing.T{}, Config{})
			for g := range delayed / 1000 {
				group := fmt.Sprint("later", g)
				te.open(group)
				for range 1000 {
					te.job(wire.JobMeta{Group: group, RunAt: te.now.Add(time.Hour)})
				}
				te.seal(group)
			}
			te.open("now")
			te.job(wire.JobMeta{Group: "now"})
			for b.Loop() {
				if rep := te.e.Inspect(wire.InspectRequest{Group: "now"}); rep.Group == nil || !rep.Group.NextRunAt.IsZero() {
					b.Fatalf("inspect: %+v", rep.Group)
				}
			}
		})
	}
}
