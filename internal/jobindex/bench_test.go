package jobindex

import (
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// BenchmarkIndexBuild10M builds the 10-million-job workload (see workload) by replay, as a
// restarting coordinator would, and reports the heap the index holds per job.
func BenchmarkIndexBuild10M(b *testing.B) {
	w := defaultWorkload(100_000)
	var x *Index
	for b.Loop() {
		b.StopTimer()
		x = nil
		before := heapAlloc()
		b.StartTimer()
		x = w.build()
		b.StopTimer()
		jobs := float64(x.Len())
		b.ReportMetric(float64(heapAlloc()-before)/jobs, "heap-B/job")
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(x.Len()), "ns/job")
	runtime.KeepAlive(x)
}

// fixture is the 10M-job index the other benchmarks share, built once.
var fixture = sync.OnceValue(func() (f struct {
	x       *Index
	pending []uint64 // a sample of pending jobs, ascending
	heads   []uint64 // the lowest pending job of each group that has one: scheduler offers
}) {
	f.x = defaultWorkload(100_000).build()
	it := f.x.states[Pending].Iterator()
	for i := 0; it.HasNext(); i++ {
		id := it.Next()
		if i%10 == 0 {
			f.pending = append(f.pending, id)
		}
	}
	for g, c := range f.x.Groups() {
		if c.Pending > 0 {
			for id := range f.x.GroupJobs(g, Pending) {
				f.heads = append(f.heads, id)
				break
			}
		}
	}
	slices.Sort(f.heads) // offers roughly in admission order, as the scheduler makes them
	return f
})

// pools are the worker pools the selection benchmarks select for.
func pools() []struct {
	name string
	held []string
} {
	var eight, all []string
	for i := range 1000 {
		if i < 8 {
			eight = append(eight, "res-"+strconv.Itoa(i*125))
		}
		all = append(all, "res-"+strconv.Itoa(i))
	}
	return []struct {
		name string
		held []string
	}{{"none", nil}, {"8-resources", eight}, {"all-1000-resources", all}}
}

// reportP99 reports the 99th percentile of the sampled call durations.
func reportP99(b *testing.B, samples []time.Duration) {
	if len(samples) == 0 {
		return
	}
	slices.Sort(samples)
	b.ReportMetric(float64(samples[len(samples)*99/100].Nanoseconds()), "p99-ns")
}

// BenchmarkMove measures single state transitions (one per iteration) on the 10M-job index.
//
//   - cycle: pending jobs go to running, retrywait and back to pending, exercising the
//     per-profile pending bitmaps on both sides.
//   - release-complete: the coordinator's steady state. Pending jobs are released in ID order
//     and each completes (running to done) 1,000 releases later, so done fills in behind the
//     frontier. When the backlog runs out the index is built again, untimed.
func BenchmarkMove(b *testing.B) {
	f := fixture()
	b.Run("cycle", func(b *testing.B) {
		cycle := [...]State{Running, RetryWait, Pending}
		move := func(i int) {
			if _, err := f.x.Move(f.pending[i/3%len(f.pending)], cycle[i%3]); err != nil {
				b.Fatal(err)
			}
		}
		i := 0
		for b.Loop() {
			move(i)
			i++
		}
		for ; i%3 != 0; i++ { // leave the job pending for the next benchmark
			move(i)
		}
	})
	b.Run("release-complete", func(b *testing.B) {
		const lag = 1000
		var x *Index
		var queue []uint64 // pending jobs in ID order
		released, completed := 0, 0
		reset := func() {
			b.StopTimer()
			x = defaultWorkload(100_000).build()
			queue = queue[:0]
			for it := x.states[Pending].Iterator(); it.HasNext(); {
				queue = append(queue, it.Next())
			}
			released, completed = 0, 0
			b.StartTimer()
		}
		reset()
		for b.Loop() {
			var err error
			switch {
			case released-completed < lag && released < len(queue):
				_, err = x.Move(queue[released], Running)
				released++
			case completed < released:
				_, err = x.Move(queue[completed], Done)
				completed++
			default:
				reset()
				continue
			}
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkSelect picks among 64 offers (the head of 64 active groups) for pools of different
// sizes, timing each call to report the 99th percentile.
func BenchmarkSelect(b *testing.B) {
	f := fixture()
	const offers = 64
	for _, pool := range pools() {
		b.Run("pool="+pool.name, func(b *testing.B) {
			w := f.x.Compile(pool.held)
			samples := make([]time.Duration, 0, 1<<20)
			i := 0
			for b.Loop() {
				k := i % (len(f.heads) - offers)
				start := time.Now()
				f.x.Select(w, f.heads[k:k+offers])
				if len(samples) < cap(samples) {
					samples = append(samples, time.Since(start))
				}
				i += offers
			}
			reportP99(b, samples)
		})
	}
}

// BenchmarkSelectAny selects the lowest fitting pending job over the whole backlog. In the
// release variant each selected job is moved to running, so the answer changes every call.
func BenchmarkSelectAny(b *testing.B) {
	f := fixture()
	for _, pool := range pools() {
		for _, release := range []bool{false, true} {
			name := "pool=" + pool.name
			if release {
				name += "/release"
			}
			b.Run(name, func(b *testing.B) {
				w := f.x.Compile(pool.held)
				samples := make([]time.Duration, 0, 1<<20)
				var released []uint64
				for b.Loop() {
					start := time.Now()
					id, _, ok := f.x.SelectAny(w)
					if len(samples) < cap(samples) {
						samples = append(samples, time.Since(start))
					}
					if ok && release {
						if _, err := f.x.Move(id, Running); err != nil {
							b.Fatal(err)
						}
						released = append(released, id)
					}
				}
				b.StopTimer()
				reportP99(b, samples)
				if err := f.x.MoveMany(released, Pending); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}

// BenchmarkCompile measures the recompilation a ResourceSet pays on its first selection after
// a resource or profile was added or released (1,930 profiles in the fixture).
func BenchmarkCompile(b *testing.B) {
	x := fixture().x
	for _, pool := range pools() {
		b.Run("pool="+pool.name, func(b *testing.B) {
			for b.Loop() {
				x.Compile(pool.held)
			}
		})
	}
}

func BenchmarkCount(b *testing.B) {
	x := fixture().x
	for b.Loop() {
		x.Count(Pending)
	}
}

func BenchmarkGroupCounts(b *testing.B) {
	x := fixture().x
	i := 0
	for b.Loop() {
		x.GroupCounts("group-" + strconv.Itoa(i%100_000))
		i++
	}
}
