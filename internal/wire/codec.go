package wire

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Binary payloads start with the protocol version byte and a kind byte, then varint-framed fields.
// Strings and byte slices are a uvarint length followed by the bytes.

// Kinds of binary payloads; a payload of the wrong kind is malformed.
const (
	kindWork     byte = 'W'
	kindReports  byte = 'R'
	kindOutcomes byte = 'O'
	kindFinal    byte = 'F'
	kindLast     byte = 'L' // a group's last outcomes and its summary
	kindCancel   byte = 'C'
)

func appendHeader(dst []byte, kind byte) []byte { return append(dst, Version, kind) }

func appendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// reader decodes untrusted bytes. The first error sticks; later reads return zero values, so a
// decoder checks r.err once per record rather than after every field.
type reader struct {
	b   []byte
	err error
}

func newReader(b []byte, kind byte) *reader {
	r := &reader{b: b}
	if len(b) < 2 {
		r.fail("payload of %d bytes is shorter than its header", len(b))
		return r
	}
	if b[0] != Version {
		r.err = fmt.Errorf("%w: payload version %d (this build speaks %d)", ErrVersion, b[0], Version)
		return r
	}
	if b[1] != kind {
		r.fail("payload kind %q, want %q", b[1], kind)
		return r
	}
	r.b = b[2:]
	return r
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
	}
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("bad varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) uint32() uint32 {
	v := r.uvarint()
	if v > math.MaxUint32 {
		r.fail("value %d overflows 32 bits", v)
		return 0
	}
	return uint32(v)
}

func (r *reader) byte() byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) == 0 {
		r.fail("truncated")
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

// bytes returns a sub-slice of the input (no copy): callers that keep it must know it aliases.
func (r *reader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.fail("field of %d bytes exceeds the %d remaining", n, len(r.b))
		return nil
	}
	b := r.b[:n:n]
	r.b = r.b[n:]
	return b
}

func (r *reader) string() string { return string(r.bytes()) }

// count reads a record count and checks it against the remaining bytes (each record takes at
// least minSize bytes), so a forged count cannot cause a huge allocation.
func (r *reader) count(minSize int) int {
	n := r.uvarint()
	if r.err != nil {
		return 0
	}
	if n > uint64(len(r.b)/minSize) {
		r.fail("count %d cannot fit in %d bytes", n, len(r.b))
		return 0
	}
	return int(n)
}

func (r *reader) end() error {
	if r.err == nil && len(r.b) != 0 {
		r.fail("%d trailing bytes", len(r.b))
	}
	return r.err
}

func appendUvarint(dst []byte, v uint64) []byte { return binary.AppendUvarint(dst, v) }
