package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/weavejobs/weave/internal/leakcheck"
)

func TestMain(m *testing.M) {
	leakcheck.Main(m)
}

// runCLI runs the command line and returns its exit code, stdout and stderr.
func runCLI(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestExitCodes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		code int
		want string // in stdout or stderr
	}{
		{[]string{"version"}, exitOK, "weave "},
		{[]string{"--help"}, exitOK, "Usage:"},
		{[]string{"demo", "--help"}, exitOK, "--jobs"},
		{nil, exitUsage, "no command"},
		{[]string{"frobnicate"}, exitUsage, `unknown command "frobnicate"`},
		{[]string{"stauts"}, exitUsage, `unknown command "stauts" (did you mean "status"?)`},
		{[]string{"stauts", "--nats", "nats://127.0.0.1:1"}, exitUsage, `unknown command "stauts" (did you mean "status"?)`},
		{[]string{"schedule", "add", "--name", "x", "--every", "0s"}, exitUsage, "--every 0s: the interval must be at least 1s"},
		{[]string{"version", "extra"}, exitUsage, `version takes no arguments, got "extra"`},
		{[]string{"status", "--no-such-flag"}, exitUsage, "unknown flag"},
		{[]string{"demo", "--workers", "0"}, exitUsage, "--workers"},
		{[]string{"demo", "--policy", "fastest"}, exitUsage, "fastest"},
		{[]string{"demo", "--jobs", "5", "--sites", "10"}, exitUsage, "one page per site"},
		{[]string{"submit"}, exitUsage, "--group is required"},
		{[]string{"submit", "--group", "g\x01"}, exitUsage, "--group"},
		{[]string{"submit", "--group", "g", "--max-pack", "0"}, exitUsage, "--max-pack 0 outside 1..32"},
		{[]string{"submit", "--group", "g", "--max-pack", "33"}, exitUsage, "--max-pack 33 outside 1..32"},
		{[]string{"worker"}, exitUsage, "worker: usage is 'weave worker [flags] -- command [args...]', got no arguments"},
		{[]string{"worker", "--", "/no/such/command"}, exitUsage, "/no/such/command"},
		{[]string{"status", "--namespace", "bad.name"}, exitUsage, "namespace"},
		{[]string{"status", "--log-level", "loud"}, exitUsage, "--log-level"},
		{[]string{"coordinator", "--policy", "lifo"}, exitUsage, "lifo"},
		{[]string{"coordinator", "--retry-base", "10s", "--retry-max", "1s"}, exitUsage, "--retry-base 10s is above --retry-max 1s"},
		// The hint names the subcommand whose help lists the flag.
		{[]string{"submit", "--no-such-flag"}, exitUsage, "Run 'weave submit --help' for usage."},
		{[]string{"failed", "retry"}, exitUsage, "Run 'weave failed retry --help' for usage."},
		{[]string{"failed"}, exitUsage, "no subcommand"},
		{[]string{"failed", "frob"}, exitUsage, `unknown command "frob"`},
		// Every command that groups subcommands: alone, misspelt, or given a subcommand's flag.
		{[]string{"schedule", "ad"}, exitUsage, `unknown command "ad" for "weave schedule" (did you mean "add"?): it takes add, list, pause, remove or resume`},
		{[]string{"limit"}, exitUsage, "no subcommand given: list, pause, remove, resume or set"},
		{[]string{"limit", "lst"}, exitUsage, `(did you mean "list"?)`},
		{[]string{"failed", "--nats", "nats://127.0.0.1:1"}, exitUsage, "weave failed takes a subcommand first (list or retry), then its flags"},
		{[]string{"failed", "list", "--group", "g\x01"}, exitUsage, "--group"},
		{[]string{"failed", "retry"}, exitUsage, "--group is required"},
		{[]string{"failed", "retry", "-g", "g", "0"}, exitUsage, `job ID "0"`},
		{[]string{"failed", "retry", "-g", "g", "x1"}, exitUsage, `job ID "x1"`},
		{[]string{"cancel"}, exitUsage, "--group is required"},
		{[]string{"cancel", "-g", "g", "--job", "1,no"}, exitUsage, `job ID "no"`},
		{[]string{"cancel", "-g", "g", "extra"}, exitUsage, `cancel takes no arguments, got "extra"`},
		{[]string{"cancel", "site-1"}, exitUsage, "a group is given with --group (weave cancel --group site-1)"},
		// One rule for replicas everywhere: 0 (the default, 1) to 5.
		{[]string{"init", "--replicas", "6"}, exitUsage, "--replicas is 6, must be 1 to 5"},
		{[]string{"init", "--replicas", "-1"}, exitUsage, "--replicas is -1"},
		{[]string{"coordinator", "--replicas", "7"}, exitUsage, "--replicas is 7, must be 1 to 5"},
		{[]string{"coordinator", "--result-retention", "-1h"}, exitUsage, "--result-retention is -1h0m0s"},
		{[]string{"init", "--dedup-window", "-1s"}, exitUsage, "--dedup-window"},
		// Nothing listens on port 1: a connection error, not a usage error.
		{[]string{"status", "--nats", "nats://127.0.0.1:1"}, exitError, "connect to NATS"},
	} {
		code, out, errOut := runCLI(t, "", tc.args...)
		if code != tc.code || !strings.Contains(out+errOut, tc.want) {
			t.Errorf("weave %q: exit %d, want %d with %q\nstdout: %s\nstderr: %s", tc.args, code, tc.code, tc.want, out, errOut)
		}
	}
}

// TestIDRange: a submission's IDs read as a range of sequences, or, once packed jobs are among
// them, as the span of IDs they are.
func TestIDRange(t *testing.T) {
	for _, c := range []struct {
		first, last uint64
		want        string
	}{
		{7, 7, ", ID 7"},
		{7, 9, ", IDs 7-9"},
		{9, 1<<52 + 40, ", IDs from 9 to 4503599627370536 (jobs stored in packs have IDs from 2^52 on)"},
	} {
		if got := idRange(c.first, c.last); got != c.want {
			t.Errorf("idRange(%d, %d) = %q, want %q", c.first, c.last, got, c.want)
		}
	}
}

// TestHelpTextsFitATerminal: every command's long help and examples keep to 100 columns, so
// `weave CMD --help` reads in an ordinary terminal (the worker's once ran to 130).
func TestHelpTextsFitATerminal(t *testing.T) {
	t.Parallel()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, text := range []string{c.Long, c.Example} {
			for i, line := range strings.Split(text, "\n") {
				if n := utf8.RuneCountInString(line); n > 100 {
					t.Errorf("%s: help line %d is %d columns: %q", c.CommandPath(), i+1, n, line)
				}
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd())
}

// TestMessageOnePrefix: an error the command wrapped around the library's says "weave:" once.
func TestMessageOnePrefix(t *testing.T) {
	t.Parallel()
	inner := errors.New(`weave: namespace "weave" is not initialised`)
	for _, err := range []error{inner, fmt.Errorf("worker w1: %w", inner), fmt.Errorf("weave: list failed jobs: %w", inner)} {
		if got := message(err); strings.Count(got, "weave:") != 1 || !strings.HasSuffix(got, `namespace "weave" is not initialised`) {
			t.Errorf("message(%q) = %q, want one \"weave:\" prefix", err, got)
		}
	}
}
