package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestLogDurationsCarryUnits holds the tree to one convention for durations in log fields:
// .Stringer("took", d), which writes "4.288s". zerolog's .Dur writes a bare number whose unit
// depends on a global (took=4.288454), and a duration passed as a number field hides its unit.
func TestLogDurationsCarryUnits(t *testing.T) {
	// A duration converted to a number for a log field: .Int("backoff", int(d.Milliseconds())).
	numeric := regexp.MustCompile(`\.(Int|Int64|Float64|Uint64)\("[a-z_]+", [^)]*(Milliseconds|Seconds|Microseconds|Nanoseconds)\(\)`)
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != "../.." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(src), "\n") {
			if strings.Contains(line, ".Dur(") || numeric.MatchString(line) {
				t.Errorf("%s:%d: a duration log field without its unit; use .Stringer(name, d):\n%s", path, i+1, line)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestInFlagWords(t *testing.T) {
	got := inFlagWords("weave: invalid config: RetryBase 10s above RetryMax 1s", coordinatorFlags)
	if want := "weave: invalid config: --retry-base 10s above --retry-max 1s"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
