package main

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// rawBytes returns the characters of out a terminal would interpret or that would hide text:
// controls other than newline (C0, DEL, C1), format characters (bidi, zero-width), line
// separators, and invalid UTF-8.
func rawBytes(out string) []string {
	var found []string
	for i, c := range out {
		if c == '\n' {
			continue
		}
		if c == utf8.RuneError || unicode.In(c, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp) {
			found = append(found, fmt.Sprintf("U+%04X at %d in %.80q", c, i, out[max(i-30, 0):]))
		}
	}
	return found
}

// TestLogLinesShowTextSafely: the CLI's log lines show what a message, a field or an error quotes
// (a group ID, a key, a worker's error) with its escape sequences and bidi characters as escapes.
func TestLogLinesShowTextSafely(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	log, err := newLogger(&out, "info")
	if err != nil {
		t.Fatal(err)
	}
	log.Warn().Str("group", "a\u202eb").Str("key", "k\x1b]0;title\x07").Err(errors.New("\x1b[2Jboom\u0085")).Msg("rejected \x1b[31mred\u200b")
	got := out.String()
	if raw := rawBytes(strings.TrimSuffix(got, "\n")); len(raw) > 0 {
		t.Errorf("log line holds raw characters %v: %q", raw, got)
	}
	for _, want := range []string{`rejected \x1b[31mred\u200b`, `a\u202eb`, `k\x1b]0;title\a`, `\x1b[2Jboom\u0085`} {
		if !strings.Contains(got, want) {
			t.Errorf("log line %q does not show %q", got, want)
		}
	}
}

// TestWriteRow: a table row shows each cell on one line, safely, so a tab or a newline in a
// name cannot shift the columns.
func TestWriteRow(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	writeRow(&out, "g\tx", "a\nb", "\x1b[2J", "plain")
	if got, want := out.String(), "g\\tx\ta\\nb\t\\x1b[2J\tplain\n"; got != want {
		t.Errorf("row %q, want %q", got, want)
	}
	if got := cell(strings.Repeat("é", 100), false); !strings.HasSuffix(got, "… [80 more bytes; --full shows all]") || len(got) > maxCell+50 {
		t.Errorf("cell of 200 bytes: %q", got)
	}
}
