// Package safetext prepares untrusted text (job errors and results, group IDs, keys, names,
// a command's output) for people to read: on a terminal, in a log, on a web page.
//
// Text is shown, never interpreted: each control character (C0, DEL, C1), each format character
// (bidi controls, zero-width characters, the byte-order mark; Unicode category Cf), each line or
// paragraph separator and each byte of invalid UTF-8 is written as a Go escape (\x1b, \u202e,
// \xff), so escape sequences cannot drive a terminal and no text can reorder or hide itself.
// Everything else, including right-to-left letters and backslashes, is kept as it is.
//
// Long text is cut with a marker saying how much was left out (Clip), so that one job's
// megabyte of error cannot flood a screen; the caller says where the whole value is.
package safetext

import (
	"io"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Line returns s for one line: newlines and tabs are escaped too.
func Line(s string) string { return escape(s, false) }

// Block returns s for a multi-line display: newlines and tabs are kept, everything else
// escaped as by Line.
func Block(s string) string { return escape(s, true) }

// Clean reports whether Line(s) == s: s shows as itself on one line.
func Clean(s string) bool {
	for _, c := range s {
		if hidden(c) {
			return false
		}
	}
	return true
}

// Cut returns the start of s of at most max bytes, cut at a character boundary, and how many
// bytes of s it leaves out (0 when s is not longer than max).
func Cut(s string, max int) (string, int) {
	if len(s) <= max {
		return s, 0
	}
	i := max
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i], len(s) - i
}

// Clip returns Line of the first max bytes of s and, when s is longer, a marker saying how many
// bytes were left out, followed by more (where the whole value is, e.g. "--full shows all").
func Clip(s string, max int, more string) string {
	head, left := Cut(s, max)
	out := Line(head)
	if left > 0 {
		out += Marker(left, more)
	}
	return out
}

// Marker is the mark of cut text: "… [1048000 more bytes; --full shows all]".
func Marker(left int, more string) string {
	m := "… [" + strconv.Itoa(left) + " more bytes"
	if more != "" {
		m += "; " + more
	}
	return m + "]"
}

// hidden reports the characters that are escaped.
func hidden(c rune) bool {
	return c == utf8.RuneError || unicode.In(c, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp)
}

func escape(s string, block bool) string {
	clean := true
	for _, c := range s {
		if hidden(c) && !(block && (c == '\n' || c == '\t')) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		c, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case c == utf8.RuneError && size <= 1:
			b.WriteString(`\x`)
			b.WriteString(hex2(s[i]))
		case block && (c == '\n' || c == '\t'):
			b.WriteRune(c)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\t':
			b.WriteString(`\t`)
		case c == '\r':
			b.WriteString(`\r`)
		case c < 0x80 && hidden(c):
			b.WriteString(`\x`)
			b.WriteString(hex2(byte(c)))
		case c > 0xffff && hidden(c):
			b.WriteString(`\U`)
			b.WriteString(hexN(uint32(c), 8))
		case hidden(c):
			b.WriteString(`\u`)
			b.WriteString(hexN(uint32(c), 4))
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

func hex2(c byte) string { return hexN(uint32(c), 2) }

func hexN(v uint32, n int) string {
	s := strconv.FormatUint(uint64(v), 16)
	return strings.Repeat("0", max(n-len(s), 0)) + s
}

// JSON wraps w, a destination of encoding/json output, so that the characters Line escapes
// and encoding/json writes raw (DEL, C1, format characters) are written as JSON escapes
// (\u009b, \u202e; a surrogate pair above U+FFFF): the JSON decodes to the same values and
// shows safely when a person reads it on a terminal. Each Write must hold whole characters, as
// a json.Encoder's do (one Write per value).
func JSON(w io.Writer) io.Writer { return jsonWriter{w} }

type jsonWriter struct{ w io.Writer }

func (j jsonWriter) Write(p []byte) (int, error) {
	clean := true
	for _, c := range string(p) {
		if c != utf8.RuneError && hidden(c) && c >= 0x20 {
			clean = false
			break
		}
	}
	if clean {
		return j.w.Write(p)
	}
	out := make([]byte, 0, len(p)+32)
	for i := 0; i < len(p); {
		c, size := utf8.DecodeRune(p[i:])
		if c == utf8.RuneError || !hidden(c) || c < 0x20 {
			out = append(out, p[i:i+size]...)
		} else if r1, r2 := utf16.EncodeRune(c); r1 != utf8.RuneError {
			out = append(out, `\u`+hexN(uint32(r1), 4)+`\u`+hexN(uint32(r2), 4)...)
		} else {
			out = append(out, `\u`+hexN(uint32(c), 4)...)
		}
		i += size
	}
	if _, err := j.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}
