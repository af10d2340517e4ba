package wire

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Dependencies between groups. A group's open (or a single job's message) may name groups it
// runs after, one Weave-After header value each: none of its jobs is released until each of
// those has completed as its condition asks. Follow-ups are built on the same edge: a producer
// publishes the follow-up group with an edge to the group it follows.
//
// A value is "<when> <if-failed> <incarnation> <group>": when is success, complete or failure;
// if-failed (what a success edge does when its group did not succeed) is cancel or wait;
// incarnation is the open sequence of the group's incarnation it names, or 0 for the coordinator
// to bind it (the group ID's latest incarnation opened before, else its next one); the group ID
// comes last, so it may hold spaces.
//
// Messages that carry edges or a priority have Weave-Version FeatureVersion: a coordinator of a
// build before them refuses them as a version it does not speak (and records the rejection)
// rather than run a dependent group at once or ignore its priority.
const (
	HdrAfter = "Weave-After"
	// HdrPriority, on an open or a single job: the group's priority; on a job or pack of a group:
	// its jobs' priority within the group (1–MaxPriority; absent = 0).
	HdrPriority = "Weave-Priority"
	// HdrAfterFailed, on the coordinator's cancel of a group, names the group it ran after that
	// ended otherwise than it asked.
	HdrAfterFailed = "Weave-After-Failed"

	// FeatureVersion is the Weave-Version of an open or a single job with edges or a priority.
	FeatureVersion = 3

	// MaxAfter bounds the groups one group runs after (a fan-in wider than this is a chain of
	// groups, or a group with its own edges).
	MaxAfter = 256
	// MaxPriority is the highest priority, of a group or of a job within its group.
	MaxPriority = 9
)

// When is the condition an edge waits for.
type When uint8

const (
	// WhenSuccess: the group completed with every job done.
	WhenSuccess When = iota
	// WhenComplete: the group completed, whatever its jobs' outcomes.
	WhenComplete
	// WhenFailure: the group completed with a job failed or canceled; a group that succeeded
	// cancels the edge's dependent (its condition can no longer be met).
	WhenFailure
)

var whenNames = [...]string{WhenSuccess: "success", WhenComplete: "complete", WhenFailure: "failure"}

func (w When) String() string {
	if int(w) < len(whenNames) {
		return whenNames[w]
	}
	return "when(" + strconv.Itoa(int(w)) + ")"
}

// IfFailed is what a success edge does when its group completed without succeeding.
type IfFailed uint8

const (
	// IfFailedCancel cancels the dependent group: its jobs end canceled, and groups that run
	// after it on success are canceled in turn.
	IfFailedCancel IfFailed = iota
	// IfFailedWait keeps the dependent waiting until a redrive of the failed group succeeds
	// (Sidekiq's on-success callback): visible as waiting, and cancelable.
	IfFailedWait
)

var ifFailedNames = [...]string{IfFailedCancel: "cancel", IfFailedWait: "wait"}

func (f IfFailed) String() string {
	if int(f) < len(ifFailedNames) {
		return ifFailedNames[f]
	}
	return "if-failed(" + strconv.Itoa(int(f)) + ")"
}

// After is one edge: the group it runs after, and on what condition.
type After struct {
	Group string
	// Incarnation is the open sequence of Group's incarnation, or 0: bound by the coordinator.
	Incarnation uint64
	When        When
	IfFailed    IfFailed // for WhenSuccess; cancel for the others
}

// Validate checks an edge against the protocol.
func (a After) Validate() error {
	if err := ValidateGroupID(a.Group); err != nil {
		return err
	}
	if int(a.When) >= len(whenNames) || int(a.IfFailed) >= len(ifFailedNames) {
		return fmt.Errorf("%w: after %q: condition %v, if failed %v", ErrBadOption, a.Group, a.When, a.IfFailed)
	}
	if a.IfFailed != IfFailedCancel && a.When != WhenSuccess {
		return fmt.Errorf("%w: after %q: if-failed %v applies to a success condition only", ErrBadOption, a.Group, a.IfFailed)
	}
	return nil
}

func (a After) value() string {
	return a.When.String() + " " + a.IfFailed.String() + " " + strconv.FormatUint(a.Incarnation, 10) + " " + a.Group
}

// ValidateAfter checks a group's edges: each valid, at most MaxAfter, no group named twice and
// not the group itself.
func ValidateAfter(group string, edges []After) error {
	if len(edges) > MaxAfter {
		return fmt.Errorf("%w: %d groups to run after, at most %d", ErrBadOption, len(edges), MaxAfter)
	}
	seen := make(map[string]bool, len(edges))
	for _, a := range edges {
		if err := a.Validate(); err != nil {
			return err
		}
		if a.Group == group {
			return fmt.Errorf("%w: group %q cannot run after itself", ErrBadOption, group)
		}
		if seen[a.Group] {
			return fmt.Errorf("%w: group %q named twice to run after", ErrBadOption, a.Group)
		}
		seen[a.Group] = true
	}
	return nil
}

// ValidatePriority checks a group's priority: 0 (none) to MaxPriority.
func ValidatePriority(p int) error {
	if p < 0 || p > MaxPriority {
		return fmt.Errorf("%w: priority %d outside 0..%d", ErrBadOption, p, MaxPriority)
	}
	return nil
}

// setFeatures adds edges and a priority to h, and the version that says a message uses them.
func setFeatures(h Header, edges []After, priority int) {
	if len(edges) == 0 && priority == 0 {
		return
	}
	h.Set(HdrVersion, strconv.Itoa(FeatureVersion))
	for _, a := range edges {
		h.Add(HdrAfter, a.value())
	}
	if priority > 0 {
		h.Set(HdrPriority, strconv.Itoa(priority))
	}
}

// parseFeatures reads the edges and the priority of a message of group (which its edges may
// not name).
func parseFeatures(h Header, group string) ([]After, int, error) {
	vals := h.Values(HdrAfter)
	if len(vals) > MaxAfter {
		return nil, 0, fmt.Errorf("%w: %d %s values, at most %d", ErrMalformed, len(vals), HdrAfter, MaxAfter)
	}
	var edges []After
	for _, v := range vals {
		a, err := parseAfter(v)
		if err != nil {
			return nil, 0, err
		}
		edges = append(edges, a)
	}
	if err := ValidateAfter(group, edges); err != nil {
		return nil, 0, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	priority := 0
	if v := h.Get(HdrPriority); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxPriority || v != strconv.Itoa(n) {
			return nil, 0, fmt.Errorf("%w: bad %s %q (want 1..%d)", ErrMalformed, HdrPriority, v, MaxPriority)
		}
		priority = n
	}
	if (len(edges) > 0 || priority > 0) && h.Get(HdrVersion) != strconv.Itoa(FeatureVersion) {
		return nil, 0, fmt.Errorf("%w: %s or %s on a message of %s %q (want %d)", ErrMalformed, HdrAfter, HdrPriority, HdrVersion, h.Get(HdrVersion), FeatureVersion)
	}
	return edges, priority, nil
}

func parseAfter(v string) (After, error) {
	bad := func() (After, error) {
		return After{}, fmt.Errorf("%w: bad %s %q (want \"<when> <if-failed> <incarnation> <group>\")", ErrMalformed, HdrAfter, v)
	}
	f := strings.SplitN(v, " ", 4)
	if len(f) != 4 {
		return bad()
	}
	var a After
	when, ok := indexOf(whenNames[:], f[0])
	if !ok {
		return bad()
	}
	ifFailed, ok := indexOf(ifFailedNames[:], f[1])
	if !ok {
		return bad()
	}
	a.When, a.IfFailed = When(when), IfFailed(ifFailed)
	inc, err := strconv.ParseUint(f[2], 10, 64)
	if err != nil || f[2] != strconv.FormatUint(inc, 10) {
		return bad()
	}
	a.Incarnation, a.Group = inc, f[3]
	return a, nil
}

func indexOf(names []string, s string) (int, bool) {
	for i, n := range names {
		if n == s {
			return i, true
		}
	}
	return 0, false
}

// OpReady is the coordinator's record that a group's dependencies are met: its jobs may be
// released from the record's place in JOBS on, live and at replay alike. Only a coordinator
// writes it (Weave-Proof: ReadyProof); its body is the dependencies' results (AppendAfterResults),
// which the group's jobs receive with their work batch (Weave-After on the batch).
const OpReady GroupOp = "ready"

// MaxAfterFailedIDs bounds the failed job IDs an AfterResult lists; Dispatcher.Failed lists all.
const MaxAfterFailedIDs = 1000

// AfterResult is how a group a dependent ran after ended: the edge, the incarnation it bound
// to, and that incarnation's summary and failed job IDs (up to MaxAfterFailedIDs; More says
// there were more).
type AfterResult struct {
	Group       string   `json:"group"`
	Incarnation uint64   `json:"incarnation"`
	When        string   `json:"when"`
	Jobs        uint64   `json:"jobs"`
	Done        uint64   `json:"done"`
	Failed      uint64   `json:"failed"`
	Canceled    uint64   `json:"canceled"`
	FailedIDs   []uint64 `json:"failed_ids,omitempty"`
	More        bool     `json:"more,omitempty"`
}

// AppendAfterResults encodes a ready record's body.
func AppendAfterResults(dst []byte, rs []AfterResult) []byte {
	b, _ := json.Marshal(rs) // plain values: cannot fail
	return append(dst, b...)
}

// ParseAfterResults decodes a ready record's body (or a batch's Weave-After value).
func ParseAfterResults(b []byte) ([]AfterResult, error) {
	var rs []AfterResult
	if len(b) == 0 {
		return nil, nil
	}
	if err := json.Unmarshal(b, &rs); err != nil {
		return nil, fmt.Errorf("%w: dependency results: %v", ErrMalformed, err)
	}
	if len(rs) > MaxAfter {
		return nil, fmt.Errorf("%w: %d dependency results, at most %d", ErrMalformed, len(rs), MaxAfter)
	}
	for _, r := range rs {
		if err := ValidateGroupID(r.Group); err != nil || len(r.FailedIDs) > MaxAfterFailedIDs {
			return nil, fmt.Errorf("%w: dependency result of %q", ErrMalformed, r.Group)
		}
	}
	return rs, nil
}

// readyDomain separates ready proofs from release proofs: no pool name holds a NUL.
const readyDomain = "\x00ready\x00"

// ReadyProof is the coordinator's proof that it wrote the ready record of group's incarnation.
func (k *ReleaseKey) ReadyProof(group string, incarnation uint64) string {
	return k.Proof(readyDomain+group, incarnation, 0, 0)
}

// VerifyReady checks a ready record's proof.
func (k *ReleaseKey) VerifyReady(proof, group string, incarnation uint64) bool {
	rel, ok := k.Verify(proof, readyDomain+group, incarnation, 0)
	return ok && rel == 0
}

// redriveDomain and redriveJobDomain separate a redrive's proofs from the others.
const (
	redriveDomain    = "\x00redrive\x00"
	redriveJobDomain = "\x00redrive-job\x00"
)

// RedriveProof is the coordinator's proof that it accepted group's redrive request stored at
// JOBS sequence request, carried by the open of the incarnation it publishes for it: a producer
// may store an open with Weave-Redrive but cannot prove it.
func (k *ReleaseKey) RedriveProof(group string, request uint64) string {
	return k.Proof(redriveDomain+group, request, 0, 0)
}

// VerifyRedrive checks a redrive open's proof.
func (k *ReleaseKey) VerifyRedrive(proof, group string, request uint64) bool {
	rel, ok := k.Verify(proof, redriveDomain+group, request, 0)
	return ok && rel == 0
}

// RedriveJobProof is the coordinator's proof that it published, in group's incarnation opened at
// JOBS sequence incarnation (a redrive's), the job that runs failed job redriveOf again.
func (k *ReleaseKey) RedriveJobProof(group string, incarnation, redriveOf uint64) string {
	return k.Proof(redriveJobDomain+group, redriveOf, 0, incarnation)
}

// VerifyRedriveJob checks a redriven job's proof.
func (k *ReleaseKey) VerifyRedriveJob(proof, group string, incarnation, redriveOf uint64) bool {
	rel, ok := k.Verify(proof, redriveJobDomain+group, redriveOf, 0)
	return ok && rel == incarnation
}

// ReadyMsgID is a ready record's dedup ID: a coordinator writing it again (after a restart)
// stores it once within the dedup window.
func ReadyMsgID(gtok string, incarnation uint64) string {
	return "ready/" + gtok + "/" + strconv.FormatUint(incarnation, 10)
}

// SetWorkAfter adds to a work batch's headers h the dependency results of its jobs' groups
// (WorkJob.After), one Weave-After value per group: "<group token> <results>". It returns h,
// made if it was nil and a value was added.
func SetWorkAfter(h map[string][]string, jobs []WorkJob) map[string][]string {
	var seen map[string]bool
	for i := range jobs {
		if jobs[i].After == "" {
			continue
		}
		tok := GroupToken(jobs[i].Group)
		if seen[tok] {
			continue
		}
		if seen == nil {
			seen = map[string]bool{}
			if h == nil {
				h = map[string][]string{}
			}
		}
		seen[tok] = true
		h[HdrAfter] = append(h[HdrAfter], tok+" "+jobs[i].After)
	}
	return h
}

// WorkAfter sets the After of the batch's jobs from its Weave-After values. A value that does not
// parse is ignored, as a trace is: it is never a reason to refuse work.
func WorkAfter(hm map[string][]string, jobs []WorkJob) {
	h := Header(hm)
	for _, v := range h.Values(HdrAfter) {
		tok, results, ok := strings.Cut(v, " ")
		if !ok {
			continue
		}
		if _, err := ParseAfterResults([]byte(results)); err != nil {
			continue
		}
		for i := range jobs {
			if GroupToken(jobs[i].Group) == tok {
				jobs[i].After = results
			}
		}
	}
}
