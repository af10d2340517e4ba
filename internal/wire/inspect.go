package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// InspectSubject answers inspection requests (core NATS request/reply, JSON): what the running
// coordinator knows of a job, a group, or the groups. Observers and producers may ask; workers
// may not.
func (n Names) InspectSubject() string { return n.ns + ".api.inspect" }

// HeldSubject is where the workers of a pool answer whether they run a job (core NATS
// request/reply, JSON HeldRequest and HeldReply): the coordinator releases a batch to a pool, and
// only the worker that took it knows it runs the job. Only that worker answers.
func (n Names) HeldSubject(pool string) string { return n.ns + ".api.held." + pool }

// HeldRequest asks the workers of a pool which of them runs a job.
type HeldRequest struct {
	Version int    `json:"v"`
	Job     uint64 `json:"job"`
}

// HeldReply is the answer of the worker running the job.
type HeldReply struct {
	Version int       `json:"v"`
	Worker  string    `json:"worker"`
	Started time.Time `json:"started"` // when its handler started
}

// StandbySubject carries the announcements of standby coordinators (core NATS, JSON
// StandbyAnnounce): the active one lists those it heard recently in its status.
func (n Names) StandbySubject() string { return n.ns + ".api.standby" }

// MaxInspectRequest bounds an inspection request's size in bytes.
const MaxInspectRequest = 4096

// InspectRequest asks the coordinator about exactly one of: a job (Job, with its Group as a
// hint when the asker knows it), a group (Group), or the groups (Groups).
type InspectRequest struct {
	Version int    `json:"v"`
	Job     uint64 `json:"job,omitempty"`
	Group   string `json:"group,omitempty"`
	Groups  bool   `json:"groups,omitempty"`
}

// Marshal encodes the request.
func (r InspectRequest) Marshal() []byte {
	r.Version = Version
	b, _ := json.Marshal(r) // plain fields only
	return b
}

// ParseInspectRequest decodes and validates a request. Errors wrap ErrMalformed or ErrVersion
// and say what is wrong in words an operator can act on.
func ParseInspectRequest(b []byte) (InspectRequest, error) {
	var r InspectRequest
	if len(b) > MaxInspectRequest {
		return r, fmt.Errorf("%w: inspect request of %d bytes (at most %d)", ErrMalformed, len(b), MaxInspectRequest)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return InspectRequest{}, fmt.Errorf("%w: inspect request: %v", ErrMalformed, err)
	}
	if dec.More() {
		return InspectRequest{}, fmt.Errorf("%w: inspect request: data after the JSON object", ErrMalformed)
	}
	if r.Version != Version {
		return InspectRequest{}, fmt.Errorf("%w: inspect request version %d", ErrVersion, r.Version)
	}
	switch {
	case r.Groups && (r.Job != 0 || r.Group != ""):
		return InspectRequest{}, fmt.Errorf("%w: inspect request: groups asks for the list and takes no job or group", ErrMalformed)
	case !r.Groups && r.Job == 0 && r.Group == "":
		return InspectRequest{}, fmt.Errorf("%w: inspect request: name a job, a group, or ask for the groups", ErrMalformed)
	}
	if r.Group != "" {
		if err := ValidateGroupID(r.Group); err != nil {
			return InspectRequest{}, fmt.Errorf("%w: inspect request: %v", ErrMalformed, err)
		}
	}
	return r, nil
}

// InspectReply is the coordinator's answer to an InspectRequest.
type InspectReply struct {
	Version int `json:"v"`
	// Error says why the request was refused; nothing else is set then.
	Error string `json:"error,omitempty"`
	// Job answers a job request when the job's group is tracked (open, or complete and not yet
	// forgotten).
	Job *JobLive `json:"job,omitempty"`
	// Group answers a group request: the latest incarnation of the ID the coordinator knows,
	// tracked or retained.
	Group *GroupLive `json:"group,omitempty"`
	// Groups answers a groups request: the tracked incarnations in arrival order, then the
	// retained ones, latest first (each list bounded by MaxInspectGroups).
	Groups []GroupLive `json:"groups,omitempty"`
	// Candidates answers a job request about a job no tracked group holds: the retained
	// incarnations (of the hinted group, if any) whose outcomes may hold it, latest first.
	Candidates []GroupLive `json:"candidates,omitempty"`
}

// MaxInspectGroups bounds each list of an InspectReply.
const MaxInspectGroups = 500

// Marshal encodes the reply.
func (r InspectReply) Marshal() []byte {
	r.Version = Version
	b, _ := json.Marshal(r) // plain fields only
	return b
}

// ParseInspectReply decodes a reply.
func ParseInspectReply(b []byte) (InspectReply, error) {
	var r InspectReply
	if err := json.Unmarshal(b, &r); err != nil {
		return InspectReply{}, fmt.Errorf("%w: inspect reply: %v", ErrMalformed, err)
	}
	if r.Version != Version {
		return InspectReply{}, fmt.Errorf("%w: inspect reply version %d", ErrVersion, r.Version)
	}
	return r, nil
}

// JobLive is what the coordinator knows of a job of a tracked group.
type JobLive struct {
	ID          uint64 `json:"id"`
	Group       string `json:"group,omitempty"` // empty when not known (a job never released, asked without its group)
	Incarnation uint64 `json:"incarnation,omitempty"`
	State       string `json:"state"` // pending, running, retrywait, done, failed, canceled
	Key         string `json:"key,omitempty"`
	Attempt     uint32 `json:"attempt,omitempty"` // the current or last attempt; 0 before the first release
	MaxAttempts int    `json:"max_attempts,omitempty"`
	// Pool is the pool the running attempt was released to; Workers its live workers. Any
	// worker of the pool may hold the batch: Worker is set when the pool has exactly one.
	Pool     string    `json:"pool,omitempty"`
	Workers  []string  `json:"workers,omitempty"`
	Worker   string    `json:"worker,omitempty"`
	Released time.Time `json:"released,omitzero"` // when the current attempt was released
	RetryAt  time.Time `json:"retry_at,omitzero"` // in retrywait: when it is released again
	// History lists the failed attempts so far (time, worker, error), oldest first.
	History []AttemptJSON `json:"history,omitempty"`
	// Why a pending job does not start, when it is not only waiting for a slot: HeldBy is the
	// limit holding it back (its Jobs unset); Missing lists the resources it requires when no
	// live worker holds them all (those none holds, or all of them if each is held apart).
	HeldBy  *HeldBack `json:"held_by,omitempty"`
	Missing []string  `json:"missing,omitempty"`
}

// AttemptJSON is an Attempt in JSON.
type AttemptJSON struct {
	At     time.Time `json:"at"`
	Worker string    `json:"worker,omitempty"`
	Error  string    `json:"error"`
}

// GroupLive is what the coordinator knows of one incarnation of a group.
type GroupLive struct {
	ID          string    `json:"id"`
	Incarnation uint64    `json:"incarnation"` // its open's sequence in JOBS
	Sealed      bool      `json:"sealed,omitempty"`
	Abandoned   bool      `json:"abandoned,omitempty"`
	Complete    bool      `json:"complete,omitempty"` // every job ended (summary stored, or being stored)
	OpenedAt    time.Time `json:"opened_at,omitzero"`
	LastHeard   time.Time `json:"last_heard,omitzero"`
	CompletedAt time.Time `json:"completed_at,omitzero"` // retained: when its summary was stored
	// SummarySeq is the summary's sequence in RESULTS, for a retained incarnation.
	SummarySeq uint64            `json:"summary_seq,omitempty"`
	Admitted   uint64            `json:"admitted,omitempty"`
	Queued     int               `json:"queued,omitempty"`
	InFlight   int               `json:"in_flight,omitempty"`
	Jobs       map[string]uint64 `json:"jobs,omitempty"` // tracked: count per state
	// HeldBack lists the limits holding some of its pending jobs back, if any.
	HeldBack []HeldBack `json:"held_back,omitempty"`
	// Unplaceable counts its pending jobs that require resources no live worker holds (set
	// aside until one joins); NextRunAt is when the first of its delayed jobs runs.
	Unplaceable int       `json:"unplaceable,omitempty"`
	NextRunAt   time.Time `json:"next_run_at,omitzero"`
	// WaitsFor names the groups it runs after that have not completed as it asks (the group is
	// held: none of its jobs is released meanwhile).
	WaitsFor []string `json:"waits_for,omitempty"`
	// FollowedBy names groups waiting on it (dependents, follow-ups), at most 20.
	FollowedBy []string `json:"followed_by,omitempty"`
	Priority   int      `json:"priority,omitempty"`
}

// HeldBack is one limit holding jobs of a group back: why its pending jobs do not start.
type HeldBack struct {
	Kind   LimitKind `json:"kind"`
	Name   string    `json:"name"`
	Paused bool      `json:"paused,omitempty"`
	Jobs   int       `json:"jobs"`
}

// StandbyAnnounce is what a standby coordinator publishes on StandbySubject while it waits for
// the lease, every StandbyInterval.
type StandbyAnnounce struct {
	Version int       `json:"v"`
	Holder  string    `json:"holder"` // host/pid, as written in the lease when it holds it
	Since   time.Time `json:"since"`  // when it started waiting
}

// StandbyInterval is how often a standby announces itself; the active coordinator forgets one
// it has not heard for three of them.
const StandbyInterval = time.Second

// Marshal encodes the announcement.
func (a StandbyAnnounce) Marshal() []byte {
	a.Version = Version
	b, _ := json.Marshal(a) // plain fields only
	return b
}

// ParseStandbyAnnounce decodes and validates an announcement.
func ParseStandbyAnnounce(b []byte) (StandbyAnnounce, error) {
	var a StandbyAnnounce
	if err := json.Unmarshal(b, &a); err != nil {
		return StandbyAnnounce{}, fmt.Errorf("%w: standby announcement: %v", ErrMalformed, err)
	}
	if a.Version != Version {
		return StandbyAnnounce{}, fmt.Errorf("%w: standby announcement version %d", ErrVersion, a.Version)
	}
	if a.Holder == "" || len(a.Holder) > 256 {
		return StandbyAnnounce{}, fmt.Errorf("%w: standby announcement holder of %d bytes", ErrMalformed, len(a.Holder))
	}
	return a, nil
}
