package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestCLIReferenceFlagsExist checks that every flag the CLI reference's synopsis (docs/cli.md) lists
// exists on the subcommand it is listed under, so the reference cannot drift from the code.
func TestCLIReferenceFlagsExist(t *testing.T) {
	src, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(src), "\n## Synopsis\n")
	if !ok {
		t.Fatal("docs/cli.md has no Synopsis section")
	}
	_, block, ok := strings.Cut(section, "```text\n")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatal("docs/cli.md's Synopsis section has no text block")
	}
	flag := regexp.MustCompile(`--[a-z][a-z-]*`)
	checked := 0
	for line := range strings.Lines(block) {
		fields := strings.Fields(line)
		if len(fields) == 0 || fields[0] != "weave" {
			t.Errorf("synopsis line %q does not start with weave", line)
			continue
		}
		// The subcommand is the words before the first flag or bracket.
		var path []string
		for _, w := range fields[1:] {
			if strings.HasPrefix(w, "-") || strings.HasPrefix(w, "[") || strings.ContainsAny(w, "=.") {
				break
			}
			path = append(path, w)
		}
		cmd, rest, err := newRootCmd().Find(path)
		if err != nil || len(rest) > 0 {
			t.Errorf("docs/cli.md lists 'weave %s', which is not a command", strings.Join(path, " "))
			continue
		}
		for _, name := range flag.FindAllString(line, -1) {
			if cmd.Flags().Lookup(name[2:]) == nil && cmd.InheritedFlags().Lookup(name[2:]) == nil {
				t.Errorf("docs/cli.md lists %s for %q, which has no such flag", name, cmd.CommandPath())
			}
			checked++
		}
	}
	if checked < 20 {
		t.Errorf("checked only %d flags: the synopsis parser lost its way", checked)
	}
}
