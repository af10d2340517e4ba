package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeFlagsExist checks that every flag the README's CLI synopsis lists exists on the
// subcommand it is listed under, so the README cannot drift from the code.
func TestReadmeFlagsExist(t *testing.T) {
	src, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(src), "\n## CLI\n")
	if !ok {
		t.Fatal("README.md has no CLI section")
	}
	_, block, ok := strings.Cut(section, "```\n")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatal("the README's CLI section has no synopsis block")
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
			t.Errorf("README lists 'weave %s', which is not a command", strings.Join(path, " "))
			continue
		}
		for _, name := range flag.FindAllString(line, -1) {
			if cmd.Flags().Lookup(name[2:]) == nil && cmd.InheritedFlags().Lookup(name[2:]) == nil {
				t.Errorf("README lists %s for %q, which has no such flag", name, cmd.CommandPath())
			}
			checked++
		}
	}
	if checked < 20 {
		t.Errorf("checked only %d flags: the synopsis parser lost its way", checked)
	}
}
