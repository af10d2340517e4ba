package demo

import (
	"reflect"
	"slices"
	"testing"
)

func TestWorkloadDeterministic(t *testing.T) {
	t.Parallel()
	cfg := workloadConfig{Jobs: 5000, Sites: 250, Seed: 7, Regions: []string{"eu", "us"}, FailRate: 0.01}
	a, err := generateWorkload(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := generateWorkload(cfg)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same config, different workloads")
	}
	cfg.Seed = 8
	c, _ := generateWorkload(cfg)
	if reflect.DeepEqual(a, c) {
		t.Fatal("different seeds, same workload")
	}
}

func TestWorkloadShape(t *testing.T) {
	t.Parallel()
	w, err := generateWorkload(workloadConfig{Jobs: 5000, Sites: 250, Seed: 1, Regions: []string{"eu", "us"}, FailRate: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	sites := w.byRank()
	total, names := 0, map[string]bool{}
	for rank, s := range sites {
		total += len(s.Pages)
		names[s.Name] = true
		if rank > 0 && len(s.Pages) > len(sites[rank-1].Pages) {
			t.Fatalf("rank %d has %d pages, more than rank %d", rank, len(s.Pages), rank-1)
		}
		if len(s.Pages) < minPagesPerSite {
			t.Fatalf("%s has %d pages, fewer than %d", s.Name, len(s.Pages), minPagesPerSite)
		}
		if s.Affinity == requireRegion && len(s.Pages) > maxRequiredPages {
			t.Fatalf("%s requires a region with %d pages", s.Name, len(s.Pages))
		}
		if s.Affinity != anyRegion && !slices.Contains([]string{"eu", "us"}, s.Region) {
			t.Fatalf("%s has region %q", s.Name, s.Region)
		}
		for i, p := range s.Pages {
			if p.Latency < minLatency || p.Latency >= maxLatency {
				t.Fatalf("%s%s latency %v", s.Name, p.Path, p.Latency)
			}
			if got, ok := pageIndex(p.Path); !ok || got != i {
				t.Fatalf("pageIndex(%q) = %d, %v; want %d", p.Path, got, ok, i)
			}
		}
	}
	if total != 5000 || w.Jobs != 5000 || len(names) != 250 {
		t.Fatalf("%d pages in %d distinct sites, want 5000 in 250", total, len(names))
	}
	// Zipf-like: one huge site, a few with hundreds, most small.
	if n := len(sites[0].Pages); n < 1500 || n > 2500 {
		t.Errorf("largest site has %d pages, want about 2000", n)
	}
	hundreds, small := 0, 0
	for _, s := range sites[1:] {
		switch n := len(s.Pages); {
		case n >= 100:
			hundreds++
		case n <= 50:
			small++
		}
	}
	if hundreds < 2 || hundreds > 10 || small < 200 {
		t.Errorf("%d sites with hundreds of pages, %d with at most 50", hundreds, small)
	}
	if w.Sites[0].Rank != 0 {
		t.Errorf("the largest site is not published first")
	}
	var req, pref, flaky int
	for _, s := range sites {
		switch s.Affinity {
		case requireRegion:
			req++
		case preferRegion:
			pref++
		}
		for _, p := range s.Pages {
			if p.Flaky > 0 {
				flaky++
			}
		}
	}
	if req == 0 || pref == 0 || flaky < 20 || flaky > 80 {
		t.Errorf("%d sites require a region, %d prefer one, %d flaky pages", req, pref, flaky)
	}
}

func TestWorkloadWithoutRegions(t *testing.T) {
	t.Parallel()
	w, err := generateWorkload(workloadConfig{Jobs: 100, Sites: 10, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range w.Sites {
		if s.Affinity != anyRegion || s.Region != "" {
			t.Fatalf("%s has affinity %v to %q without regions", s.Name, s.Affinity, s.Region)
		}
	}
}

func TestSiteSizesSmall(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ jobs, sites int }{{1, 1}, {7, 7}, {10, 3}, {500, 40}, {12345, 1000}} {
		w, err := generateWorkload(workloadConfig{Jobs: tc.jobs, Sites: tc.sites, Seed: 3})
		if err != nil {
			t.Fatal(err)
		}
		total := 0
		for _, s := range w.Sites {
			if len(s.Pages) == 0 {
				t.Fatalf("%+v: empty site", tc)
			}
			total += len(s.Pages)
		}
		if total != tc.jobs || len(w.publishOrder()) != tc.jobs {
			t.Fatalf("%+v: %d pages", tc, total)
		}
	}
}

func TestWorkloadInvalid(t *testing.T) {
	t.Parallel()
	for _, cfg := range []workloadConfig{{Jobs: 10, Sites: 0}, {Jobs: 3, Sites: 4}, {Jobs: 3, Sites: 1, FailRate: 2}} {
		if _, err := generateWorkload(cfg); err == nil {
			t.Errorf("%+v: no error", cfg)
		}
	}
}

func TestPageIndex(t *testing.T) {
	t.Parallel()
	for path, want := range map[string]int{"/": 0, "/page/1": 1, "/page/42": 42, "/page/0": -1, "/page/x": -1, "/other": -1, "": -1} {
		got, ok := pageIndex(path)
		if (want < 0) == ok || (ok && got != want) {
			t.Errorf("pageIndex(%q) = %d, %v; want %d", path, got, ok, want)
		}
	}
}
