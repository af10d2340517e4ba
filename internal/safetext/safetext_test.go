package safetext

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"plain text, ä, العربية", "plain text, ä, العربية"},
		{`C:\dir`, `C:\dir`},
		{"\x1b[31mRED\x1b[0m", `\x1b[31mRED\x1b[0m`},
		{"\x1b]0;PWNED-TITLE\x07", `\x1b]0;PWNED-TITLE\x07`},
		{"\x1b]8;;http://evil.example/\x1b\\click", `\x1b]8;;http://evil.example/\x1b\click`},
		{"a\nb\tc\rd", `a\nb\tc\rd`},
		{"\x7f\u0085\u009b2J", `\x7f\u0085\u009b2J`},
		{"invoice\u202efdp.exe\u202c", `invoice\u202efdp.exe\u202c`},
		{"zw\u200b\u200d\ufeffend", `zw\u200b\u200d\ufeffend`},
		{"\u2066x\u2069\u200e\u061c", `\u2066x\u2069\u200e\u061c`},
		{"a\u2028b\u2029", `a\u2028b\u2029`},
		{"tag\U000e0041", `tag\U000e0041`},
		{"bad \xff\xc3 utf8", `bad \xff\xc3 utf8`},
	} {
		if got := Line(tc.in); got != tc.want {
			t.Errorf("Line(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if Clean(tc.in) != (tc.in == tc.want) {
			t.Errorf("Clean(%q) = %v", tc.in, Clean(tc.in))
		}
	}
	if got := Block("one\n\ttwo\x1b[2J\r\n"); got != "one\n\ttwo\\x1b[2J\\r\n" {
		t.Errorf("Block kept or escaped the wrong characters: %q", got)
	}
}

func TestClip(t *testing.T) {
	t.Parallel()
	if got := Clip("short", 10, "--full"); got != "short" {
		t.Errorf("Clip of a short text = %q", got)
	}
	got := Clip("ääääää", 5, "--full shows all") // 12 bytes; 5 cuts inside the third ä
	if got != "ää… [8 more bytes; --full shows all]" {
		t.Errorf("Clip = %q", got)
	}
	big := strings.Repeat("\x1b", 1<<20)
	if got := Clip(big, 100, ""); len(got) > 500 || !strings.HasSuffix(got, "… [1048476 more bytes]") {
		t.Errorf("Clip of 1 MB = %d bytes ending %q", len(got), got[max(len(got)-40, 0):])
	}
}

// FuzzLine: whatever the input, Line's output holds no character a terminal or a browser would
// interpret or hide, is valid UTF-8, and is s itself when s is clean.
func FuzzLine(f *testing.F) {
	for _, s := range []string{"", "x", "\x1b[31m", "\u202e", "\xff", "a\nb", "\U000e0041"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, out := range []string{Line(s), Block(s)} {
			if !utf8.ValidString(out) {
				t.Fatalf("output of %q is not valid UTF-8: %q", s, out)
			}
			for _, c := range out {
				if (c != '\n' && c != '\t' || out == Line(s)) && unicode.In(c, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp) {
					t.Fatalf("output of %q holds U+%04X: %q", s, c, out)
				}
			}
		}
		if Clean(s) != (Line(s) == s) {
			t.Fatalf("Clean(%q) = %v, Line = %q", s, Clean(s), Line(s))
		}
		head, left := Cut(s, 7)
		if head+s[len(head):] != s || left != len(s)-len(head) || len(head) > 7 || !utf8.ValidString(head) && utf8.ValidString(s) {
			t.Fatalf("Cut(%q, 7) = %q, %d", s, head, left)
		}
	})
}

// TestJSON: what JSON writes decodes to the same value, and holds no character Line would
// escape (json.Encoder itself writes C1, DEL and format characters raw), so it shows safely.
func TestJSON(t *testing.T) {
	in := map[string]string{"e": "a\u009b31mb\u202ec\U000E0001d\x7fe\x1bf\u2028g é 中"}
	var buf bytes.Buffer
	enc := json.NewEncoder(JSON(&buf))
	enc.SetIndent("", "  ")
	if err := enc.Encode(in); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if !Clean(line) {
			t.Errorf("line %q holds characters a terminal may interpret", line)
		}
	}
	if !strings.Contains(out, `\u009b`) || !strings.Contains(out, `\udb40\udc01`) || !strings.Contains(out, "é 中") {
		t.Errorf("output %s: want \\u009b, a surrogate pair for U+E0001, and printable text kept", out)
	}
	var back map[string]string
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil || back["e"] != in["e"] {
		t.Fatalf("decoded %q (%v), want %q", back["e"], err, in["e"])
	}
}
