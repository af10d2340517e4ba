package jobindex

import (
	"runtime"
	"testing"
)

func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestMemoryFootprint builds one million jobs of the benchmark workload, logs the heap per job,
// and fails if the heap exceeds the 4-bytes-per-job budget.
// BenchmarkIndexBuild10M reports the same at ten million jobs, where the fixed cost per
// profile and resource weighs less.
func TestMemoryFootprint(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("heap figures are meaningless under -race; skipped with -short")
	}
	const budget = 4.0
	before := heapAlloc()
	x := defaultWorkload(10_000).build()
	heap := float64(heapAlloc()-before) / float64(x.Len())
	c := x.Counts()
	t.Logf("%d jobs (pending %d, running %d, done %d), %d catalog spans, %d profiles",
		x.Len(), c.Pending, c.Running, c.Done, x.catalog.n, len(x.profileIDs))
	t.Logf("heap %.2f B/job", heap)
	if heap > budget {
		t.Errorf("heap %.2f B/job exceeds the budget of %.1f", heap, budget)
	}
	runtime.KeepAlive(x)
}
