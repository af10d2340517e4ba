package wire

import "time"

// WorkJob is one job in a work batch, as a worker sees it.
type WorkJob struct {
	ID      uint64
	Attempt uint32 // 1 for the first attempt
	Timeout time.Duration
	Group   string
	Key     string
	Payload []byte
	// Trace is the job's trace context (see JobTrace), or "". It is not part of the batch's
	// encoding: it travels in the batch's Weave-Trace header (SetWorkTraces, WorkTraces).
	Trace string
	// Proof is the coordinator's proof of this release (see ReleaseKey), or "" from a
	// coordinator before proofs. Not part of the encoding: it travels in the batch's
	// Weave-Proof header (SetWorkProofs, WorkProofs), and the report echoes it.
	Proof string
	// After is how the groups the job's group ran after ended (AppendAfterResults), or "". Not
	// part of the encoding: it travels in the batch's Weave-After header (SetWorkAfter).
	After string
}

// AppendWork encodes a work batch onto dst.
func AppendWork(dst []byte, jobs []WorkJob) []byte {
	if dst == nil {
		n := 12 // header and count
		for i := range jobs {
			n += len(jobs[i].Group) + len(jobs[i].Key) + len(jobs[i].Payload) + 40 // and their varints
		}
		dst = make([]byte, 0, n)
	}
	dst = appendHeader(dst, kindWork)
	dst = appendUvarint(dst, uint64(len(jobs)))
	for i := range jobs {
		j := &jobs[i]
		dst = appendUvarint(dst, j.ID)
		dst = appendUvarint(dst, uint64(j.Attempt))
		dst = appendUvarint(dst, uint64(j.Timeout/time.Millisecond))
		dst = appendString(dst, j.Group)
		dst = appendString(dst, j.Key)
		dst = appendBytes(dst, j.Payload)
	}
	return dst
}

// DecodeWork decodes a work batch. Payloads alias b.
func DecodeWork(b []byte) ([]WorkJob, error) {
	r := newReader(b, kindWork)
	n := r.count(6)
	jobs := make([]WorkJob, 0, n)
	for range n {
		j := WorkJob{
			ID:      r.uvarint(),
			Attempt: r.uint32(),
			Timeout: durationMS(r),
			Group:   r.string(),
			Key:     r.string(),
			Payload: r.bytes(),
		}
		if r.err != nil {
			break
		}
		if j.Attempt == 0 {
			r.fail("job %d has attempt 0", j.ID)
			break
		}
		jobs = append(jobs, j)
	}
	if err := r.end(); err != nil {
		return nil, err
	}
	return jobs, nil
}

func durationMS(r *reader) time.Duration {
	ms := r.uvarint()
	if ms > uint64(MaxTimeout/time.Millisecond) {
		r.fail("duration of %d ms exceeds %v", ms, MaxTimeout)
		return 0
	}
	return time.Duration(ms) * time.Millisecond
}
