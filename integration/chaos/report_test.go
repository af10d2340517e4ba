//go:build linux

package chaos

import (
	"bufio"
	"cmp"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// report is what a run found: the checks and the figures behind them.
type report struct {
	elapsed time.Duration
	faults  []*fault
	checks  []check
	figures [][2]string
	notes   []string // process exits, stalls, rejections, coordinators' warnings
}

// check is one property of the run, with examples when it does not hold.
type check struct {
	name   string
	ok     bool
	detail string
}

// maxExamples bounds the examples a failed check lists.
const maxExamples = 5

func (rep *report) add(name string, ok bool, detail string, examples []string) {
	if !ok && len(examples) > 0 {
		slices.Sort(examples)
		detail += "; e.g. " + strings.Join(head(examples, maxExamples), "; ")
	}
	rep.checks = append(rep.checks, check{name: name, ok: ok, detail: detail})
}

func (rep *report) fail(name, detail string) {
	rep.checks = append(rep.checks, check{name: name, detail: detail})
}

func (rep *report) figure(name, value string) {
	rep.figures = append(rep.figures, [2]string{name, value})
}

// String renders the report as tables.
func (rep *report) String() string {
	var b strings.Builder
	b.WriteString("=== fault injection report\n\nfaults:\n")
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  #\tat\tfault\ttarget\tlasted\tin flight\ttakeover / election\tlongest pause\tnote")
	start := time.Time{}
	if len(rep.faults) > 0 {
		start = rep.faults[0].at
	}
	for i, f := range rep.faults {
		took := "-"
		switch {
		case f.takeover > 0:
			took = "takeover " + f.takeover.Round(10*time.Millisecond).String()
		case f.election > 0:
			took = "election " + f.election.Round(10*time.Millisecond).String()
		}
		lasted := "-"
		if !f.end.IsZero() {
			lasted = f.end.Sub(f.at).Round(10 * time.Millisecond).String()
		}
		fmt.Fprintf(tw, "  %d\t+%.1fs\t%s\t%s\t%s\t%d\t%s\t%v\t%s\n", i+1, f.at.Sub(start).Seconds(), f.kind, f.target,
			lasted, f.inFlight, took, f.pause.Round(10*time.Millisecond), f.note)
	}
	tw.Flush()

	b.WriteString("\nchecks:\n")
	tw = tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	for _, c := range rep.checks {
		res := "PASS"
		if !c.ok {
			res = "FAIL"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", res, c.name, c.detail)
	}
	tw.Flush()

	b.WriteString("\nfigures:\n")
	tw = tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	for _, f := range rep.figures {
		fmt.Fprintf(tw, "  %s\t%s\n", f[0], f[1])
	}
	for _, line := range rep.faultFigures() {
		fmt.Fprintf(tw, "  %s\n", line)
	}
	tw.Flush()
	if len(rep.notes) > 0 {
		b.WriteString("\nnotes:\n")
		for _, n := range rep.notes {
			b.WriteString("  " + n + "\n")
		}
	}
	return b.String()
}

// faultFigures sums up takeover, election and pause per kind of fault.
func (rep *report) faultFigures() []string {
	type agg struct {
		n                 int
		maxTook, maxPause time.Duration
		sumTook, sumPause time.Duration
	}
	per := map[string]*agg{}
	var kinds []string
	for _, f := range rep.faults {
		a := per[f.kind]
		if a == nil {
			a = &agg{}
			per[f.kind] = a
			kinds = append(kinds, f.kind)
		}
		a.n++
		took := cmp.Or(f.takeover, f.election)
		a.sumTook += took
		a.maxTook = max(a.maxTook, took)
		a.sumPause += f.pause
		a.maxPause = max(a.maxPause, f.pause)
	}
	var out []string
	for _, k := range kinds {
		a := per[k]
		line := fmt.Sprintf("%s ×%d\tpause mean %v, max %v", k, a.n,
			(a.sumPause / time.Duration(a.n)).Round(10*time.Millisecond), a.maxPause.Round(10*time.Millisecond))
		if a.maxTook > 0 {
			what := "takeover"
			if k == faultNode {
				what = "election"
			}
			line += fmt.Sprintf("; %s mean %v, max %v", what, (a.sumTook / time.Duration(a.n)).Round(10*time.Millisecond), a.maxTook.Round(10*time.Millisecond))
		}
		out = append(out, line)
	}
	return out
}

// A warning or error in a Weave process's log: a console log line ("15:04:05.000 WRN message
// field=value ...") or the error a command exits with ("weave: ...", "chaosproc producer: ...").
var (
	logLine  = regexp.MustCompile(`^\d\d:\d\d:\d\d\.\d+ (WRN|ERR|FTL) (.*)$`)
	exitLine = regexp.MustCompile(`^(weave|chaosproc \w+): .*$`)
	// logReason and logDigits make one message of rejections with the same reason but for
	// another group or job.
	logReason = regexp.MustCompile(`reason="[^"]*"`)
	logDigits = regexp.MustCompile(`\d+`)
)

// logHighlights returns a process log's warnings and errors, one line per distinct message with
// its count and its first occurrence.
func logHighlights(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	type seen struct {
		n     int
		first string
	}
	byMsg := map[string]*seen{}
	var order []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		var msg string
		if m := logLine.FindStringSubmatch(line); m != nil {
			// The message without its fields, which hold IDs and times that differ every line.
			msg = m[1] + " " + m[2]
			reason := logReason.FindString(msg) // rejections differ by their reason
			if i := strings.Index(msg, "="); i > 0 {
				if j := strings.LastIndex(msg[:i], " "); j > 0 {
					msg = msg[:j]
				}
			}
			msg += " " + logDigits.ReplaceAllString(reason, "N")
		} else if exitLine.MatchString(line) {
			msg = line
		} else {
			continue
		}
		s := byMsg[msg]
		if s == nil {
			s = &seen{first: line}
			byMsg[msg] = s
			order = append(order, msg)
		}
		s.n++
	}
	var out []string
	for _, msg := range head(order, 12) {
		s := byMsg[msg]
		out = append(out, fmt.Sprintf("%5d× %s", s.n, truncate(s.first, 300)))
	}
	return out
}

func head(s []string, n int) []string { return s[:min(n, len(s))] }

func indent(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = "  " + l
	}
	return out
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
