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
	Draining    bool     `json:"draining,omitempty"`
	Stopped     bool     `json:"stopped,omitempty"` // last heartbeat: forget this worker now
	IntervalMS  int64    `json:"interval_ms"`       // the sender's heartbeat period
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
	if h.IntervalMS <= 0 || h.IntervalMS > 3600_000 {
		return Heartbeat{}, fmt.Errorf("%w: heartbeat interval %d ms", ErrMalformed, h.IntervalMS)
	}
	return h, nil
}
