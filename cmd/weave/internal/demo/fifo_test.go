package demo

import (
	"testing"
	"time"

	"github.com/weavejobs/weave/cmd/weave/internal/sim"
)

// job is a job of site rank site taking d.
func job(site int, d time.Duration) sim.Job { return sim.Job{Group: site, Dur: d} }

func TestFIFOBigSiteTakesEverySlot(t *testing.T) {
	t.Parallel()
	w, err := generateWorkload(workloadConfig{Jobs: 5000, Sites: 250, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	const slots = 12
	res := simulateFIFO(w.publishOrder(), len(w.Sites), slots, slots+1)
	big := res.Sites[0]
	if big.Peak != slots || big.CrowdedPeak != slots {
		t.Fatalf("largest site: peak %d, crowded peak %d; want %d", big.Peak, big.CrowdedPeak, slots)
	}
	if avg := big.AvgInFlight(); avg < slots-0.5 || avg > slots {
		t.Fatalf("largest site: %.2f in flight on average, want about %d", avg, slots)
	}
	var busy time.Duration
	for _, s := range res.Sites {
		if s.Peak > slots || s.CrowdedPeak > s.Peak {
			t.Fatalf("site %+v", s)
		}
		busy += s.Busy
	}
	if res.Makespan < busy/slots {
		t.Fatalf("makespan %v shorter than total work / slots %v", res.Makespan, busy/slots)
	}
}

func TestFIFOHandComputed(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	// Two slots. Site 0: jobs of 4, 1, 1 ms; site 1: 2, 2 ms.
	// t=0: a0(4) slot A, a1(1) slot B; t=1: a2 on B until 2; t=2: b0 on B until 4;
	// t=4: A and B free: b1 until 6. Site 0 peaks at 2, site 1 at 1.
	jobs := []sim.Job{job(0, 4*ms), job(0, ms), job(0, ms), job(1, 2*ms), job(1, 2*ms)}
	res := simulateFIFO(jobs, 2, 2, 2)
	if res.Makespan != 6*ms {
		t.Fatalf("makespan %v, want 6ms", res.Makespan)
	}
	a, b := res.Sites[0], res.Sites[1]
	if a.Peak != 2 || a.Busy != 6*ms || a.Span != 4*ms {
		t.Fatalf("site 0: %+v", a)
	}
	if b.Peak != 1 || b.Busy != 4*ms || b.Span != 4*ms || b.AvgInFlight() != 1 {
		t.Fatalf("site 1: %+v", b)
	}
	// Crowded needs 2 sites waiting: true while site 0 has jobs never started.
	if a.CrowdedPeak != 2 || b.CrowdedPeak != 0 {
		t.Fatalf("crowded peaks %d, %d; want 2, 0", a.CrowdedPeak, b.CrowdedPeak)
	}
}

func TestFIFOOneSlot(t *testing.T) {
	t.Parallel()
	jobs := []sim.Job{job(0, time.Millisecond), job(1, time.Millisecond), job(0, time.Millisecond)}
	res := simulateFIFO(jobs, 2, 1, 1)
	for i, s := range res.Sites {
		if s.Peak != 1 {
			t.Fatalf("site %d peak %d with one slot", i, s.Peak)
		}
	}
	if res.Makespan != 3*time.Millisecond {
		t.Fatalf("makespan %v", res.Makespan)
	}
	if empty := simulateFIFO(nil, 3, 4, 5); empty.Makespan != 0 || len(empty.Sites) != 3 {
		t.Fatalf("empty: %+v", empty)
	}
}
