package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestDocsCommandsRun checks every weave command shown in a shell code block of README.md,
// docs/*.md, ARCHITECTURE.md and BENCHMARKS.md: it must parse as the CLI would parse it (command, flags, arguments), and the ones
// that need no server (auth, version, help) must run and succeed. A reader copies these lines
// into a terminal, so a misspelt flag or a refused value in the docs is a bug.
func TestDocsCommandsRun(t *testing.T) {
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{"../../README.md", "../../ARCHITECTURE.md", "../../BENCHMARKS.md"}, files...)
	checked := 0
	for _, file := range files {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range docCommands(string(src)) {
			checked++
			if err := checkDocCommand(c.args); err != nil {
				t.Errorf("%s:%d: %q: %v", filepath.Base(file), c.line, c.text, err)
			}
		}
	}
	if checked < 40 {
		t.Errorf("found only %d weave commands in the docs: the extraction lost its way", checked)
	}
}

// TestDocsCommandCheckFails: the check refuses what a reader's shell would refuse, so the test
// above can fail.
func TestDocsCommandCheckFails(t *testing.T) {
	t.Parallel()
	doc := "```\n" + strings.Join([]string{
		`weave auth --namespace prod --worker gpu-1=gpu,eu --worker 'cpu-*=' > prod-auth.conf`,
		`weave submit --group g --wiat`,
		`weave stauts`,
		`weave limit`,
		`weave limit ad --resource r`,
		`weave job 1 2 3`,
		`weave worker --concurrency many -- ./run.sh`,
		`weave submit --group g --weight`,
		`weave version extra`,
	}, "\n") + "\n```\n"
	cmds := docCommands(doc)
	if len(cmds) != 9 {
		t.Fatalf("extracted %d commands, want 9: %v", len(cmds), cmds)
	}
	for _, c := range cmds {
		if err := checkDocCommand(c.args); err == nil {
			t.Errorf("%q passed the check, want a failure", c.text)
		}
	}
}

func TestDocCommandsExtraction(t *testing.T) {
	t.Parallel()
	doc := "Some prose with `weave nothing --here`.\n\n" +
		"```go\nweave := 1\n```\n" +
		"```text\nweave init [--replicas 1]\n```\n" +
		"```\n" +
		"go run ./cmd/weave demo --jobs 10   # a comment\n" +
		"echo '{\"key\": \"a\"}' | NATS_URL=nats://h:4222 weave submit --group 'a b' --wait\n" +
		"weave status \\\n  --json\n" +
		"go test ./...\n" +
		"nats pub weave.group.site-1 \"\" -H Weave-Op:open\n" +
		"```\n" +
		"```console\n$ weave version\nweave v0.1.0 (go1.26)\n```\n"
	var got []string
	for _, c := range docCommands(doc) {
		got = append(got, fmt.Sprintf("%q", c.args))
	}
	want := []string{
		`["demo" "--jobs" "10"]`,
		`["submit" "--group" "a b" "--wait"]`,
		`["status" "--json"]`,
		`["version"]`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("docCommands =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// docCommand is one weave invocation found in a document: its arguments after "weave".
type docCommand struct {
	line int
	text string
	args []string
}

// docCommands returns the weave commands of the shell code blocks of a Markdown document: fenced
// blocks without a language or marked sh, shell, bash or console. In a block with "$ " prompts
// only the prompted lines are commands (the rest is output). Code blocks of other languages, and
// "text" blocks (synopses with [optional] parts), are not commands.
func docCommands(doc string) []docCommand {
	var out []docCommand
	lines := strings.Split(doc, "\n")
	for i := 0; i < len(lines); i++ {
		fence, ok := strings.CutPrefix(strings.TrimSpace(lines[i]), "```")
		if !ok {
			continue
		}
		start := i + 1
		end := start
		for end < len(lines) && !strings.HasPrefix(strings.TrimSpace(lines[end]), "```") {
			end++
		}
		i = end
		if !slices.Contains([]string{"", "sh", "shell", "bash", "console"}, strings.TrimSpace(fence)) {
			continue
		}
		block := lines[start:end]
		prompted := slices.ContainsFunc(block, func(l string) bool { return strings.HasPrefix(l, "$ ") })
		for j := 0; j < len(block); j++ {
			text := block[j]
			lineNo := start + j + 1
			if prompted {
				var ok bool
				if text, ok = strings.CutPrefix(text, "$ "); !ok {
					continue
				}
			}
			for strings.HasSuffix(text, "\\") && j+1 < len(block) {
				j++
				text = strings.TrimSuffix(text, "\\") + " " + strings.TrimSpace(block[j])
			}
			for _, args := range weaveInvocations(shellWords(text)) {
				out = append(out, docCommand{line: lineNo, text: strings.TrimSpace(text), args: args})
			}
		}
	}
	return out
}

// shellWords splits a command line as a shell would, roughly: quotes and backslashes, a comment
// from an unquoted #, and the operators |, &&, ||, ; and redirections as words of their own.
func shellWords(line string) []string {
	var (
		words []string
		cur   strings.Builder
		inTok bool
	)
	flush := func() {
		if inTok {
			words = append(words, cur.String())
			cur.Reset()
			inTok = false
		}
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\'':
			inTok = true
			j := strings.IndexByte(line[i+1:], '\'')
			if j < 0 {
				j = len(line) - i - 1
			}
			cur.WriteString(line[i+1 : i+1+j])
			i += j + 1
		case c == '"':
			inTok = true
			for i++; i < len(line) && line[i] != '"'; i++ {
				if line[i] == '\\' && i+1 < len(line) {
					i++
				}
				cur.WriteByte(line[i])
			}
		case c == '\\' && i+1 < len(line):
			inTok = true
			i++
			cur.WriteByte(line[i])
		case c == ' ' || c == '\t':
			flush()
		case c == '#' && !inTok:
			flush()
			return words
		case strings.IndexByte("|&;<>", c) >= 0:
			flush()
			op := string(c)
			for i+1 < len(line) && strings.IndexByte("|&<>", line[i+1]) >= 0 {
				i++
				op += string(line[i])
			}
			words = append(words, op)
		default:
			inTok = true
			cur.WriteByte(c)
		}
	}
	flush()
	return words
}

// weaveInvocations returns the arguments of each simple command among words that runs weave
// (or "go run ./cmd/weave"), leaving out redirections and leading variable assignments.
func weaveInvocations(words []string) [][]string {
	var out [][]string
	for len(words) > 0 {
		n := slices.IndexFunc(words, func(w string) bool {
			return slices.Contains([]string{"|", "||", "&&", ";", "&"}, w)
		})
		if n < 0 {
			n = len(words)
		}
		var cmd []string
		for k := 0; k < n; k++ {
			if strings.HasPrefix(words[k], "<") || strings.HasPrefix(words[k], ">") {
				k++ // the redirection's target
				continue
			}
			cmd = append(cmd, words[k])
		}
		for len(cmd) > 0 && strings.Contains(cmd[0], "=") {
			cmd = cmd[1:]
		}
		switch {
		case len(cmd) > 0 && cmd[0] == "weave":
			out = append(out, cmd[1:])
		case len(cmd) > 2 && cmd[0] == "go" && cmd[1] == "run" && cmd[2] == "./cmd/weave":
			out = append(out, cmd[3:])
		}
		words = words[min(n+1, len(words)):]
	}
	return out
}

// checkDocCommand parses args as the CLI does before running a command, and runs the commands
// that need no server.
func checkDocCommand(args []string) error {
	root := newRootCmd()
	cmd, rest, err := root.Find(args)
	if err != nil {
		return err
	}
	if err := cmd.ParseFlags(rest); err != nil {
		return err
	}
	if help, _ := cmd.Flags().GetBool("help"); help {
		return runDocCommand(args)
	}
	if cmd.HasSubCommands() {
		return fmt.Errorf("%s needs a subcommand (%s); got %q", cmd.CommandPath(), subcommandNames(cmd), cmd.Flags().Args())
	}
	if err := cmd.ValidateArgs(cmd.Flags().Args()); err != nil {
		return err
	}
	if err := cmd.ValidateRequiredFlags(); err != nil {
		return err
	}
	if err := cmd.ValidateFlagGroups(); err != nil {
		return err
	}
	switch cmd.Name() {
	case "auth", "version", "help":
		return runDocCommand(args)
	}
	return nil
}

func runDocCommand(args []string) error {
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		return errors.Join(err, errors.New(out.String()))
	}
	return nil
}
