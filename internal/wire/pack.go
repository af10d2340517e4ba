package wire

import (
	"fmt"
	"strconv"
	"time"
)

// Job packs. A producer may store several jobs of one group in a single JOBS message, a pack, so
// that a job does not cost a stored message of its own: one publish, one acknowledgement, one
// store and one delivery to the coordinator's feed carry up to MaxPack jobs, and a job read back
// from the stream (a release past the payload cache) reads its pack's other jobs along.
//
// A pack is a message on the group's job subject with the headers Weave-Version (PackVersion),
// Weave-Group and Weave-Pack (the number of jobs, 2–MaxPack), and the ones every job of the pack
// shares: if traced, the trace headers; if above 0, their priority (Weave-Priority, with
// Weave-Version FeatureVersion). Its body is the binary pack (AppendPack). Only jobs without a key travel in
// packs: a keyed job is deduplicated by JetStream with its own Nats-Msg-Id, so it keeps a message
// of its own; so do single jobs and the jobs a coordinator publishes (redrives, schedules).
//
// Job IDs. A job stored alone in message seq has ID seq, as job IDs always were. Job i of the pack
// stored at seq has ID 2^52 + seq·32 + i (PackedJobID): the jobs of a pack, and of the packs a
// group stores one after another, have consecutive IDs, which the coordinator's index (roaring
// bitmaps, and runs of IDs of one group) keeps as compactly as the sequences of jobs stored
// alone. Every ID names its message (JobSeq) and its place in it (JobIndex) and stays below 2^53,
// which a JavaScript number (the dashboard) holds exactly. Job messages are accepted at sequences
// up to MaxJobSeq (2^47 − 1: 1.4·10^14 messages, four years at a million a second); past it an ID
// would be ambiguous, and the coordinator refuses the message.
const (
	HdrPack = "Weave-Pack" // on a pack: how many jobs its body holds (2–MaxPack)

	// PackVersion is the Weave-Version of a pack: a coordinator of a build before packs refuses
	// it as a version it does not speak (and records the rejection) rather than taking the pack
	// for one job whose payload is the pack's body.
	PackVersion = 2

	// MaxPack is the most jobs one pack holds.
	MaxPack = 1 << packBits

	// MaxJobSeq is the last stream sequence a job message may be stored at.
	MaxJobSeq = 1<<47 - 1

	packBits = 5
	packBase = 1 << 52 // the first packed job's ID
)

// kindPack is the binary kind of a pack's body.
const kindPack byte = 'J'

// PackedJobID is the ID of job i of the pack stored at seq.
func PackedJobID(seq uint64, i int) uint64 { return packBase + seq<<packBits + uint64(i) }

// IsPacked reports whether job id is stored in a pack.
func IsPacked(id uint64) bool { return id >= packBase }

// JobSeq is the stream sequence of the message that stores job id.
func JobSeq(id uint64) uint64 {
	if id < packBase {
		return id
	}
	return (id - packBase) >> packBits
}

// JobIndex is job id's place in its message: 0 for a job stored alone.
func JobIndex(id uint64) int {
	if id < packBase {
		return 0
	}
	return int(id & (MaxPack - 1))
}

// PackJob is one job of a pack: everything about it but its group (the pack's) and its key (a
// packed job has none).
type PackJob struct {
	Payload     []byte
	Require     []string
	Prefer      []string
	MaxAttempts int
	Timeout     time.Duration
	RunAt       time.Time // zero = at once; millisecond precision
}

// PackHeader returns the headers of a pack of n jobs of group, all of the given priority within
// the group (0–MaxPriority). A pack of priority above 0 carries Weave-Priority and the
// FeatureVersion, so that a coordinator that knows no job priorities refuses it rather than
// release its jobs in the wrong order.
func PackHeader(group string, n, priority int) map[string][]string {
	h := Header{}
	h.Set(HdrVersion, strconv.Itoa(PackVersion))
	h.Set(HdrGroup, group)
	h.Set(HdrPack, strconv.Itoa(n))
	setFeatures(h, nil, priority)
	return h
}

// AppendPack appends the binary body of a pack holding jobs to dst.
func AppendPack(dst []byte, jobs []PackJob) []byte {
	if dst == nil {
		n := 12 // header and count
		for i := range jobs {
			n += PackedSize(jobs[i].Payload, jobs[i].Require, jobs[i].Prefer)
		}
		dst = make([]byte, 0, n)
	}
	dst = appendHeader(dst, kindPack)
	dst = appendUvarint(dst, uint64(len(jobs)))
	for i := range jobs {
		dst = appendPackJob(dst, &jobs[i])
	}
	return dst
}

// appendPackJob appends what a job of either kind of pack holds beside its group.
func appendPackJob(dst []byte, j *PackJob) []byte {
	dst = appendBytes(dst, j.Payload)
	dst = appendStrings(dst, j.Require)
	dst = appendStrings(dst, j.Prefer)
	dst = appendUvarint(dst, uint64(j.MaxAttempts))
	dst = appendUvarint(dst, uint64(j.Timeout))
	var at uint64
	if !j.RunAt.IsZero() {
		at = uint64(j.RunAt.UnixMilli())
	}
	return appendUvarint(dst, at)
}

// readPackJob reads what appendPackJob wrote into j, whose Meta has its group, and validates it.
func readPackJob(r *reader, j *StoredJob, i int) error {
	j.Payload = r.bytes()
	j.Meta.Require, j.Meta.Prefer = r.strings(), r.strings()
	attempts, timeout, at := r.uvarint(), r.uvarint(), r.uvarint()
	if r.err != nil {
		return r.err
	}
	switch {
	case attempts > MaxAttemptsLimit:
		return fmt.Errorf("%w: job %d of the pack: MaxAttempts %d outside 0..%d", ErrMalformed, i, attempts, MaxAttemptsLimit)
	case timeout > uint64(MaxTimeout):
		return fmt.Errorf("%w: job %d of the pack: Timeout %v outside 0..%v", ErrMalformed, i, time.Duration(min(timeout, 1<<62)), MaxTimeout)
	case at > uint64(maxRunAtMilli):
		return fmt.Errorf("%w: job %d of the pack: run-at %d past the year 9999", ErrMalformed, i, at)
	}
	j.Meta.MaxAttempts, j.Meta.Timeout = int(attempts), time.Duration(timeout)
	if at > 0 {
		j.Meta.RunAt = time.UnixMilli(int64(at))
	}
	if err := j.Meta.Validate(); err != nil {
		return fmt.Errorf("%w: job %d of the pack: %v", ErrMalformed, i, err)
	}
	return nil
}

// PackedSize bounds the bytes a job with this payload and these resources takes in a pack's
// body: the fields, their lengths and the job's varints.
func PackedSize(payload []byte, require, prefer []string) int {
	n := len(payload) + 40
	for _, r := range require {
		n += len(r) + 2
	}
	for _, r := range prefer {
		n += len(r) + 2
	}
	return n
}

func appendStrings(dst []byte, ss []string) []byte {
	dst = appendUvarint(dst, uint64(len(ss)))
	for _, s := range ss {
		dst = appendString(dst, s)
	}
	return dst
}

// StoredJob is one job of a stored JOBS message, as the coordinator and the inspection read it.
type StoredJob struct {
	ID      uint64
	Meta    JobMeta
	Payload []byte // aliases the message's body
	Trace   string // the job's trace text (JobTrace), "" when untraced
}

// ParseStoredJobs decodes the jobs of the job message stored at seq with headers h and body data:
// the one job of a message that holds one (ID seq), or every job of a pack. The message is
// rejected whole if any part of it is malformed or invalid. Payloads alias data.
func ParseStoredJobs(seq uint64, hm map[string][]string, data []byte) ([]StoredJob, error) {
	h := Header(hm)
	if seq > MaxJobSeq {
		return nil, fmt.Errorf("%w: a job message at stream sequence %d, past the last one whose jobs' IDs are unambiguous (%d)", ErrMalformed, seq, uint64(MaxJobSeq))
	}
	n := h.Get(HdrPack)
	if n != "" && h.Get(HdrSingle) != "" {
		return parseSinglePack(seq, h, data)
	}
	if n == "" {
		meta, err := ParseJobMeta(h)
		if err != nil {
			return nil, err
		}
		return []StoredJob{{ID: seq, Meta: meta, Payload: data, Trace: JobTrace(h)}}, nil
	}
	priority := 0
	switch v := h.Get(HdrVersion); v {
	case strconv.Itoa(PackVersion):
		if h.Get(HdrPriority) != "" {
			return nil, fmt.Errorf("%w: %s on a pack of %s %d (want %d)", ErrMalformed, HdrPriority, HdrVersion, PackVersion, FeatureVersion)
		}
	case strconv.Itoa(FeatureVersion):
		edges, p, err := parseFeatures(h, h.Get(HdrGroup))
		switch {
		case err != nil:
			return nil, err
		case len(edges) > 0:
			return nil, fmt.Errorf("%w: %s on a pack (a group's dependencies are its open's)", ErrMalformed, HdrAfter)
		case p == 0:
			return nil, fmt.Errorf("%w: a pack of %s %d without %s", ErrMalformed, HdrVersion, FeatureVersion, HdrPriority)
		}
		priority = p
	default:
		return nil, fmt.Errorf("%w: a pack with %s %q (packs are version %d, or %d with a priority)", ErrVersion, HdrVersion, v, PackVersion, FeatureVersion)
	}
	count, err := strconv.Atoi(n)
	switch {
	case err != nil || count < 2 || count > MaxPack:
		return nil, fmt.Errorf("%w: bad %s %q (2–%d jobs)", ErrMalformed, HdrPack, n, MaxPack)
	case h.Get(HdrKey) != "" || h.Get(HdrSingle) != "" || h.Get(HdrRequire) != "" || h.Get(HdrPrefer) != "" ||
		h.Get(HdrMaxAttempts) != "" || h.Get(HdrTimeout) != "" || h.Get(HdrRunAt) != "" || h.Get(HdrReply) != "":
		return nil, fmt.Errorf("%w: a pack carries its jobs' options in its body, not in headers", ErrMalformed)
	}
	group := h.Get(HdrGroup)
	if err := ValidateGroupID(group); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return readPack(seq, h, data, kindPack, count, func(*reader) JobMeta { return JobMeta{Group: group, Priority: priority} })
}

// readPack decodes the body of a pack of kind holding count jobs, the one of message seq with
// headers h: head reads what a job of this kind holds before the fields every pack's job holds
// (readPackJob) and returns its metadata so far.
func readPack(seq uint64, h Header, data []byte, kind byte, count int, head func(*reader) JobMeta) ([]StoredJob, error) {
	trace := JobTrace(h)
	r := newReader(data, kind)
	if got := r.count(6); r.err == nil && got != count { // a job takes at least 6 bytes
		r.fail("%s says %d jobs, the body holds %d", HdrPack, count, got)
	}
	if r.err != nil {
		return nil, r.err
	}
	jobs := make([]StoredJob, count)
	for i := range jobs {
		j := &jobs[i]
		j.ID, j.Trace, j.Meta = PackedJobID(seq, i), trace, head(r)
		if err := readPackJob(r, j, i); err != nil {
			return nil, err
		}
	}
	if err := r.end(); err != nil {
		return nil, err
	}
	return jobs, nil
}

// JobIn is job id among the jobs parsed from its message (ParseStoredJobs), or nil if the
// message does not hold it.
func JobIn(jobs []StoredJob, id uint64) *StoredJob {
	if i := JobIndex(id); i < len(jobs) && jobs[i].ID == id {
		return &jobs[i]
	}
	return nil
}

// strings reads a list of resource names written by appendStrings; nil when empty. A list
// longer than a job may have (MaxResources) is malformed before anything is allocated for it.
func (r *reader) strings() []string {
	n := r.count(1)
	if n == 0 || r.err != nil {
		return nil
	}
	if n > MaxResources {
		r.fail("%d resource names, at most %d", n, MaxResources)
		return nil
	}
	ss := make([]string, n)
	for i := range ss {
		ss[i] = r.string()
	}
	return ss
}
