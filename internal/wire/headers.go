package wire

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Header names of the protocol. Nats-Msg-Id is JetStream's own dedup header.
const (
	HdrVersion     = "Weave-Version"
	HdrGroup       = "Weave-Group"
	HdrOp          = "Weave-Op"
	HdrCount       = "Weave-Count"
	HdrJobs        = "Weave-Jobs" // on cancel and redrive: the IDs of the jobs (decimal, comma-separated); absent = the whole group
	HdrKey         = "Weave-Key"
	HdrRequire     = "Weave-Require"
	HdrPrefer      = "Weave-Prefer"
	HdrMaxAttempts = "Weave-Max-Attempts"
	HdrTimeout     = "Weave-Timeout"
	HdrEpoch       = "Weave-Epoch"
	HdrGroupSeq    = "Weave-Group-Seq"  // on outcomes: the sequence of the group's open (its incarnation)
	HdrLastSeq     = "Weave-Last-Seq"   // on a summary: the JOBS sequence of its incarnation's last message when it completed
	HdrReason      = "Weave-Reason"     // on rejections
	HdrSubject     = "Weave-Subject"    // on rejections: the refused message's subject
	HdrSeq         = "Weave-Seq"        // on rejections: the refused message's stream sequence
	HdrJob         = "Weave-Job"        // on a rejection of one job of a single pack: its ID
	HdrAbandoned   = "Weave-Abandoned"  // on a seal the coordinator wrote for a group whose producer went silent: "1"
	HdrReply       = "Weave-Reply"      // on cancel and redrive: the token of the subject NS.reply.<token> the coordinator answers on; on an open or a single job: the producer's token its outcomes are published to (Names.OutcomeSubjectTo)
	HdrRedrive     = "Weave-Redrive"    // on an open the coordinator publishes for a redrive: the request's JOBS sequence
	HdrRedriveOf   = "Weave-Redrive-Of" // on a job the coordinator publishes for a redrive: the failed job's ID
	HdrRunAt       = "Weave-Run-At"     // on a delayed job: the time it may run at, in Unix milliseconds
	HdrWeight      = "Weave-Weight"     // on an open: the group's weight in the fair share (1–MaxWeight; absent = 1)
	HdrSingle      = "Weave-Single"     // on a job: "1", a single job, its own group: open, job and seal in one message
	HdrMsgID       = "Nats-Msg-Id"
)

// ErrMalformed reports a message that does not follow the protocol. Components reject such
// messages (recording the reason) and keep running.
var ErrMalformed = errors.New("weave: malformed message")

// ErrVersion reports a message from a protocol version this code does not speak.
var ErrVersion = errors.New("weave: unsupported protocol version")

// Limits on job options, shared by the dispatcher (API errors) and the coordinator (wire checks).
const (
	// MaxAttemptsLimit bounds Job.MaxAttempts.
	MaxAttemptsLimit = 1000
	// MaxTimeout bounds Job.Timeout.
	MaxTimeout = 7 * 24 * time.Hour
	// MaxDelay bounds how far ahead of its publish a job may be delayed (Job.Delay, Job.RunAt).
	MaxDelay = 366 * 24 * time.Hour
	// MaxWeight bounds a group's weight.
	MaxWeight = 1000
)

// GroupOp is the operation of a group control message.
type GroupOp string

// Group control operations.
const (
	OpOpen   GroupOp = "open"
	OpSeal   GroupOp = "seal"
	OpCancel GroupOp = "cancel"
	// OpKeepAlive says the producer of an open group is still there, though it has published no
	// job for a while: the coordinator seals a group that hears neither for its AbandonAfter.
	OpKeepAlive GroupOp = "keepalive"
	// OpRedrive asks the coordinator to run the failed jobs of the group's latest complete
	// incarnation again, as a new incarnation (all of them, or those in Jobs). The coordinator
	// decides and answers on Reply (see ControlAnswer).
	OpRedrive GroupOp = "redrive"
)

// GroupControl is a decoded group control message.
type GroupControl struct {
	Group string
	Op    GroupOp
	Count uint64   // jobs accepted, on seal
	Jobs  []uint64 // on cancel and redrive: only these jobs of the group; nil = the whole group
	// Abandoned marks a seal the coordinator wrote because the group's producer went silent.
	Abandoned bool
	// Reply, on cancel and redrive, is a subject token: the coordinator answers on
	// NS.reply.<Reply> (core NATS, see ControlAnswer) when it applies or refuses the message.
	// Empty: no answer. On an open it is the producer's reply token: the group's outcomes are
	// published to it (Names.OutcomeSubjectTo). Empty: to the group's subject alone.
	Reply string
	// Redrive, on an open, is the JOBS sequence of the redrive request the coordinator accepted
	// by publishing this open: the stored record of its decision. 0 on a producer's open.
	Redrive uint64
	// Weight, on an open, scales the group's fair share of the slots: a group of weight 3 gets
	// three times the share of one of weight 1 (1–MaxWeight; 0 on the wire means 1).
	Weight int
	// After, on an open, lists the groups this one runs after (see After); Priority is the
	// group's priority (0–MaxPriority): its jobs go before those of lower priorities.
	After    []After
	Priority int
	// Incarnation and Proof, on a ready record (OpReady), name the incarnation whose
	// dependencies are met and prove that a coordinator wrote it (ReleaseKey.ReadyProof). On a
	// redrive's open, Proof proves that a coordinator accepted the request (RedriveProof).
	Incarnation uint64
	Proof       string
	// AfterFailed, on a cancel of a whole group, names the group it runs after that ended
	// otherwise than it asks: the coordinator's cancel, which leaves the group open.
	AfterFailed string
}

// MaxCancelJobs bounds the job IDs one cancel or redrive message names.
const MaxCancelJobs = 10_000

// Header returns the headers of a group control message.
func (c GroupControl) Header() map[string][]string {
	h := Header{}
	h.Set(HdrVersion, strconv.Itoa(Version))
	h.Set(HdrGroup, c.Group)
	h.Set(HdrOp, string(c.Op))
	if c.Op == OpSeal {
		h.Set(HdrCount, strconv.FormatUint(c.Count, 10))
		if c.Abandoned {
			h.Set(HdrAbandoned, "1")
		}
	}
	if c.Op == OpOpen && c.Redrive > 0 {
		h.Set(HdrRedrive, strconv.FormatUint(c.Redrive, 10))
		h.Set(HdrProof, c.Proof)
	}
	if c.Op == OpOpen && c.Weight > 0 {
		h.Set(HdrWeight, strconv.Itoa(c.Weight))
	}
	if c.Op == OpOpen {
		setFeatures(h, c.After, c.Priority)
	}
	if (c.Op == OpCancel || c.Op == OpRedrive) && len(c.Jobs) > 0 {
		ids := make([]string, len(c.Jobs))
		for i, id := range c.Jobs {
			ids[i] = strconv.FormatUint(id, 10)
		}
		h.Set(HdrJobs, strings.Join(ids, ","))
	}
	if c.Op == OpCancel && c.AfterFailed != "" {
		h.Set(HdrAfterFailed, c.AfterFailed)
	}
	if c.Op == OpReady {
		h.Set(HdrGroupSeq, strconv.FormatUint(c.Incarnation, 10))
		h.Set(HdrProof, c.Proof)
		h.Set(HdrMsgID, ReadyMsgID(GroupToken(c.Group), c.Incarnation))
	}
	if (c.Op == OpCancel || c.Op == OpRedrive || c.Op == OpOpen) && c.Reply != "" {
		h.Set(HdrReply, c.Reply)
	}
	return h
}

// ParseGroupControl decodes and validates the headers of a group control message.
func ParseGroupControl(hm map[string][]string) (GroupControl, error) {
	h := Header(hm)
	if err := checkVersion(h); err != nil {
		return GroupControl{}, err
	}
	c := GroupControl{Group: h.Get(HdrGroup), Op: GroupOp(h.Get(HdrOp))}
	if err := ValidateGroupID(c.Group); err != nil {
		return GroupControl{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	switch c.Op {
	case OpKeepAlive:
	case OpOpen:
		if c.Reply = h.Get(HdrReply); c.Reply != "" {
			if err := ValidateReplyToken(c.Reply); err != nil {
				return GroupControl{}, fmt.Errorf("%w: %v", ErrMalformed, err)
			}
		}
		if v := h.Get(HdrRedrive); v != "" {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil || n == 0 {
				return GroupControl{}, fmt.Errorf("%w: open of group %q: bad %s %q", ErrMalformed, c.Group, HdrRedrive, v)
			}
			c.Redrive, c.Proof = n, h.Get(HdrProof)
		}
		if v := h.Get(HdrWeight); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > MaxWeight {
				return GroupControl{}, fmt.Errorf("%w: open of group %q: bad %s %q (want 1..%d)", ErrMalformed, c.Group, HdrWeight, v, MaxWeight)
			}
			c.Weight = n
		}
		var err error
		if c.After, c.Priority, err = parseFeatures(h, c.Group); err != nil {
			return GroupControl{}, err
		}
	case OpCancel, OpRedrive:
		if v := h.Get(HdrAfterFailed); v != "" && c.Op == OpCancel {
			if err := ValidateGroupID(v); err != nil {
				return GroupControl{}, fmt.Errorf("%w: %s: %v", ErrMalformed, HdrAfterFailed, err)
			}
			c.AfterFailed = v
		}
		if c.Reply = h.Get(HdrReply); c.Reply != "" {
			if err := ValidateReplyToken(c.Reply); err != nil {
				return GroupControl{}, fmt.Errorf("%w: %v", ErrMalformed, err)
			}
		}
		if v := h.Get(HdrJobs); v != "" {
			parts := strings.Split(v, ",")
			if len(parts) > MaxCancelJobs {
				return GroupControl{}, fmt.Errorf("%w: %s of %d jobs, at most %d", ErrMalformed, c.Op, len(parts), MaxCancelJobs)
			}
			for _, p := range parts {
				id, err := strconv.ParseUint(strings.TrimSpace(p), 10, 64)
				if err != nil || id == 0 {
					return GroupControl{}, fmt.Errorf("%w: bad job ID %q in %s", ErrMalformed, p, HdrJobs)
				}
				c.Jobs = append(c.Jobs, id)
			}
		}
	case OpReady:
		n, err := strconv.ParseUint(h.Get(HdrGroupSeq), 10, 64)
		if err != nil || n == 0 {
			return GroupControl{}, fmt.Errorf("%w: ready record of group %q: bad %s %q", ErrMalformed, c.Group, HdrGroupSeq, h.Get(HdrGroupSeq))
		}
		c.Incarnation, c.Proof = n, h.Get(HdrProof)
	case OpSeal:
		n, err := strconv.ParseUint(h.Get(HdrCount), 10, 64)
		if err != nil {
			return GroupControl{}, fmt.Errorf("%w: seal of group %q: bad %s %q", ErrMalformed, c.Group, HdrCount, h.Get(HdrCount))
		}
		c.Count = n
		c.Abandoned = h.Get(HdrAbandoned) == "1"
	default:
		return GroupControl{}, fmt.Errorf("%w: unknown %s %q", ErrMalformed, HdrOp, c.Op)
	}
	return c, nil
}

// JobMeta is everything about a job except its payload; it travels in the job message's headers.
type JobMeta struct {
	Group       string
	Key         string
	Require     []string
	Prefer      []string
	MaxAttempts int           // 0 = the coordinator's default
	Timeout     time.Duration // 0 = the worker's default
	RunAt       time.Time     // zero = at once; else not before this time (millisecond precision)
	// Single marks a single job: the group Group holds it alone, opened and sealed by this one
	// message (see the dispatcher's Submit).
	Single bool
	// RedriveOf is, on a job the coordinator publishes for a redrive, the ID of the failed job
	// it runs again (Weave-Redrive-Of); 0 otherwise.
	RedriveOf uint64
	// Reply, on a single job, is its producer's reply token, as on an open (GroupControl.Reply).
	Reply string
	// After, on a single job, is its group's, as on an open (GroupControl). Priority, on a single
	// job, is its group's; on another job, its priority within its group (0–MaxPriority): it is
	// released before the group's jobs of lower priorities.
	After    []After
	Priority int
}

// Validate checks the metadata against the protocol's limits.
func (m JobMeta) Validate() error {
	if err := ValidateGroupID(m.Group); err != nil {
		return err
	}
	if err := ValidateKey(m.Key); err != nil {
		return err
	}
	if err := ValidateResources("required", m.Require); err != nil {
		return err
	}
	if err := ValidateResources("preferred", m.Prefer); err != nil {
		return err
	}
	if m.Reply != "" {
		if !m.Single {
			return fmt.Errorf("%w: %s on a job that is not a single job", ErrBadOption, HdrReply)
		}
		if err := ValidateReplyToken(m.Reply); err != nil {
			return err
		}
	}
	if len(m.After) > 0 {
		if !m.Single {
			return fmt.Errorf("%w: a job that is not a single job takes its group's dependencies from its open", ErrBadOption)
		}
		if err := ValidateAfter(m.Group, m.After); err != nil {
			return err
		}
	}
	if err := ValidatePriority(m.Priority); err != nil {
		return err
	}
	if m.MaxAttempts < 0 || m.MaxAttempts > MaxAttemptsLimit {
		return fmt.Errorf("%w: MaxAttempts %d outside 0..%d", ErrBadOption, m.MaxAttempts, MaxAttemptsLimit)
	}
	if m.Timeout < 0 || m.Timeout > MaxTimeout {
		return fmt.Errorf("%w: Timeout %v outside 0..%v", ErrBadOption, m.Timeout, MaxTimeout)
	}
	return nil
}

// MsgID is the JetStream dedup ID of a job with a key: "<gtok>/<key>"; "" when the key is empty.
func (m JobMeta) MsgID() string {
	if m.Key == "" {
		return ""
	}
	return GroupToken(m.Group) + "/" + m.Key
}

// Header returns the headers of a job message.
func (m JobMeta) Header() map[string][]string {
	h := Header{}
	h.Set(HdrVersion, strconv.Itoa(Version))
	h.Set(HdrGroup, m.Group)
	if m.Key != "" {
		h.Set(HdrKey, m.Key)
		h.Set(HdrMsgID, m.MsgID())
	}
	if len(m.Require) > 0 {
		h.Set(HdrRequire, strings.Join(m.Require, ","))
	}
	if len(m.Prefer) > 0 {
		h.Set(HdrPrefer, strings.Join(m.Prefer, ","))
	}
	if m.MaxAttempts > 0 {
		h.Set(HdrMaxAttempts, strconv.Itoa(m.MaxAttempts))
	}
	if m.Timeout > 0 {
		h.Set(HdrTimeout, m.Timeout.String())
	}
	if !m.RunAt.IsZero() {
		h.Set(HdrRunAt, strconv.FormatInt(m.RunAt.UnixMilli(), 10))
	}
	if m.RedriveOf != 0 {
		h.Set(HdrRedriveOf, strconv.FormatUint(m.RedriveOf, 10))
	}
	if m.Single {
		h.Set(HdrSingle, "1")
		// Dedup by group and key: the same single job submitted again is stored once.
		h.Set(HdrMsgID, "single/"+GroupToken(m.Group)+"/"+m.Key)
		if m.Reply != "" {
			h.Set(HdrReply, m.Reply)
		}
	}
	setFeatures(h, m.After, m.Priority)
	return h
}

// ParseJobMeta decodes and validates the headers of a job message.
func ParseJobMeta(hm map[string][]string) (JobMeta, error) {
	h := Header(hm)
	if err := checkVersion(h); err != nil {
		return JobMeta{}, err
	}
	m := JobMeta{Group: h.Get(HdrGroup), Key: h.Get(HdrKey)}
	m.Require = splitList(h.Get(HdrRequire))
	m.Prefer = splitList(h.Get(HdrPrefer))
	if v := h.Get(HdrMaxAttempts); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return JobMeta{}, fmt.Errorf("%w: bad %s %q", ErrMalformed, HdrMaxAttempts, v)
		}
		m.MaxAttempts = n
	}
	if v := h.Get(HdrTimeout); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return JobMeta{}, fmt.Errorf("%w: bad %s %q", ErrMalformed, HdrTimeout, v)
		}
		m.Timeout = d
	}
	switch v := h.Get(HdrSingle); v {
	case "":
	case "1":
		m.Single = true
	default:
		return JobMeta{}, fmt.Errorf("%w: bad %s %q", ErrMalformed, HdrSingle, v)
	}
	if v := h.Get(HdrRedriveOf); v != "" {
		id, err := strconv.ParseUint(v, 10, 64)
		if err != nil || id == 0 {
			return JobMeta{}, fmt.Errorf("%w: bad %s %q", ErrMalformed, HdrRedriveOf, v)
		}
		m.RedriveOf = id
	}
	if m.Reply = h.Get(HdrReply); m.Reply != "" {
		if !m.Single {
			return JobMeta{}, fmt.Errorf("%w: %s on a job that is not a single job", ErrMalformed, HdrReply)
		}
		if err := ValidateReplyToken(m.Reply); err != nil {
			return JobMeta{}, fmt.Errorf("%w: %v", ErrMalformed, err)
		}
	}
	var err error
	if m.After, m.Priority, err = parseFeatures(h, m.Group); err != nil {
		return JobMeta{}, err
	}
	if len(m.After) > 0 && !m.Single {
		return JobMeta{}, fmt.Errorf("%w: %s on a job that is not a single job", ErrMalformed, HdrAfter)
	}
	if v := h.Get(HdrRunAt); v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms <= 0 || ms > maxRunAtMilli {
			return JobMeta{}, fmt.Errorf("%w: bad %s %q (want Unix milliseconds)", ErrMalformed, HdrRunAt, v)
		}
		m.RunAt = time.UnixMilli(ms)
	}
	if err := m.Validate(); err != nil {
		return JobMeta{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return m, nil
}

// maxRunAtMilli is the latest run-at time the wire accepts (the year 9999): any later is
// surely a mistake, and the API bounds delays much tighter (MaxDelay).
var maxRunAtMilli = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC).UnixMilli()

func checkVersion(h Header) error {
	v := h.Get(HdrVersion)
	if v == "" {
		return fmt.Errorf("%w: missing %s header", ErrMalformed, HdrVersion)
	}
	if v != strconv.Itoa(Version) && v != strconv.Itoa(FeatureVersion) {
		return fmt.Errorf("%w: %s %q (this build speaks %d and %d)", ErrVersion, HdrVersion, v, Version, FeatureVersion)
	}
	return nil
}

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	parts := strings.Split(s, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}

// RejectionHeader is the header of the record of a refused message (the subject and stream
// sequence it had, and why), published on Names.RejectSubject to the REJECTED stream. seq may be
// the packed ID of one job of a single pack refused alone: the record then names both.
func RejectionHeader(subject string, seq uint64, reason string) Header {
	h := Header{}
	h.Set(HdrVersion, strconv.Itoa(Version))
	h.Set(HdrReason, reason)
	h.Set(HdrSubject, subject)
	h.Set(HdrSeq, strconv.FormatUint(JobSeq(seq), 10))
	if IsPacked(seq) {
		h.Set(HdrJob, strconv.FormatUint(seq, 10)) // one job of a single pack refused, not its message
	}
	return h
}

// Header is a message's headers, the type nats.Header is, named here so that the protocol, and
// the coordinator's engine that speaks it, import no NATS client. The parsers take any
// map[string][]string, so a nats.Header passes as it is; a Header goes into a nats.Msg as
// nats.Header(h). Like nats.Header, its keys are case-sensitive.
type Header map[string][]string

// Get returns the first value of key, "" if it has none.
func (h Header) Get(key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set sets key to the single value v.
func (h Header) Set(key, v string) { h[key] = []string{v} }

// Add appends v to the values of key.
func (h Header) Add(key, v string) { h[key] = append(h[key], v) }

// Values returns the values of key.
func (h Header) Values(key string) []string { return h[key] }
