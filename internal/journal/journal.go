// Package journal encodes the coordinator's journal records: the decisions it makes that cannot
// be derived from other streams (when a failed job retries, which epoch took over). Records are
// appended to the EVENTS stream and replayed in stream order after a restart.
package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// ErrMalformed reports bytes that are not a journal record of this version.
var ErrMalformed = errors.New("weave: malformed journal record")

const version = 1

// Kind of a record.
type Kind uint8

// Record kinds.
const (
	// KindEpoch marks a coordinator taking over; older epochs' later records are ignored.
	KindEpoch Kind = iota + 1
	// KindRetry records failed attempts that will be retried at a given time.
	KindRetry
	// KindRefused records reports the coordinator refused (a worker reporting about a job that
	// was not released to its pool, or an attempt that was never released): each entry names the
	// job and the EVENTS sequence of the report message, which replay then skips.
	KindRefused
	// KindRefusedOpen records opens (and single jobs) the coordinator refused because their group
	// ID's incarnation before was still running: each entry's Seq is the open's JOBS sequence.
	// The refused message is deleted only after this record is stored, so a replay that still
	// finds it refuses it again, whatever the incarnation before became since.
	KindRefusedOpen
)

// Entry is one job in a record.
type Entry struct {
	ID      uint64
	Attempt uint32
	// At is the retry time (KindRetry only).
	At time.Time
	// Seq is the EVENTS sequence of the refused report (KindRefused), or the JOBS sequence of
	// the refused open (KindRefusedOpen).
	Seq uint64
}

// Record is one journal record.
type Record struct {
	Kind    Kind
	Epoch   uint64
	Entries []Entry
}

// MaxEntrySize bounds the bytes one entry takes in a record, and MaxOverhead a record's bytes
// besides its entries.
const (
	MaxEntrySize = 3 * binary.MaxVarintLen64
	MaxOverhead  = 2 + 2*binary.MaxVarintLen64
)

// Append encodes r onto dst.
func Append(dst []byte, r Record) []byte {
	dst = append(dst, version, byte(r.Kind))
	dst = binary.AppendUvarint(dst, r.Epoch)
	dst = binary.AppendUvarint(dst, uint64(len(r.Entries)))
	for _, e := range r.Entries {
		dst = binary.AppendUvarint(dst, e.ID)
		dst = binary.AppendUvarint(dst, uint64(e.Attempt))
		switch r.Kind {
		case KindRetry:
			dst = binary.AppendUvarint(dst, uint64(e.At.UnixMilli()))
		case KindRefused, KindRefusedOpen:
			dst = binary.AppendUvarint(dst, e.Seq)
		}
	}
	return dst
}

// Decode decodes one record. It never panics and bounds allocations by the input size.
func Decode(b []byte) (Record, error) {
	if len(b) < 2 || b[0] != version {
		return Record{}, fmt.Errorf("%w: bad header", ErrMalformed)
	}
	r := Record{Kind: Kind(b[1])}
	if r.Kind < KindEpoch || r.Kind > KindRefusedOpen {
		return Record{}, fmt.Errorf("%w: unknown kind %d", ErrMalformed, b[1])
	}
	b = b[2:]
	next := func() (uint64, bool) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, false
		}
		b = b[n:]
		return v, true
	}
	var ok bool
	if r.Epoch, ok = next(); !ok {
		return Record{}, fmt.Errorf("%w: epoch", ErrMalformed)
	}
	n, ok := next()
	if !ok || n > uint64(len(b)/2) {
		return Record{}, fmt.Errorf("%w: entry count", ErrMalformed)
	}
	r.Entries = make([]Entry, 0, n)
	for range n {
		id, ok1 := next()
		att, ok2 := next()
		// A refused report may name any attempt, a refused open none; a retry is of an attempt
		// that was released.
		refused := r.Kind == KindRefused || r.Kind == KindRefusedOpen
		if !ok1 || !ok2 || att > 1<<32-1 || !refused && (att == 0 || att > 1<<31) {
			return Record{}, fmt.Errorf("%w: entry", ErrMalformed)
		}
		e := Entry{ID: id, Attempt: uint32(att)}
		if refused {
			seq, ok := next()
			if !ok {
				return Record{}, fmt.Errorf("%w: refused report sequence", ErrMalformed)
			}
			e.Seq = seq
		}
		if r.Kind == KindRetry {
			ms, ok := next()
			if !ok || ms > 1<<53 {
				return Record{}, fmt.Errorf("%w: retry time", ErrMalformed)
			}
			e.At = time.UnixMilli(int64(ms))
		}
		r.Entries = append(r.Entries, e)
	}
	if len(b) != 0 {
		return Record{}, fmt.Errorf("%w: %d trailing bytes", ErrMalformed, len(b))
	}
	return r, nil
}
