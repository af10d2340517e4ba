package wire

import (
	"encoding/json"
	"fmt"
	"time"
)

// Heartbeat is what a worker publishes on its heartbeat subject every Interval. It is JSON so
// operators can read it with `nats sub`.
type Heartbeat struct {
	Version     int      `json:"v"`
	Worker      string   `json:"worker"`
	Pool        string   `json:"pool"`
	Resources   []string `json:"resources,omitempty"`
	Concurrency int      `json:"concurrency"`
	Busy        int      `json:"busy"`     // slots running a job
	Sleeping    int      `json:"sleeping"` // slots waiting for work
	// Held is how many work batches the worker holds: received, and not yet acknowledged nor
	// let go. Workers before it was added leave it out (nil).
	Held       *int  `json:"held,omitempty"`
	Draining   bool  `json:"draining,omitempty"`
	Stopped    bool  `json:"stopped,omitempty"` // last heartbeat: forget this worker now
	IntervalMS int64 `json:"interval_ms"`       // the sender's heartbeat period
	// Run identifies the worker process (a NUID per Run): a heartbeat of another run of a live
	// worker's ID is a second process with the same ID, and the coordinator refuses it.
	Run string `json:"run"`
	// Join marks the request a starting worker sends on its join subject (Names.JoinSubject),
	// before it pulls any work: the coordinator answers whether it may run (HeartbeatReply).
	Join bool `json:"join,omitempty"`
}

// HeartbeatReply is the coordinator's answer to a heartbeat with a reply subject: always to a
// join, and to a later heartbeat only to refuse it.
type HeartbeatReply struct {
	Version int `json:"v"`
	// Refused is why the worker may not run with this ID, or empty.
	Refused string `json:"refused,omitempty"`
	// RetryMS, on a refusal because another run of the ID is live, is how long that run may stay
	// silent before the coordinator forgets it: a worker restarted after a crash asks again
	// after it, and is refused again only if the other run is still alive.
	RetryMS int64 `json:"retry_ms,omitempty"`
}

// Marshal encodes the reply.
func (r HeartbeatReply) Marshal() []byte {
	r.Version = Version
	b, _ := json.Marshal(r) // cannot fail: plain fields only
	return b
}

// ParseHeartbeatReply decodes a reply.
func ParseHeartbeatReply(b []byte) (HeartbeatReply, error) {
	var r HeartbeatReply
	if err := json.Unmarshal(b, &r); err != nil {
		return HeartbeatReply{}, fmt.Errorf("%w: heartbeat reply: %v", ErrMalformed, err)
	}
	if r.Version != Version {
		return HeartbeatReply{}, fmt.Errorf("%w: heartbeat reply version %d", ErrVersion, r.Version)
	}
	return r, nil
}

// Interval returns the sender's heartbeat period.
func (h Heartbeat) Interval() time.Duration { return time.Duration(h.IntervalMS) * time.Millisecond }

// Marshal encodes the heartbeat.
func (h Heartbeat) Marshal() []byte {
	h.Version = Version
	b, _ := json.Marshal(h) // cannot fail: plain fields only
	return b
}

// ParseHeartbeat decodes and validates a heartbeat.
func ParseHeartbeat(b []byte) (Heartbeat, error) {
	var h Heartbeat
	if err := json.Unmarshal(b, &h); err != nil {
		return Heartbeat{}, fmt.Errorf("%w: heartbeat: %v", ErrMalformed, err)
	}
	if h.Version != Version {
		return Heartbeat{}, fmt.Errorf("%w: heartbeat version %d", ErrVersion, h.Version)
	}
	if err := ValidateWorkerID(h.Worker); err != nil {
		return Heartbeat{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if err := ValidateResources("held", h.Resources); err != nil {
		return Heartbeat{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if h.Pool != PoolKey(h.Resources) {
		return Heartbeat{}, fmt.Errorf("%w: heartbeat pool %q does not match its resources", ErrMalformed, h.Pool)
	}
	if h.Concurrency < 1 || h.Concurrency > 1<<16 || h.Busy < 0 || h.Sleeping < 0 || h.Busy+h.Sleeping > h.Concurrency {
		return Heartbeat{}, fmt.Errorf("%w: heartbeat slots busy=%d sleeping=%d concurrency=%d", ErrMalformed, h.Busy, h.Sleeping, h.Concurrency)
	}
	if h.Held != nil && (*h.Held < 0 || *h.Held > 1<<20) {
		return Heartbeat{}, fmt.Errorf("%w: heartbeat holds %d batches", ErrMalformed, *h.Held)
	}
	if len(h.Run) > 64 {
		return Heartbeat{}, fmt.Errorf("%w: heartbeat run ID of %d bytes", ErrMalformed, len(h.Run))
	}
	if h.IntervalMS <= 0 || h.IntervalMS > 3600_000 {
		return Heartbeat{}, fmt.Errorf("%w: heartbeat interval %d ms", ErrMalformed, h.IntervalMS)
	}
	return h, nil
}
