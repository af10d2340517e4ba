package bench

import (
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weavejobs/weave/spreader"
)

// TestSimulateSchedulerReference checks the ideal simulation against the policies' theory on the
// reference case: round robin 3.75 / 1.875 / 0.375, least in-flight 2 / 2 / 2 (± 5%), and the
// equal-work groups finishing together under least in-flight.
func TestSimulateSchedulerReference(t *testing.T) {
	t.Parallel()
	groups := []simGroup{{300, 10 * time.Millisecond}, {600, 5 * time.Millisecond}, {3000, time.Millisecond}}
	tasks := []time.Duration{10 * time.Millisecond, 5 * time.Millisecond, time.Millisecond}
	for _, p := range []spreader.Policy{spreader.RoundRobin, spreader.LeastInFlight} {
		runs, err := simulateScheduler(p, 6, 3, groups)
		if err != nil {
			t.Fatal(err)
		}
		if len(runs) != 3900 {
			t.Fatalf("%v: %d runs, want 3900", p, len(runs))
		}
		s, ok := shareStats(runs, 3)
		if !ok {
			t.Fatalf("%v: no window", p)
		}
		want := expectedInFlight(p, 6, tasks)
		for g := range want {
			if math.Abs(s.InFlight[g]-want[g]) > 0.05*want[g] {
				t.Errorf("%v: group %d holds %.3f, want %.3f ± 5%%", p, g, s.InFlight[g], want[g])
			}
		}
		if p == spreader.LeastInFlight {
			// 9 s of work on 6 slots: all three finish at about 1.5 s.
			for g, c := range s.Completion {
				if c < 1450*time.Millisecond || c > 1550*time.Millisecond {
					t.Errorf("least in-flight: group %d completes at %v, want about 1.5s", g, c)
				}
			}
		}
	}
	if _, err := simulateScheduler(spreader.LeastInFlight, 6, 0, groups); err == nil {
		t.Error("0 feeders accepted")
	}
}

func TestExpectedInFlight(t *testing.T) {
	t.Parallel()
	tasks := []time.Duration{10 * time.Millisecond, 5 * time.Millisecond, time.Millisecond}
	if got := expectedInFlight(spreader.RoundRobin, 6, tasks); !slices.Equal(got, []float64{3.75, 1.875, 0.375}) {
		t.Errorf("round robin %v", got)
	}
	if got := expectedInFlight(spreader.LeastInFlight, 6, tasks); !slices.Equal(got, []float64{2, 2, 2}) {
		t.Errorf("least in-flight %v", got)
	}
}

func TestGroupSizes(t *testing.T) {
	t.Parallel()
	sum := func(s []int) (n int) {
		for _, v := range s {
			n += v
		}
		return n
	}
	for _, tc := range []struct{ total, groups int }{{20_000, 200}, {5000, 200}, {10, 10}, {1000, 1}} {
		for name, sizes := range map[string][]int{
			"log-uniform": logUniformSizes(tc.total, tc.groups),
			"zipf":        zipfSizes(tc.total, tc.groups, 1),
		} {
			if len(sizes) != tc.groups || sum(sizes) != tc.total || slices.Min(sizes) < 1 {
				t.Errorf("%s(%d, %d): %d groups, %d jobs, smallest %d", name, tc.total, tc.groups, len(sizes), sum(sizes), slices.Min(sizes))
			}
		}
	}
	z := zipfSizes(5000, 200, 1)
	if !slices.IsSortedFunc(z, func(a, b int) int { return b - a }) {
		t.Error("zipf sizes not in rank order")
	}
	if z[0] < 10*z[len(z)/2] {
		t.Errorf("zipf sizes not skewed: largest %d, median %d", z[0], z[len(z)/2])
	}
	if !slices.Equal(logUniformSizes(20_000, 200), logUniformSizes(20_000, 200)) {
		t.Error("log-uniform sizes differ between calls")
	}
}

func TestSpreadWorkload(t *testing.T) {
	t.Parallel()
	c := SpreadConfig{Jobs: 500, Groups: 20}
	if err := c.defaults(); err != nil {
		t.Fatal(err)
	}
	w := newSpreadWorkload(c)
	q := w.queue()
	if len(q) != 500 {
		t.Fatalf("%d jobs queued", len(q))
	}
	// Publish order: groups one after another, each complete.
	seen := map[int]bool{}
	for i, j := range q {
		if i > 0 && q[i-1].Group != j.Group && seen[j.Group] {
			t.Fatalf("group %d is split in the queue", j.Group)
		}
		seen[j.Group] = true
		if j.Dur < c.MinTask || j.Dur > c.MaxTask {
			t.Fatalf("task %v outside %v..%v", j.Dur, c.MinTask, c.MaxTask)
		}
	}
	if w2 := newSpreadWorkload(c); !slices.Equal(w2.queue(), q) {
		t.Error("the workload is not deterministic")
	}
}

// TestScaleConfigRefusesProfileInMissingDir: a drain profile prefix in a directory that does not
// exist is refused before anything runs (it used to fail after the first backlog's publishing).
func TestScaleConfigRefusesProfileInMissingDir(t *testing.T) {
	t.Parallel()
	c := ScaleConfig{DrainProfile: filepath.Join(t.TempDir(), "missing", "d")}
	if err := c.defaults(); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("defaults() = %v, want the missing directory refused", err)
	}
	c = ScaleConfig{HeapProfile: filepath.Join(t.TempDir(), "missing", "h")}
	if err := c.defaults(); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("defaults() = %v, want the heap profile's missing directory refused", err)
	}
	c = ScaleConfig{DrainProfile: filepath.Join(t.TempDir(), "d"), HeapProfile: filepath.Join(t.TempDir(), "h")}
	if err := c.defaults(); err != nil {
		t.Fatalf("a profile prefix in an existing directory: %v", err)
	}
}
