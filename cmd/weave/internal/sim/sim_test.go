package sim

import (
	"slices"
	"testing"
	"time"
)

func ms2(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

func TestFIFO(t *testing.T) {
	t.Parallel()
	// Two slots. Group 0 has three 10 ms jobs, then group 1 two 5 ms jobs.
	jobs := []Job{{0, ms2(10)}, {0, ms2(10)}, {0, ms2(10)}, {1, ms2(5)}, {1, ms2(5)}}
	got := FIFO(jobs, 2)
	want := []Run{
		{0, 0, ms2(10)},
		{0, 0, ms2(10)},
		{0, ms2(10), ms2(20)}, // a slot frees at 10
		{1, ms2(10), ms2(15)}, // the other one too
		{1, ms2(15), ms2(20)},
	}
	if !slices.Equal(got, want) {
		t.Errorf("FIFO = %v, want %v", got, want)
	}
	if FIFO(jobs, 0) != nil {
		t.Error("no slots: runs")
	}
	// A plain queue runs a group's jobs back to back: with 4 slots and one group of 8 jobs
	// ahead of others, the group holds every slot.
	var q []Job
	for range 8 {
		q = append(q, Job{0, ms2(1)})
	}
	for g := 1; g <= 8; g++ {
		q = append(q, Job{g, ms2(1)})
	}
	c := Measure(FIFO(q, 4), 9, 0)
	if c.Peaks[0] != 4 {
		t.Errorf("FIFO peak of the first group %d, want all 4 slots", c.Peaks[0])
	}
}

func TestMeasure(t *testing.T) {
	t.Parallel()
	// Group 0: three jobs, two overlapping; group 1: one job; group 2: two jobs back to back,
	// the second starting exactly when the first ends (not an overlap).
	runs := []Run{
		{0, ms2(0), ms2(10)},
		{0, ms2(5), ms2(15)},
		{1, ms2(6), ms2(8)},
		{2, ms2(7), ms2(9)},
		{2, ms2(9), ms2(12)},
		{0, ms2(20), ms2(21)},
	}
	c := Measure(runs, 3, 0)
	if !slices.Equal(c.Peaks, []int{2, 1, 1}) {
		t.Errorf("peaks %v, want [2 1 1]", c.Peaks)
	}
	if !slices.Equal(c.CrowdedPeaks, c.Peaks) {
		t.Errorf("every start crowded: crowded peaks %v, want the peaks %v", c.CrowdedPeaks, c.Peaks)
	}
	if c.CrowdedStarts != 6 || c.CrowdedOverlaps != 1 {
		t.Errorf("crowded %d starts, %d overlaps; want 6 and 1", c.CrowdedStarts, c.CrowdedOverlaps)
	}
	gaps := slices.Clone(c.Gaps)
	slices.Sort(gaps)
	if want := []time.Duration{ms2(2), ms2(5), ms2(15)}; !slices.Equal(gaps, want) {
		t.Errorf("gaps %v, want %v", gaps, want)
	}
	if c.Makespan != ms2(21) {
		t.Errorf("makespan %v", c.Makespan)
	}

	// Crowded from 3 waiting groups: at 0 all three wait (crowded); at 5 group 0 still has a job
	// unstarted, and groups 1 and 2 too (crowded, the overlap); at 6 group 1 starts its only job
	// with 3 waiting (crowded); at 7 only groups 0 and 2 wait: not crowded from then on.
	c = Measure(runs, 3, 3)
	if c.CrowdedStarts != 3 || c.CrowdedOverlaps != 1 {
		t.Errorf("crowded from 3: %d starts, %d overlaps; want 3 and 1", c.CrowdedStarts, c.CrowdedOverlaps)
	}
	// Group 0 reached 2 at 5 (crowded), group 1 ran at 6 (crowded), group 2 started at 7 only.
	if !slices.Equal(c.CrowdedPeaks, []int{2, 1, 0}) {
		t.Errorf("crowded peaks from 3: %v, want [2 1 0]", c.CrowdedPeaks)
	}
	if c := Measure(nil, 2, 0); len(c.Peaks) != 2 || c.CrowdedStarts != 0 || c.Makespan != 0 {
		t.Errorf("no runs: %+v", c)
	}
}
