package wire

import (
	"encoding/binary"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"
)

// Final states of a job, as recorded in a group's outcomes.
type Final uint8

// Final job states.
const (
	FinalDone Final = iota + 1
	FinalFailed
	FinalCanceled
)

var finalNames = [...]string{"", "done", "failed", "canceled"}

func (f Final) String() string {
	if f >= FinalDone && f <= FinalCanceled {
		return finalNames[f]
	}
	return fmt.Sprintf("final(%d)", uint8(f))
}

// Outcome is the final record of one job, appended by the coordinator to its group's outcome
// subject when the job reaches a terminal state.
type Outcome struct {
	ID       uint64
	Key      string
	State    Final
	Attempts uint32
	Data     []byte    // result (done) or last error (failed, canceled)
	History  []Attempt // the failed attempts before the end, oldest first
	// RedriveOf is, for a job a redrive ran again, the ID of the failed job it ran again; 0
	// otherwise. A failed job is failed no more once a job running it again is done, or failed
	// in its turn (that failure takes its place).
	RedriveOf uint64
}

// finalRedriven flags, in an encoded outcome's state byte, that RedriveOf follows it. Readers
// older than the flag refuse such an outcome as malformed; outcomes of jobs not redriven are
// encoded as before.
const finalRedriven = 0x80

// Attempt records one failed attempt of a job.
type Attempt struct {
	At     time.Time // when the coordinator learned of it (millisecond precision)
	Worker string
	Error  string
}

// MaxHistory bounds the attempts an outcome records: the first and the latest ones are kept.
const MaxHistory = 32

// GroupSummary is the last record on a group's outcome subject: every job is terminal.
type GroupSummary struct {
	Jobs, Done, Failed, Canceled uint64
	// Abandoned says the producer never sealed the group: it went silent, and the coordinator
	// sealed the group with the jobs it had.
	Abandoned bool
}

// summaryAbandoned is the flag bit of GroupSummary.Abandoned. The flags follow the counts only
// when some are set, so a summary without flags reads the same in every version.
const summaryAbandoned = 1

// AppendOutcomes encodes a batch of outcomes onto dst.
func AppendOutcomes(dst []byte, outs []Outcome) []byte {
	return appendOutcomes(appendHeader(dst, kindOutcomes), outs)
}

// AppendSummary encodes a group summary onto dst.
func AppendSummary(dst []byte, s GroupSummary) []byte {
	return appendSummary(appendHeader(dst, kindFinal), s)
}

// AppendLast encodes a complete group's last message onto dst: the outcomes not written yet
// and the summary, in one message (kind L); a summary alone (kind F) when outs is empty. A
// group of one job ends with one message instead of two.
func AppendLast(dst []byte, outs []Outcome, s GroupSummary) []byte {
	if len(outs) == 0 {
		return AppendSummary(dst, s)
	}
	return appendSummary(appendOutcomes(appendHeader(dst, kindLast), outs), s)
}

// OutcomeSize bounds the bytes o takes in an outcome message (AppendOutcomes, AppendLast).
func OutcomeSize(o *Outcome) int {
	const v = binary.MaxVarintLen64
	n := 5*v + 1 + len(o.Key) + v + len(o.Data) + v
	for _, a := range o.History {
		n += 3*v + len(a.Worker) + len(a.Error)
	}
	return n
}

// Truncate cuts s to at most max bytes on a rune boundary, marking the cut.
func Truncate(s string, max int) string {
	if len(s) <= max {
		return s
	}
	const mark = " …(truncated)"
	n := max - len(mark)
	if n < 0 {
		n = max
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	if n+len(mark) > max {
		return s[:n]
	}
	return s[:n] + mark
}

// FitOutcome makes o take at most limit bytes in an outcome message (OutcomeSize), if it does
// not: it drops the attempts of its history after the first, oldest first (the history keeps
// the first and the latest, as when it has more than MaxHistory), then cuts the remaining
// attempts' errors, and last, for an outcome that is not done, its error (Data); a result is
// never cut (the worker's MaxResultSize keeps it within the max payload). It reports whether it
// changed o, whose History it then replaces rather than changes.
func FitOutcome(o *Outcome, limit int) bool {
	size := OutcomeSize(o)
	if size <= limit {
		return false
	}
	h := slices.Clone(o.History)
	for len(h) > 2 && size > limit {
		size -= OutcomeSize(&Outcome{History: h[1:2]}) - OutcomeSize(&Outcome{})
		h = slices.Delete(h, 1, 2)
	}
	for i := len(h) - 1; i >= 0 && size > limit; i-- {
		cut := Truncate(h[i].Error, max(len(h[i].Error)-(size-limit), 0))
		size -= len(h[i].Error) - len(cut)
		h[i].Error = cut
	}
	o.History = h
	if size > limit && o.State != FinalDone {
		cut := Truncate(string(o.Data), max(len(o.Data)-(size-limit), 0))
		o.Data = []byte(cut)
	}
	return true
}

// OutcomeMsgOverhead bounds the bytes of an outcome message besides its outcomes: the version,
// the kind, the count and a summary.
const OutcomeMsgOverhead = 2 + 6*binary.MaxVarintLen64

func appendOutcomes(dst []byte, outs []Outcome) []byte {
	dst = appendUvarint(dst, uint64(len(outs)))
	for i := range outs {
		o := &outs[i]
		dst = appendUvarint(dst, o.ID)
		dst = appendString(dst, o.Key)
		if o.RedriveOf != 0 {
			dst = append(dst, byte(o.State)|finalRedriven)
			dst = appendUvarint(dst, o.RedriveOf)
		} else {
			dst = append(dst, byte(o.State))
		}
		dst = appendUvarint(dst, uint64(o.Attempts))
		dst = appendBytes(dst, o.Data)
		dst = appendUvarint(dst, uint64(len(o.History)))
		for _, a := range o.History {
			dst = appendUvarint(dst, uint64(max(a.At.UnixMilli(), 0)))
			dst = appendString(dst, a.Worker)
			dst = appendString(dst, a.Error)
		}
	}
	return dst
}

func appendSummary(dst []byte, s GroupSummary) []byte {
	for _, v := range [...]uint64{s.Jobs, s.Done, s.Failed, s.Canceled} {
		dst = appendUvarint(dst, v)
	}
	if s.Abandoned {
		dst = appendUvarint(dst, summaryAbandoned)
	}
	return dst
}

// DecodeOutcomeMsg decodes a message from an outcome subject: a batch of outcomes, the group
// summary (then summary is non-nil), or both: a complete group's last outcomes and its summary
// (AppendLast). A reader takes the outcomes first. Data fields alias b.
func DecodeOutcomeMsg(b []byte) (outs []Outcome, summary *GroupSummary, err error) {
	kind := kindOutcomes
	if len(b) >= 2 && b[0] == Version && (b[1] == kindFinal || b[1] == kindLast) {
		kind = b[1]
	}
	r := newReader(b, kind)
	if kind != kindFinal {
		outs = r.outcomes()
	}
	if kind != kindOutcomes {
		summary = r.summary()
	}
	if err := r.end(); err != nil {
		return nil, nil, err
	}
	return outs, summary, nil
}

// outcomes reads a batch of outcomes.
func (r *reader) outcomes() []Outcome {
	n := r.count(5)
	outs := make([]Outcome, 0, n)
	for range n {
		o := Outcome{ID: r.uvarint(), Key: r.string(), State: Final(r.byte())}
		if o.State&finalRedriven != 0 {
			o.State &^= finalRedriven
			if o.RedriveOf = r.uvarint(); o.RedriveOf == 0 && r.err == nil {
				r.fail("job %d is flagged redriven without the ID it runs again", o.ID)
			}
		}
		o.Attempts, o.Data = r.uint32(), r.bytes()
		if nh := r.count(3); nh > 0 {
			o.History = make([]Attempt, 0, nh)
			for range nh {
				ms := r.uvarint()
				if ms > 1<<53 {
					r.fail("attempt time %d out of range", ms)
				}
				o.History = append(o.History, Attempt{At: time.UnixMilli(int64(ms)), Worker: r.string(), Error: r.string()})
			}
		}
		if r.err != nil {
			break
		}
		if o.State < FinalDone || o.State > FinalCanceled {
			r.fail("job %d has unknown final state %d", o.ID, o.State)
			break
		}
		outs = append(outs, o)
	}
	return outs
}

// summary reads a group summary: its counts, then flags if any are set (the message's end).
func (r *reader) summary() *GroupSummary {
	s := &GroupSummary{Jobs: r.uvarint(), Done: r.uvarint(), Failed: r.uvarint(), Canceled: r.uvarint()}
	if r.err == nil && len(r.b) > 0 {
		flags := r.uvarint()
		if flags&^summaryAbandoned != 0 {
			r.fail("unknown summary flags %#x", flags)
		}
		s.Abandoned = flags&summaryAbandoned != 0
	}
	if r.err == nil && s.Done+s.Failed+s.Canceled != s.Jobs {
		r.fail("summary counts %d+%d+%d do not add up to %d jobs", s.Done, s.Failed, s.Canceled, s.Jobs)
	}
	return s
}

// AppendCancel encodes a cancellation request: the IDs of running jobs whose handlers must stop.
func AppendCancel(dst []byte, ids []uint64) []byte {
	dst = appendHeader(dst, kindCancel)
	dst = appendUvarint(dst, uint64(len(ids)))
	for _, id := range ids {
		dst = appendUvarint(dst, id)
	}
	return dst
}

// DecodeCancel decodes a cancellation request.
func DecodeCancel(b []byte) ([]uint64, error) {
	r := newReader(b, kindCancel)
	n := r.count(1)
	ids := make([]uint64, 0, n)
	for range n {
		ids = append(ids, r.uvarint())
	}
	if err := r.end(); err != nil {
		return nil, err
	}
	return ids, nil
}
