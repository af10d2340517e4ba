package spreader_test

import (
	"fmt"
	"iter"
	"testing"
	"time"

	"github.com/weavejobs/weave/spreader"
)

var sink int

// spreadJobs is the number of jobs each BenchmarkSpread op spreads. One op is
// enough for a steady figure, so -benchtime=1x works.
const spreadJobs = 10_000_000

// benchGroups returns spreadJobs jobs in groups of size jobs. The groups are
// built lazily, as a real producer's would be.
func benchGroups(size int) iter.Seq[iter.Seq[int]] {
	return func(yield func(iter.Seq[int]) bool) {
		for start := 0; start < spreadJobs; start += size {
			if !yield(countFrom(start, size)) {
				return
			}
		}
	}
}

func countFrom(start, n int) iter.Seq[int] {
	return func(yield func(int) bool) {
		for i := start; i < start+n; i++ {
			if !yield(i) {
				return
			}
		}
	}
}

// BenchmarkSpread spreads 10 million jobs per op. It reports jobs/s and, from
// the same run with the timer stopped, the jobs/s of plain concatenation over
// the same iterators, and the ratio of the two.
func BenchmarkSpread(b *testing.B) {
	for _, size := range []int{1000, 10} {
		for _, feeders := range []int{1, 2, 4, 9, 64} {
			b.Run(fmt.Sprintf("group=%d/feeders=%d", size, feeders), func(b *testing.B) {
				b.ReportAllocs()
				var concat time.Duration
				for b.Loop() {
					for job := range spreader.Spread(benchGroups(size), feeders) {
						sink += job
					}

					b.StopTimer()
					start := time.Now()
					for g := range benchGroups(size) {
						for job := range g {
							sink += job
						}
					}
					concat += time.Since(start)
					b.StartTimer()
				}
				spreadRate := float64(b.N) * spreadJobs / b.Elapsed().Seconds()
				concatRate := float64(b.N) * spreadJobs / concat.Seconds()
				b.ReportMetric(spreadRate, "jobs/s")
				b.ReportMetric(concatRate, "concat-jobs/s")
				b.ReportMetric(spreadRate/concatRate, "of-concat")
			})
		}
	}
}

// benchScheduler is what the Next/Done benchmark drives: the Scheduler, or the
// test model, whose Next is a linear scan over the slots. pushOne takes no
// variadic slice, which would escape through the interface and add an
// allocation that real callers do not pay.
type benchScheduler interface {
	AddGroup(g int) error
	pushOne(g, job int)
	Next() (int, int, bool)
	Done(g int)
}

type schedulerAdapter struct{ *spreader.Scheduler[int, int] }

func (s schedulerAdapter) pushOne(g, job int) { _ = s.Push(g, job) }

type modelAdapter struct{ *model }

func (m modelAdapter) pushOne(g, job int) { _ = m.Push(g, job) }

func newBenchScheduler(b *testing.B, impl string, cfg spreader.Config) benchScheduler {
	if impl == "scan" {
		return modelAdapter{newModel(cfg)}
	}
	s, err := spreader.NewScheduler[int, int](cfg)
	if err != nil {
		b.Fatal(err)
	}
	return schedulerAdapter{s}
}

// BenchmarkSchedulerNextDone measures the release path with every slot busy.
// There are as many groups as slots and as many workers as groups. In each op a
// worker's job finishes (Done), one job is pushed back to keep the groups
// supplied (Push), and the worker takes the next job (Next). impl=scan runs the
// same ops on the reference model, which scans every slot per Next.
func BenchmarkSchedulerNextDone(b *testing.B) {
	type run struct {
		groups int
		impl   string
	}
	runs := []run{{1000, "scheduler"}, {1000, "scan"}, {100_000, "scheduler"}}
	for _, r := range runs {
		for _, policy := range []spreader.Policy{spreader.LeastInFlight, spreader.RoundRobin} {
			b.Run(fmt.Sprintf("groups=%d/%v/impl=%s", r.groups, policy, r.impl), func(b *testing.B) {
				b.ReportAllocs()
				s := newBenchScheduler(b, r.impl, spreader.Config{Feeders: r.groups, Policy: policy})
				for g := range r.groups {
					_ = s.AddGroup(g)
					for range 4 {
						s.pushOne(g, 0)
					}
				}
				running := make([]int, r.groups) // the group each worker is running
				for w := range running {
					running[w], _, _ = s.Next()
				}
				for i := 0; b.Loop(); i++ {
					w := i % len(running)
					s.Done(running[w])
					s.pushOne(running[w], i)
					running[w], _, _ = s.Next()
				}
			})
		}
	}
}

// BenchmarkSchedulerChurn measures the whole life of small groups passing
// through 1,000 slots, per job: AddGroup, Push and Seal for every 10 jobs, and
// a group leaving its slot and the next one moving in, on top of Next and Done.
func BenchmarkSchedulerChurn(b *testing.B) {
	const (
		slots     = 1000
		groupSize = 10
	)
	for _, policy := range []spreader.Policy{spreader.LeastInFlight, spreader.RoundRobin} {
		b.Run(policy.String(), func(b *testing.B) {
			b.ReportAllocs()
			s, _ := spreader.NewScheduler[int, int](spreader.Config{Feeders: slots, Policy: policy})
			nextGroup := 0
			add := func() {
				_ = s.AddGroup(nextGroup)
				for j := range groupSize {
					_ = s.Push(nextGroup, j)
				}
				_ = s.Seal(nextGroup)
				nextGroup++
			}
			for range slots + 100 {
				add()
			}
			running := make([]int, slots)
			for w := range running {
				running[w], _, _ = s.Next()
			}
			for i := 0; b.Loop(); i++ {
				if s.Waiting() < 100 {
					add()
				}
				w := i % slots
				s.Done(running[w])
				running[w], _, _ = s.Next()
			}
		})
	}
}

// BenchmarkPullStep is the floor under Spread's cost with two or more feeders: every job of a
// feeder but the first comes through one iter.Pull step, so Spread cannot run faster than about
// 1/(this) jobs per second for those jobs. A plain range over the same iterator is the reference.
func BenchmarkPullStep(b *testing.B) {
	endless := func(yield func(int) bool) {
		for i := 0; ; i++ {
			if !yield(i) {
				return
			}
		}
	}
	b.Run("pull", func(b *testing.B) {
		next, stop := iter.Pull(iter.Seq[int](endless))
		defer stop()
		sum := 0
		for b.Loop() {
			v, _ := next()
			sum += v
		}
		_ = sum
	})
	b.Run("range", func(b *testing.B) {
		sum, n := 0, 0
		for v := range endless {
			sum += v
			if n++; n == b.N {
				break
			}
		}
		_ = sum
	})
}
