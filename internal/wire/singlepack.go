package wire

import (
	"fmt"
	"strconv"
)

// Packs of single jobs. A producer submitting many single jobs at once (SubmitMany) stores up to
// MaxPack of them in one JOBS message, as Publish packs a group's jobs, so that a one-off job does
// not cost a stored message, an acknowledgement and a delivery of its own. Each job of such a pack
// is still its own group, as a single job stored alone is: the pack is only how they travel.
//
// A single pack is a message on the singles subject (Names.SinglesSubject) with the headers
// Weave-Version (SinglePackVersion), Weave-Single ("1"), Weave-Pack (the number of jobs,
// 2–MaxPack), the producer's Weave-Reply token if any, and, if traced, the trace headers its jobs
// share. Its body (AppendSinglePack) holds each job's group ID and priority beside what a pack's
// job holds. Jobs with a key, a dependency or a follow-up are not packed: they keep a message of
// their own.
//
// Job i of the single pack stored at seq has ID PackedJobID(seq, i), and that ID is also its
// group's incarnation: what a single job stored alone has in its message's sequence. The
// coordinator deletes the message once every job it holds is done with it.
const (
	// SinglePackVersion is the Weave-Version of a single pack: a coordinator of a build without
	// single packs refuses it as a version it does not speak.
	SinglePackVersion = 4

	kindSinglePack byte = 'S'
)

// SinglePackJob is one job of a single pack: its group, its priority, and what a pack's job holds.
type SinglePackJob struct {
	Group    string
	Priority int
	PackJob
}

// SinglePackHeader returns the headers of a single pack of n jobs whose outcomes go to the
// producer's reply token (none when empty).
func SinglePackHeader(n int, reply string) map[string][]string {
	h := Header{}
	h.Set(HdrVersion, strconv.Itoa(SinglePackVersion))
	h.Set(HdrSingle, "1")
	h.Set(HdrPack, strconv.Itoa(n))
	if reply != "" {
		h.Set(HdrReply, reply)
	}
	return h
}

// AppendSinglePack appends the binary body of a single pack holding jobs to dst.
func AppendSinglePack(dst []byte, jobs []SinglePackJob) []byte {
	if dst == nil {
		n := 12
		for i := range jobs {
			n += SinglePackedSize(jobs[i].Group, jobs[i].Payload, jobs[i].Require, jobs[i].Prefer)
		}
		dst = make([]byte, 0, n)
	}
	dst = appendHeader(dst, kindSinglePack)
	dst = appendUvarint(dst, uint64(len(jobs)))
	for i := range jobs {
		j := &jobs[i]
		dst = appendString(dst, j.Group)
		dst = appendUvarint(dst, uint64(j.Priority))
		dst = appendPackJob(dst, &j.PackJob)
	}
	return dst
}

// SinglePackedSize bounds the bytes a job of group with this payload and these resources takes
// in a single pack's body.
func SinglePackedSize(group string, payload []byte, require, prefer []string) int {
	return PackedSize(payload, require, prefer) + len(group) + 4
}

// parseSinglePack decodes the jobs of the single pack stored at seq (ParseStoredJobs).
func parseSinglePack(seq uint64, h Header, data []byte) ([]StoredJob, error) {
	n := h.Get(HdrPack)
	count, err := strconv.Atoi(n)
	switch {
	case h.Get(HdrVersion) != strconv.Itoa(SinglePackVersion):
		return nil, fmt.Errorf("%w: a single pack with %s %q (want %d)", ErrVersion, HdrVersion, h.Get(HdrVersion), SinglePackVersion)
	case err != nil || count < 2 || count > MaxPack:
		return nil, fmt.Errorf("%w: bad %s %q (2–%d jobs)", ErrMalformed, HdrPack, n, MaxPack)
	case h.Get(HdrSingle) != "1":
		return nil, fmt.Errorf("%w: bad %s %q", ErrMalformed, HdrSingle, h.Get(HdrSingle))
	case h.Get(HdrGroup) != "" || h.Get(HdrKey) != "" || h.Get(HdrRequire) != "" || h.Get(HdrPrefer) != "" ||
		h.Get(HdrMaxAttempts) != "" || h.Get(HdrTimeout) != "" || h.Get(HdrRunAt) != "" ||
		h.Get(HdrPriority) != "" || len(h.Values(HdrAfter)) > 0 || h.Get(HdrRedriveOf) != "":
		return nil, fmt.Errorf("%w: a single pack carries its jobs' groups and options in its body, not in headers", ErrMalformed)
	}
	reply := h.Get(HdrReply)
	if reply != "" {
		if err := ValidateReplyToken(reply); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
		}
	}
	return readPack(seq, h, data, kindSinglePack, count, func(r *reader) JobMeta {
		group, priority := r.string(), r.uvarint()
		if r.err == nil && priority > MaxPriority {
			r.fail("a job's priority %d outside 0..%d", priority, MaxPriority)
		}
		return JobMeta{Group: group, Single: true, Reply: reply, Priority: int(priority)}
	})
}

// Arrival orders incarnations and JOBS messages as the feed applies them: a job stored alone (or
// an open) at seq comes at seq·32, job i of the pack stored at seq at seq·32 + i. An incarnation
// of a single pack's job is its packed job ID, which compared as a number would come after every
// message stored alone; compared by Arrival it comes where its message does.
func Arrival(id uint64) uint64 { return JobSeq(id)<<packBits | uint64(JobIndex(id)) }
