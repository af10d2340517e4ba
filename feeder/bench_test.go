package feeder_test

import (
	"iter"
	"testing"

	"github.com/weavejobs/weave/feeder"
)

// benchJobs is the number of jobs per benchmark op: ten groups of 100,000.
const benchJobs = 1_000_000

func benchGroups() iter.Seq[iter.Seq[int]] {
	return func(yield func(iter.Seq[int]) bool) {
		for range 10 {
			if !yield(endlessUpTo(benchJobs / 10)) {
				return
			}
		}
	}
}

func endlessUpTo(n int) iter.Seq[int] {
	return func(yield func(int) bool) {
		for i := range n {
			if !yield(i) {
				return
			}
		}
	}
}

var sink int

// BenchmarkFeed measures one feeder in push form.
func BenchmarkFeed(b *testing.B) {
	for b.Loop() {
		src := feeder.NewSource(benchGroups())
		for job := range feeder.Feed(src) {
			sink += job
		}
		src.Stop()
	}
	b.ReportMetric(float64(b.N)*benchJobs/b.Elapsed().Seconds(), "jobs/s")
}

// BenchmarkFeederNext measures one feeder in pull form: one coroutine switch
// pair per job.
func BenchmarkFeederNext(b *testing.B) {
	for b.Loop() {
		src := feeder.NewSource(benchGroups())
		f := feeder.New(src)
		for job, ok := f.Next(); ok; job, ok = f.Next() {
			sink += job
		}
		f.Stop()
		src.Stop()
	}
	b.ReportMetric(float64(b.N)*benchJobs/b.Elapsed().Seconds(), "jobs/s")
}

// BenchmarkQueue pushes and pops with the queue hovering around 1,000 items.
func BenchmarkQueue(b *testing.B) {
	var q feeder.Queue[int]
	for i := range 1000 {
		q.Push(i)
	}
	for i := 0; b.Loop(); i++ {
		q.Push(i)
		v, _ := q.Pop()
		sink += v
	}
}
