package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"
)

// Check is one target and what was measured against it.
type Check struct {
	Name     string  `json:"name"`     // what is measured
	Target   string  `json:"target"`   // the target, as text: "≥ 0.5"
	Measured string  `json:"measured"` // the measured value, as text
	Value    float64 `json:"value"`    // the measured value
	Limit    float64 `json:"limit"`    // the target's bound
	Pass     bool    `json:"pass"`
}

// Verdict is "PASS" or "MISS".
func (c Check) Verdict() string {
	if c.Pass {
		return "PASS"
	}
	return "MISS"
}

// atLeast checks value ≥ limit; format prints both.
func atLeast(name string, value, limit float64, format string) Check {
	return Check{Name: name, Target: "≥ " + fmt.Sprintf(format, limit), Measured: fmt.Sprintf(format, value), Value: value, Limit: limit, Pass: value >= limit}
}

// atMost checks value ≤ limit.
func atMost(name string, value, limit float64, format string) Check {
	return Check{Name: name, Target: "≤ " + fmt.Sprintf(format, limit), Measured: fmt.Sprintf(format, value), Value: value, Limit: limit, Pass: value <= limit}
}

// below checks value < limit.
func below(name string, value, limit float64, format string) Check {
	return Check{Name: name, Target: "< " + fmt.Sprintf(format, limit), Measured: fmt.Sprintf(format, value), Value: value, Limit: limit, Pass: value < limit}
}

// within checks |value − want| ≤ tol·want.
func within(name string, value, want, tol float64, format string) Check {
	return Check{
		Name: name, Target: fmt.Sprintf(format+" ± %.0f%%", want, 100*tol), Measured: fmt.Sprintf(format, value),
		Value: value, Limit: want, Pass: value >= want*(1-tol) && value <= want*(1+tol),
	}
}

// Table is a table of a section: a title (may be empty), a header and rows of cells.
type Table struct {
	Title  string     `json:"title,omitempty"`
	Header []string   `json:"header"`
	Rows   [][]string `json:"rows"`
}

// Section is a scenario's result as text: what ran, tables of numbers, notes saying what the
// numbers include, and the targets.
type Section struct {
	Scenario string
	Setup    string
	Tables   []Table
	Notes    []string
	Checks   []Check
}

// Result is a scenario's typed result.
type Result interface {
	// Scenario is the scenario's name.
	Scenario() string
	// Section renders the result.
	Section() Section
}

// Machine describes where a report was measured.
type Machine struct {
	OS         string `json:"os"`
	Arch       string `json:"arch"`
	CPUs       int    `json:"cpus"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	CPUModel   string `json:"cpu_model,omitempty"`
	LoadStart  string `json:"load_start,omitempty"` // 1, 5 and 15 minute load averages
	LoadEnd    string `json:"load_end,omitempty"`
	Go         string `json:"go"`
	NATSServer string `json:"nats_server"` // the server's version
	NATSClient string `json:"nats_client"`
	Weave      string `json:"weave,omitempty"`
}

// Report is one run of the benchmark: where, when, and each scenario's result.
type Report struct {
	Command  string
	Server   string // "embedded" or the external server's URL
	Started  time.Time
	Finished time.Time
	Machine  Machine
	Results  []Result
}

// Checks returns every check of every scenario, in order.
func (r *Report) Checks() []Check {
	var cs []Check
	for _, res := range r.Results {
		cs = append(cs, res.Section().Checks...)
	}
	return cs
}

// Missed counts the checks that missed their target.
func (r *Report) Missed() int {
	n := 0
	for _, c := range r.Checks() {
		if !c.Pass {
			n++
		}
	}
	return n
}

type jsonScenario struct {
	Scenario string  `json:"scenario"`
	Checks   []Check `json:"checks"`
	Result   Result  `json:"result"`
}

// MarshalJSON emits the report with each scenario's typed result and its checks.
func (r *Report) MarshalJSON() ([]byte, error) {
	sc := make([]jsonScenario, 0, len(r.Results))
	for _, res := range r.Results {
		cs := res.Section().Checks
		if cs == nil {
			cs = []Check{}
		}
		sc = append(sc, jsonScenario{Scenario: res.Scenario(), Checks: cs, Result: res})
	}
	return json.Marshal(struct {
		Command   string         `json:"command,omitempty"`
		Server    string         `json:"server"`
		Started   time.Time      `json:"started"`
		Finished  time.Time      `json:"finished"`
		Machine   Machine        `json:"machine"`
		Scenarios []jsonScenario `json:"scenarios"`
	}{r.Command, r.Server, r.Started, r.Finished, r.Machine, sc})
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// WriteText writes the report for a terminal: each scenario's setup, tables, notes and checks,
// then a summary of the checks.
func (r *Report) WriteText(w io.Writer) error {
	p := &printer{w: w}
	p.printf("weave bench: %s, %d CPUs (GOMAXPROCS %d), load %s → %s, %s, nats-server %s\n",
		r.Server, r.Machine.CPUs, r.Machine.GOMAXPROCS, orDash(r.Machine.LoadStart), orDash(r.Machine.LoadEnd), r.Machine.Go, r.Machine.NATSServer)
	for _, res := range r.Results {
		s := res.Section()
		p.printf("\n== %s ==\n%s\n", s.Scenario, s.Setup)
		for _, t := range s.Tables {
			p.printf("\n")
			if t.Title != "" {
				p.printf("%s\n", t.Title)
			}
			writeAligned(p, t.Header, t.Rows, "  ")
		}
		if len(s.Notes) > 0 {
			p.printf("\n")
			for _, n := range s.Notes {
				p.printf("  note: %s\n", n)
			}
		}
		if len(s.Checks) > 0 {
			p.printf("\n")
			writeAligned(p, []string{"target", "", "measured", ""}, checkRows(s.Checks, false), "  ")
		}
	}
	if cs := r.Checks(); len(cs) > 0 {
		p.printf("\n%d of %d targets met (%s)\n", len(cs)-r.Missed(), len(cs), r.Finished.Sub(r.Started).Round(100*time.Millisecond))
	}
	return p.err
}

// WriteMarkdown writes the report as Markdown for BENCHMARKS.md: a summary table of the
// checks, then one subsection per scenario.
func (r *Report) WriteMarkdown(w io.Writer) error {
	p := &printer{w: w}
	if r.Command != "" {
		p.printf("Command: `%s`  \n", r.Command)
	}
	p.printf("Measured %s, %s; server: %s.  \n", r.Started.UTC().Format("2006-01-02 15:04 MST"), r.Finished.Sub(r.Started).Round(time.Second), r.Server)
	m := r.Machine
	p.printf("Machine: %s/%s, %d CPUs (GOMAXPROCS %d)%s, load average %s at the start and %s at the end.  \n",
		m.OS, m.Arch, m.CPUs, m.GOMAXPROCS, prefixed(", ", m.CPUModel), orDash(m.LoadStart), orDash(m.LoadEnd))
	p.printf("Versions: %s, nats-server %s, nats.go %s%s.\n\n", m.Go, m.NATSServer, m.NATSClient, prefixed(", weave ", m.Weave))
	if cs := r.Checks(); len(cs) > 0 {
		var rows [][]string
		for _, res := range r.Results {
			for _, c := range res.Section().Checks {
				rows = append(rows, []string{res.Scenario(), c.Name, c.Target, c.Measured, "**" + c.Verdict() + "**"})
			}
		}
		writeMarkdownTable(p, []string{"scenario", "metric", "target", "measured", ""}, rows)
	}
	for _, res := range r.Results {
		s := res.Section()
		p.printf("\n### %s\n\n%s\n", s.Scenario, s.Setup)
		for _, t := range s.Tables {
			p.printf("\n")
			if t.Title != "" {
				p.printf("**%s**\n\n", t.Title)
			}
			writeMarkdownTable(p, t.Header, t.Rows)
		}
		if len(s.Notes) > 0 {
			p.printf("\n")
			for _, n := range s.Notes {
				p.printf("- %s\n", n)
			}
		}
	}
	return p.err
}

func checkRows(cs []Check, bold bool) [][]string {
	rows := make([][]string, 0, len(cs))
	for _, c := range cs {
		v := c.Verdict()
		if bold {
			v = "**" + v + "**"
		}
		rows = append(rows, []string{c.Name, c.Target, c.Measured, v})
	}
	return rows
}

// printer remembers the first write error.
type printer struct {
	w   io.Writer
	err error
}

func (p *printer) printf(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, args...)
	}
}

// writeAligned writes a header and rows in columns. A column whose cells are all numbers (or
// empty) is right-aligned, its header included.
func writeAligned(p *printer, header []string, rows [][]string, indent string) {
	widths := make([]int, len(header))
	right := rightAligned(len(header), rows)
	for _, row := range append([][]string{header}, rows...) {
		for i, c := range row {
			if i < len(widths) {
				widths[i] = max(widths[i], utf8.RuneCountInString(c))
			}
		}
	}
	line := func(row []string) {
		var b strings.Builder
		b.WriteString(indent)
		for i, c := range row {
			if i >= len(widths) {
				break
			}
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c))
			if i > 0 {
				b.WriteString("  ")
			}
			if right[i] {
				b.WriteString(pad + c)
			} else {
				b.WriteString(c + pad)
			}
		}
		p.printf("%s\n", strings.TrimRight(b.String(), " "))
	}
	line(header)
	for _, row := range rows {
		line(row)
	}
}

// numericCell matches the cells writeAligned right-aligns: a number, possibly with a unit, or
// "n of m".
var numericCell = regexp.MustCompile(`^[-+]?[0-9][0-9.,]*( ?(%|ms|s|µs|B|MiB)| of [0-9][0-9,]*)?$`)

func numeric(c string) bool { return numericCell.MatchString(c) }

// writeMarkdownTable writes a GitHub-flavored Markdown table; pipes in cells are escaped. Columns
// are aligned as writeAligned aligns them.
func writeMarkdownTable(p *printer, header []string, rows [][]string) {
	cell := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	row := func(cells []string) {
		var b strings.Builder
		b.WriteString("|")
		for _, c := range cells {
			b.WriteString(" " + cell(c) + " |")
		}
		p.printf("%s\n", b.String())
	}
	row(header)
	right := rightAligned(len(header), rows)
	sep := make([]string, len(header))
	for i := range sep {
		sep[i] = "---"
		if right[i] {
			sep[i] = "--:"
		}
	}
	p.printf("|%s|\n", strings.Join(sep, "|"))
	for _, r := range rows {
		row(r)
	}
}

// rightAligned says which of n columns to right-align: all but the first whose cells are all
// numbers or empty.
func rightAligned(n int, rows [][]string) []bool {
	right := make([]bool, n)
	for i := range right {
		right[i] = i > 0
	}
	for _, row := range rows {
		for i, c := range row {
			if i < n && c != "" && !numeric(c) {
				right[i] = false
			}
		}
	}
	return right
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}

func prefixed(prefix, s string) string {
	if s == "" {
		return ""
	}
	return prefix + s
}

// Number formatting for tables.

// count formats an integer with thousands separators: 20,000.
func count[T ~int | ~int64 | ~uint64](n T) string {
	neg := n < 0
	if neg {
		n = -n
	}
	s := fmt.Sprint(uint64(n))
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// rate formats a per-second rate with thousands separators.
func rate(v float64) string { return count(int64(math.Round(v))) }

// mib formats bytes as MiB.
func mib(b uint64) string {
	if b == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
}

// msec formats milliseconds with a precision that suits the value.
func msec(v float64) string {
	switch {
	case v < 10:
		return fmt.Sprintf("%.2f", v)
	case v < 100:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}
