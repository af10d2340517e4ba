package wire

import (
	"fmt"
	"time"
)

// Status is how one attempt went, as a worker reports it (a job's outcome is its terminal state).
type Status uint8

// Attempt statuses.
const (
	// StatusOK: the handler returned a result.
	StatusOK Status = iota + 1
	// StatusError: the attempt failed (error, panic or timeout) and may be retried.
	StatusError
	// StatusPermanent: the attempt failed and must not be retried.
	StatusPermanent
	// StatusCanceled: the job was canceled while it ran.
	StatusCanceled
	// StatusReturned: the worker returned the job without running it to the end (drain), or
	// the coordinator's rescue took it back; the attempt does not count. ("released" on the
	// wire and in logs, its name before the vocabulary of ARCHITECTURE.md's glossary.)
	StatusReturned
	// StatusLapsed: the attempt lapsed: its batch was redelivered after its lease ran out, so
	// the worker that held it died or stalled before reporting ("lost" on the wire and in logs). The attempt counts as failed and may be retried; the job
	// is not run again on the batch's redelivery.
	StatusLapsed
)

var statusNames = [...]string{"", "ok", "error", "permanent", "canceled", "released", "lost"}

func (s Status) String() string {
	if int(s) < len(statusNames) && s != 0 {
		return statusNames[s]
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

// LapsedReports returns the reports for the jobs of a work batch delivered for the deliveries-th
// time (redelivered): each attempt lapsed. Workers and the coordinator's rescue use it alike.
func LapsedReports(jobs []WorkJob, deliveries uint64) []Report {
	text := []byte(LapsedText(deliveries))
	reports := make([]Report, len(jobs))
	for i, j := range jobs {
		reports[i] = Report{ID: j.ID, Attempt: j.Attempt, Status: StatusLapsed, Data: text, Proof: j.Proof}
	}
	return reports
}

// LapsedText is the error recorded for an attempt that lapsed with its worker's lease.
func LapsedText(deliveries uint64) string {
	return fmt.Sprintf("worker lost: the job's batch came back after its lease ran out (delivery %d); the worker that held it died or stalled", deliveries)
}

// Failed reports whether an attempt with this status failed (and is in the job's history).
func (s Status) Failed() bool {
	return s == StatusError || s == StatusPermanent || s == StatusLapsed
}

// Report is a worker's report of one attempt it completed, or returned.
type Report struct {
	ID         uint64
	Attempt    uint32
	Status     Status
	Duration   time.Duration // time the handler ran
	Waited     time.Duration // time the job waited on the worker between receipt and start
	RetryAfter time.Duration // requested retry delay (StatusError only); 0 = policy default
	Data       []byte        // result (StatusOK) or error text
	// Proof is the release proof of the job's batch (WorkJob.Proof), echoed. Not part of the
	// encoding: it travels in the report message's Weave-Proof header (SetReportProofs,
	// ReportProofs).
	Proof string
}

// AppendReports encodes a report batch from one worker onto dst.
func AppendReports(dst []byte, worker string, reports []Report) []byte {
	dst = appendHeader(dst, kindReports)
	dst = appendString(dst, worker)
	dst = appendUvarint(dst, uint64(len(reports)))
	for i := range reports {
		rp := &reports[i]
		dst = appendUvarint(dst, rp.ID)
		dst = appendUvarint(dst, uint64(rp.Attempt))
		dst = append(dst, byte(rp.Status))
		dst = appendUvarint(dst, uint64(rp.Duration/time.Microsecond))
		dst = appendUvarint(dst, uint64(rp.Waited/time.Microsecond))
		dst = appendUvarint(dst, uint64(rp.RetryAfter/time.Millisecond))
		dst = appendBytes(dst, rp.Data)
	}
	return dst
}

// DecodeReports decodes a report batch. Data fields alias b.
func DecodeReports(b []byte) (worker string, reports []Report, err error) {
	r := newReader(b, kindReports)
	worker = r.string()
	n := r.count(6)
	reports = make([]Report, 0, n)
	for range n {
		rp := Report{ID: r.uvarint(), Attempt: r.uint32(), Status: Status(r.byte())}
		rp.Duration = durationUS(r)
		rp.Waited = durationUS(r)
		rp.RetryAfter = durationMS(r)
		rp.Data = r.bytes()
		if r.err != nil {
			break
		}
		if rp.Status < StatusOK || rp.Status > StatusLapsed {
			r.fail("job %d has unknown status %d", rp.ID, rp.Status)
			break
		}
		reports = append(reports, rp)
	}
	if err := r.end(); err != nil {
		return "", nil, err
	}
	return worker, reports, nil
}

func durationUS(r *reader) time.Duration {
	us := r.uvarint()
	if us > uint64(MaxTimeout/time.Microsecond) {
		r.fail("duration of %d µs exceeds %v", us, MaxTimeout)
		return 0
	}
	return time.Duration(us) * time.Microsecond
}
