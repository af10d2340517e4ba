package wire

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Version is the protocol version this code speaks. Messages carry it in the Weave-Version header
// (NATS-visible messages) or as their first byte (binary payloads).
const Version = 1

// DefaultNamespace is the namespace used when a component's Config leaves it empty.
const DefaultNamespace = "weave"

// ErrBadName reports a namespace, group ID, job key or resource name that cannot be used.
var ErrBadName = errors.New("invalid name")

// ErrBadOption reports a job option outside its limits (MaxAttempts, Timeout). Like ErrBadName it
// carries no "weave:" prefix: callers put it after their own.
var ErrBadOption = errors.New("invalid job option")

const (
	maxNamespaceLen = 32
	// MaxGroupIDLen bounds a group ID; its subject token stays well under NATS limits.
	MaxGroupIDLen = 256
	// MaxKeyLen bounds a job key, which also forms part of the dedup Nats-Msg-Id.
	MaxKeyLen = 256
	// MaxResourceLen bounds one resource name.
	MaxResourceLen = 128
	// MaxResources bounds the resources a job may require or prefer, and a worker may hold.
	MaxResources = 64
)

// Names derives every stream, subject, consumer and bucket name of one namespace.
type Names struct{ ns string }

// NewNames validates ns ("" means DefaultNamespace) and returns its names. A namespace is 1–32
// characters of [A-Za-z0-9_-], because it is used in stream names and as a subject token.
func NewNames(ns string) (Names, error) {
	if ns == "" {
		ns = DefaultNamespace
	}
	if len(ns) > maxNamespaceLen || !isToken(ns) {
		return Names{}, fmt.Errorf("%w: namespace %q must be 1-%d characters of [A-Za-z0-9_-]", ErrBadName, ns, maxNamespaceLen)
	}
	return Names{ns: ns}, nil
}

// Namespace returns the namespace.
func (n Names) Namespace() string { return n.ns }

// JobsStream holds group control messages and jobs.
func (n Names) JobsStream() string { return n.ns + "_JOBS" }

// WorkStream is the work-queue stream of released job batches.
func (n Names) WorkStream() string { return n.ns + "_WORK" }

// EventsStream holds worker reports and the coordinator journal.
func (n Names) EventsStream() string { return n.ns + "_EVENTS" }

// ResultsStream holds per-group outcome batches for waiting submitters.
func (n Names) ResultsStream() string { return n.ns + "_RESULTS" }

// LeaseBucket is the KV bucket holding the coordinator lease.
func (n Names) LeaseBucket() string { return n.ns + "_LEASE" }

// KeyBucket is the KV bucket holding the coordinators' release key (ReleaseKey), which only the
// coordinator role may read.
func (n Names) KeyBucket() string { return n.ns + "_KEYS" }

// GroupSubject carries a group's control messages (open, seal, cancel).
func (n Names) GroupSubject(gtok string) string { return n.ns + ".group." + gtok }

// JobSubject carries a group's jobs.
func (n Names) JobSubject(gtok string) string { return n.ns + ".jobs." + gtok }

// SinglesSubject carries single packs (AppendSinglePack): single jobs of many groups, each its own
// group. Its last token, "~", is no group's token (GroupToken encodes an ID it cannot take as it is
// as "~" followed by at least one character).
func (n Names) SinglesSubject() string { return n.ns + ".jobs.~" }

// WorkSubject carries work batches for one pool.
func (n Names) WorkSubject(pool string) string { return n.ns + ".work." + pool }

// WorkConsumer is the durable consumer shared by the workers of one pool.
func (n Names) WorkConsumer(pool string) string { return "work-" + pool }

// ReportSubject carries the report batches of one worker of one pool. The pool and the worker
// are in the subject so that a worker's NATS permissions can allow exactly its own subject (see
// internal/auth); the coordinator accepts a report only for a job released to that pool.
func (n Names) ReportSubject(pool, worker string) string {
	return n.ns + ".ev.report." + pool + "." + worker
}

// ParseReportSubject returns the pool and worker of a report subject.
func (n Names) ParseReportSubject(subject string) (pool, worker string, ok bool) {
	return n.parsePoolWorker(subject, n.ns+".ev.report.")
}

// JournalSubject carries the coordinator's journal records.
func (n Names) JournalSubject() string { return n.ns + ".ev.coord" }

// OutcomeSubject carries a group's outcome batches and final record: the subject they are stored
// under in RESULTS, and the one every reader of a group's outcomes reads.
func (n Names) OutcomeSubject(gtok string) string { return n.ns + ".out." + gtok }

// OutcomeSubjectTo is the subject the coordinator publishes a group's outcomes on: OutcomeSubject
// with its producer's reply token appended (NoReply for a group opened without one). The RESULTS
// stream stores the message under OutcomeSubject (OutcomeTransform), while core NATS delivers it
// only to the subscribers of that token (ReplyOutcomes) and of that group (GroupOutcomes): a
// producer hears of its own groups, not of every group of the namespace.
func (n Names) OutcomeSubjectTo(gtok, reply string) string {
	if reply == "" {
		reply = NoReply
	}
	return n.ns + ".out." + gtok + "." + reply
}

// NoReply stands for the reply token of a group opened without one (by the coordinator, for a
// redrive or a schedule; by a producer of an earlier release).
const NoReply = "_"

// ReplyOutcomes matches the outcomes published to one producer's reply token.
func (n Names) ReplyOutcomes(reply string) string { return n.ns + ".out.*." + reply }

// GroupOutcomes matches the outcomes of one group as the coordinator publishes them (a coordinator
// of an earlier release published them on OutcomeSubject).
func (n Names) GroupOutcomes(gtok string) string { return n.ns + ".out." + gtok + ".*" }

// ParseOutcomeSubject returns the group token of an outcome subject as stored or as published.
func (n Names) ParseOutcomeSubject(subject string) (gtok string, ok bool) {
	rest, ok := strings.CutPrefix(subject, n.ns+".out.")
	if !ok {
		return "", false
	}
	gtok, _, _ = strings.Cut(rest, ".")
	return gtok, gtok != ""
}

// OutcomeTransform is the RESULTS stream's input transform: an outcome published to a reply
// token is stored under its group's OutcomeSubject.
func (n Names) OutcomeTransform() (source, destination string) {
	return n.ns + ".out.*.*", n.ns + ".out.{{wildcard(1)}}"
}

// RejectedStream records messages a component refused, with the reason; it is bounded.
func (n Names) RejectedStream() string { return n.ns + "_REJECTED" }

// RejectSubject carries the rejection records (in the REJECTED stream).
func (n Names) RejectSubject() string { return n.ns + ".rejected" }

// CancelSubject tells workers to cancel running jobs (core NATS; see CancelRequest).
func (n Names) CancelSubject() string { return n.ns + ".cancel" }

// RollCallSubject asks every worker to heartbeat now (core NATS, any body): a coordinator
// starting its term knows no worker until it hears one, and an idle worker may be silent for
// minutes.
func (n Names) RollCallSubject() string { return n.ns + ".rollcall" }

// HeartbeatSubject carries the heartbeats of one worker of one pool (core NATS). A heartbeat
// with a reply subject asks the coordinator to answer a refusal there (see HeartbeatReply).
func (n Names) HeartbeatSubject(pool, worker string) string {
	return n.ns + ".hb." + pool + "." + worker
}

// ParseHeartbeatSubject returns the pool and worker of a heartbeat subject.
func (n Names) ParseHeartbeatSubject(subject string) (pool, worker string, ok bool) {
	return n.parsePoolWorker(subject, n.ns+".hb.")
}

// JoinSubject is where a starting worker asks the coordinator, with a heartbeat marked Join, whether
// it may run under its ID (core NATS request/reply; see HeartbeatReply). It is not a heartbeat
// subject, so that nothing but the coordinator answers it.
func (n Names) JoinSubject(pool, worker string) string {
	return n.ns + ".api.join." + pool + "." + worker
}

// ParseJoinSubject returns the pool and worker of a join subject.
func (n Names) ParseJoinSubject(subject string) (pool, worker string, ok bool) {
	return n.parsePoolWorker(subject, n.ns+".api.join.")
}

// parsePoolWorker splits prefix + "<pool>.<worker>". The pool must be a pool key's form (a
// token) and the worker a valid worker ID or RescueWorker.
func (n Names) parsePoolWorker(subject, prefix string) (pool, worker string, ok bool) {
	rest, ok := strings.CutPrefix(subject, prefix)
	if !ok {
		return "", "", false
	}
	pool, worker, ok = strings.Cut(rest, ".")
	if !ok || !isToken(pool) || (worker != RescueWorker && ValidateWorkerID(worker) != nil) {
		return "", "", false
	}
	return pool, worker, true
}

// StatusSubject answers status requests (core NATS request/reply).
func (n Names) StatusSubject() string { return n.ns + ".api.status" }

// AlarmSubject is where the coordinator publishes an alarm's raised and cleared events (JSON).
func (n Names) AlarmSubject(name string) string { return n.ns + ".alarm." + name }

// AllAlarms matches every alarm subject.
func (n Names) AllAlarms() string { return n.ns + ".alarm.*" }

// Wildcards used by stream configs and the coordinator's subscriptions.
func (n Names) AllGroups() string     { return n.ns + ".group.>" }
func (n Names) AllJobs() string       { return n.ns + ".jobs.>" }
func (n Names) AllWork() string       { return n.ns + ".work.>" }
func (n Names) AllReports() string    { return n.ns + ".ev.report.>" }
func (n Names) AllEvents() string     { return n.ns + ".ev.>" }
func (n Names) AllOutcomes() string   { return n.ns + ".out.>" }
func (n Names) AllHeartbeats() string { return n.ns + ".hb.*.*" }
func (n Names) AllJoins() string      { return n.ns + ".api.join.*.*" }
func (n Names) AllReplies() string    { return n.ns + ".reply.>" }

// ReplySubject is the core NATS subject the coordinator answers a control message on whose
// Weave-Reply header holds token (see ControlAnswer). No stream captures it. Only a token travels
// in the header, not a subject, so a producer cannot make the coordinator publish anywhere else.
func (n Names) ReplySubject(token string) string { return n.ns + ".reply." + token }

// ValidateReplyToken checks a Weave-Reply token: 1-64 characters of [A-Za-z0-9_-].
func ValidateReplyToken(tok string) error {
	if len(tok) > 64 || !isToken(tok) {
		return fmt.Errorf("%w: %s %q must be 1-64 characters of [A-Za-z0-9_-]", ErrBadName, HdrReply, tok)
	}
	return nil
}

// GroupToken returns the subject token for a group ID: the ID itself when it is 1–64 characters
// of [A-Za-z0-9_-], else "~" followed by the unpadded base64url encoding of the ID. The mapping is
// injective: plain tokens never start with "~".
func GroupToken(id string) string {
	if len(id) <= 64 && isToken(id) {
		return id
	}
	return "~" + base64.RawURLEncoding.EncodeToString([]byte(id))
}

// ParseGroupToken inverts GroupToken.
func ParseGroupToken(tok string) (string, error) {
	if rest, ok := strings.CutPrefix(tok, "~"); ok {
		b, err := base64.RawURLEncoding.DecodeString(rest)
		if err != nil {
			return "", fmt.Errorf("%w: group token %q: %v", ErrBadName, tok, err)
		}
		return string(b), nil
	}
	if tok == "" || len(tok) > 64 || !isToken(tok) {
		return "", fmt.Errorf("%w: group token %q", ErrBadName, tok)
	}
	return tok, nil
}

// ValidateGroupID checks a group ID: 1–256 bytes of names' text (see ValidateKey's rule).
func ValidateGroupID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty group ID", ErrBadName)
	}
	return validateText("group ID", id, MaxGroupIDLen)
}

// ValidateKey checks a job key; an empty key is allowed (the job then has no dedup ID).
//
// Group IDs, job keys and group limit names follow one rule: valid UTF-8 with no control
// characters (C0, DEL, C1), no format characters (Unicode category Cf: bidi overrides, embeddings,
// isolates and marks, zero-width spaces and joiners, the byte-order mark, soft hyphens), no line or
// paragraph separator and no U+FFFD. These are the characters that can make two names look the
// same, or a name look like another, on an operator's screen.
func ValidateKey(key string) error {
	if key == "" {
		return nil
	}
	return validateText("job key", key, MaxKeyLen)
}

// ValidateResources checks a list of resource names: at most MaxResources names of
// [A-Za-z0-9_.:/@=+-], each 1–128 bytes. Commas separate names in headers, so they are refused.
func ValidateResources(what string, rs []string) error {
	if len(rs) > MaxResources {
		return fmt.Errorf("%w: %d %s resources, at most %d", ErrBadName, len(rs), what, MaxResources)
	}
	for _, r := range rs {
		if r == "" || len(r) > MaxResourceLen || strings.IndexFunc(r, func(c rune) bool { return !isResourceRune(c) }) >= 0 {
			return fmt.Errorf("%w: %s resource %q must be 1-%d characters of [A-Za-z0-9_.:/@=+-]", ErrBadName, what, r, MaxResourceLen)
		}
	}
	return nil
}

// RescueWorker is the worker name on the reports by which the coordinator hands back the jobs
// of a pool left without workers, on NS.ev.report.<pool>.~coordinator. It is not a valid worker
// ID, so no worker can use it, and only the coordinator role may publish on that subject.
const RescueWorker = "~coordinator"

// ValidateWorkerID checks a worker ID, which is used as a subject token.
func ValidateWorkerID(id string) error {
	if len(id) > 64 || !isToken(id) {
		return fmt.Errorf("%w: worker ID %q must be 1-64 characters of [A-Za-z0-9_-]", ErrBadName, id)
	}
	return nil
}

// PoolKey names the pool of workers holding exactly the given resources: "any" for none, else
// "p" and 16 hex digits of SHA-256 over the sorted, de-duplicated names joined by "\n". The
// hash is cryptographic because a worker's permissions name its pool key: a worker must not be
// able to find another resource set (one holding what others' jobs require) with its own key.
func PoolKey(resources []string) string {
	rs := NormalizeResources(resources)
	if len(rs) == 0 {
		return "any"
	}
	sum := sha256.Sum256([]byte(strings.Join(rs, "\n")))
	return "p" + hex.EncodeToString(sum[:8])
}

// NormalizeResources returns the names sorted and de-duplicated (a new slice).
func NormalizeResources(resources []string) []string {
	rs := slices.Clone(resources)
	slices.Sort(rs)
	return slices.Compact(rs)
}

func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func isResourceRune(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("_.:/@=+-", c)
}

func validateText(what, s string, max int) error {
	if len(s) > max {
		return fmt.Errorf("%w: %s is %d bytes, at most %d", ErrBadName, what, len(s), max)
	}
	for i, c := range s {
		if why := unnamable(c); why != "" {
			return fmt.Errorf("%w: %s %s contains %s (U+%04X at byte %d): names may not hold control, format, bidi or zero-width characters", ErrBadName, what, strconv.QuoteToASCII(s), why, c, i)
		}
	}
	return nil
}

// unnamable says why c may not appear in a name, or "" when it may.
func unnamable(c rune) string {
	switch {
	case c == utf8.RuneError:
		return "invalid UTF-8 or U+FFFD"
	case unicode.Is(unicode.Cc, c):
		return "a control character"
	case isBidi(c):
		return "a bidi control"
	case unicode.Is(unicode.Cf, c):
		return "a format (zero-width or invisible) character"
	case unicode.In(c, unicode.Zl, unicode.Zp):
		return "a line or paragraph separator"
	}
	return ""
}

// isBidi reports the characters that reorder text: the bidi marks, embeddings, overrides and
// isolates.
func isBidi(c rune) bool {
	return c == 0x061c || c == 0x200e || c == 0x200f || c >= 0x202a && c <= 0x202e || c >= 0x2066 && c <= 0x2069
}
