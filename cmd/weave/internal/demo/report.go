package demo

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// startProgress shows the crawl's progress on o.Progress until the returned function is called,
// which prints the last state and returns once the progress goroutine has ended.
func startProgress(o Options, total int, tr *tracker) (stop func()) {
	if o.Progress == nil {
		return func() {}
	}
	quit, done := make(chan struct{}), make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		// The rate is measured over the last second: five samples of 200 ms.
		type sample struct {
			at   time.Time
			done int
		}
		window := []sample{{start, 0}}
		for n := 1; ; n++ {
			final := false
			select {
			case <-quit:
				final = true
			case <-tick.C:
			}
			now := time.Now()
			p := tr.progress()
			window = append(window, sample{now, p.Done})
			if len(window) > 6 {
				window = window[1:]
			}
			rate := 0.0
			if dt := now.Sub(window[0].at).Seconds(); dt > 0 {
				rate = float64(p.Done-window[0].done) / dt
			}
			if final {
				rate = float64(p.Done) / now.Sub(start).Seconds()
			}
			line := fmt.Sprintf("crawling %5d/%d pages  %6.0f pages/s  %3d running on %3d sites  %3d retries  %5.1fs",
				p.Done, total, rate, p.Running, p.ActiveSites, p.Retries, now.Sub(start).Seconds())
			switch {
			case o.Live && final:
				fmt.Fprintf(o.Progress, "\r\x1b[K%s\n", line)
			case o.Live:
				fmt.Fprintf(o.Progress, "\r\x1b[K%s", line)
			case final || n%5 == 0:
				fmt.Fprintln(o.Progress, line)
			}
			if final {
				return
			}
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}

// topSites is how many of the largest sites the report lists one by one.
const topSites = 10

// print writes the demo's report.
func (r *Result) Print(out io.Writer) {
	o, w := r.Options, r.Workload
	p := func(format string, args ...any) { fmt.Fprintf(out, format, args...) }
	p("\nWeave demo: crawled %d sites (%d pages) with %d workers × %d slots, policy %s, seed %d\n",
		len(w.Sites), w.Jobs, len(r.Workers), o.Concurrency, o.Policy, o.Seed)
	var fleet []string
	for i, id := range r.Workers {
		fleet = append(fleet, fmt.Sprintf("%s {%s}", id, strings.Join(r.Held[i], ",")))
	}
	p("  workers     %s\n", strings.Join(fleet, ", "))
	s := r.Summary
	p("  jobs        %d: %d done, %d failed, %d canceled\n", s.Jobs, s.Done, s.Failed, s.Canceled)
	p("  wall time   %v\n", r.Wall.Round(time.Millisecond))
	p("  throughput  %.0f jobs/s\n", float64(s.Done)/r.Wall.Seconds())
	var busy time.Duration
	for _, sc := range r.Weave.Sites {
		busy += sc.Busy
	}
	p("  slots used  %.0f%% (time in handlers / (%d slots × wall time))\n", 100*busy.Seconds()/(float64(r.Slots)*r.Wall.Seconds()), r.Slots)
	p("  retries     %d transient failures (503, retried after %v), %d fetches for %d pages\n",
		r.Weave.Retries, retryAfter503, r.Weave.Attempts, w.Jobs)
	if st := r.Status; st != nil {
		p("  coordinator %d admitted, %d released, %d retried, %d lost; %d feeder slots (sites scheduled at once)\n",
			st.Totals.Admitted, st.Totals.Released, st.Totals.Retried, st.Totals.LostJobs, st.Feeders)
	}
	a := r.Weave.Affinity
	p("  affinity    %d fetches of geo-fenced sites, %d outside their region; %d of %d fetches preferring a region ran there (%.0f%%)\n",
		a.Required, a.RequiredElsewhere, a.PreferredHome, a.Preferred, percent(a.PreferredHome, a.Preferred))

	if o.SiteConcurrency > 0 || o.SiteRate > 0 {
		most := 0
		for _, sc := range r.Weave.Sites {
			most = max(most, sc.Peak)
		}
		p("  politeness  per site (weave limit): %s; measured at most %d at once, %d in one second\n",
			politenessLabel(o), most, r.Weave.MostPerSecond)
	}
	p("\nPer-site concurrency, measured in the handlers, next to a FIFO queue simulated on the same\n")
	p("workload (same %d slots, same fetch times, jobs in publish order, no queueing overhead):\n\n", r.Slots)
	ranked := w.byRank()
	width := len("other sites")
	for _, st := range ranked[:min(topSites, len(ranked))] {
		width = max(width, len(st.Name))
	}
	header := fmt.Sprintf("  %-*s %6s %-10s   %-32s   %-32s", width, "", "", "", center("Weave", 32), center("FIFO queue", 32))
	p("%s\n", strings.TrimRight(header, " "))
	p("  %-*s %6s %-10s   %8s %8s %14s   %8s %8s %14s\n", width, "site", "pages", "region", "crowded*", "overall", "avg in flight", "crowded*", "overall", "avg in flight")
	for _, st := range ranked[:min(topSites, len(ranked))] {
		ws, fs := r.Weave.Sites[st.Rank], r.FIFO.Sites[st.Rank]
		p("  %-*s %6d %-10s   %8d %8d %14.2f   %8d %8d %14.2f\n", width, st.Name, len(st.Pages), regionLabel(st),
			ws.CrowdedPeak, ws.Peak, ws.AvgInFlight(), fs.CrowdedPeak, fs.Peak, fs.AvgInFlight())
	}
	if len(ranked) > topSites {
		var wc, wp, fc, fp, lo, hi int
		lo = len(ranked[topSites].Pages)
		for _, st := range ranked[topSites:] {
			ws, fs := r.Weave.Sites[st.Rank], r.FIFO.Sites[st.Rank]
			wc, wp = max(wc, ws.CrowdedPeak), max(wp, ws.Peak)
			fc, fp = max(fc, fs.CrowdedPeak), max(fp, fs.Peak)
			lo, hi = min(lo, len(st.Pages)), max(hi, len(st.Pages))
		}
		name := fmt.Sprintf("%d other sites", len(ranked)-topSites)
		p("  %-*s %6s %-10s   %8d %8d %14s   %8d %8d %14s\n", width, name, fmt.Sprintf("%d-%d", lo, hi), "", wc, wp, "(max)", fc, fp, "(max)")
	}
	p("\n  crowded*: the peak of a site's fetches in flight while at least %d published sites (slots + 1)\n", r.Slots+1)
	p("    had pages never fetched, so other sites were waiting: 1 is the polite share; each fetch\n")
	p("    above it was taken from a waiting site.\n")
	p("  overall: the peak over the whole run, including the tail, when fewer sites than slots are\n")
	p("    left and their pages may take the free slots (cap it with --max-per-site).\n")
	var wc, fc int
	for i := range r.Weave.Sites {
		wc, fc = max(wc, r.Weave.Sites[i].CrowdedPeak), max(fc, r.FIFO.Sites[i].CrowdedPeak)
	}
	p("\n  So: while other sites waited, Weave let no site have more than %d fetches in flight; the\n", wc)
	p("  FIFO queue let one have %d. Higher overall peaks under Weave come from the tail only.\n", fc)
}

// problems lists what went wrong in the crawl; empty means all pages were fetched as they should.
func (r *Result) Problems() []string {
	var out []string
	s := r.Summary
	if s.Jobs != r.Workload.Jobs || s.Done != s.Jobs {
		out = append(out, fmt.Sprintf("%d of %d pages done (%d in outcomes)", s.Done, r.Workload.Jobs, s.Jobs))
	}
	for _, sc := range r.Weave.Sites {
		if c := r.Options.SiteConcurrency; c > 0 && sc.Peak > c {
			out = append(out, fmt.Sprintf("a site had %d fetches at once, above its limit of %d", sc.Peak, c))
			break
		}
	}
	if rate := r.Options.SiteRate; rate > 0 && r.Weave.MostPerSecond > MostStartsPerSecond(rate) {
		out = append(out, fmt.Sprintf("a site had %d fetches start within a second, above its rate of %d/s", r.Weave.MostPerSecond, rate))
	}
	if n := r.Weave.Affinity.RequiredElsewhere; n > 0 {
		out = append(out, fmt.Sprintf("%d fetches of geo-fenced sites ran outside their region", n))
	}
	return out
}

// politenessLabel describes the per-site limits.
func politenessLabel(o Options) string {
	var parts []string
	if o.SiteConcurrency > 0 {
		parts = append(parts, fmt.Sprintf("at most %d fetches at once", o.SiteConcurrency))
	}
	if o.SiteRate > 0 {
		parts = append(parts, fmt.Sprintf("%d per second", o.SiteRate))
	}
	return strings.Join(parts, " and ")
}

// regionLabel describes a site's region affinity: "eu needs", "us prefers" or "-".
func regionLabel(s *site) string {
	switch s.Affinity {
	case requireRegion:
		return s.Region + " needs"
	case preferRegion:
		return s.Region + " prefers"
	}
	return "-"
}

func percent(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

// center centers s in width columns.
func center(s string, width int) string {
	pad := max(width-len(s), 0)
	return strings.Repeat(" ", pad/2) + s + strings.Repeat(" ", pad-pad/2)
}

// MostStartsPerSecond is the most starts of a site's fetches the handlers may see within a second
// under a rate of rate per second. The coordinator releases at most rate+1 in a second (a burst
// of 1, and a fraction of one more: a late release keeps the schedule); the handlers start them a
// little after, not all equally late: a worker held up 50 ms (a loaded machine, the race
// detector) starts that many releases late, inside the next second's window: rate/20 more.
func MostStartsPerSecond(rate int) int { return rate + 2 + rate/20 }
