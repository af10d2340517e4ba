package main

import (
	"strings"
	"testing"
)

// TestDemo runs the demo end to end, in-process, on a small workload.
func TestDemo(t *testing.T) {
	t.Parallel()
	code, out, errOut := runCLI(t, "", "demo", "--jobs", "500", "--sites", "40", "--seed", "3", "--log-level", "warn")
	if code != exitOK {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	for _, want := range []string{
		"jobs        500: 500 done, 0 failed, 0 canceled",
		"0 outside their region",
		"site000.example",
		"30 other sites",
		// The table says what to conclude, not only a footnote.
		"crowded*  overall",
		"So: while other sites waited, Weave let no site have more than ",
		"politeness  per site (weave limit): at most 4 fetches at once and 500 per second; measured at most ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errOut, "crawling   500/500 pages") {
		t.Errorf("progress lacks the final line:\n%s", errOut)
	}
}
