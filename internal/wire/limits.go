package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// LimitsStream is the stream of the namespace's limits: one subject per limit, the latest
// message of each kept (the stream keeps one per subject), read by the coordinator at takeover
// and followed while it runs.
func (n Names) LimitsStream() string { return n.ns + "_LIMITS" }

// AllLimits is the subject filter of every limit.
func (n Names) AllLimits() string { return n.ns + ".limit.>" }

// LimitSubject is the subject of the limit on one resource or group: NS.limit.<kind>.<token>,
// the token as GroupToken makes it from the name.
func (n Names) LimitSubject(kind LimitKind, name string) string {
	return n.ns + ".limit." + string(kind) + "." + GroupToken(name)
}

// LimitKind is what a limit applies to.
type LimitKind string

// The kinds of limit.
const (
	// LimitResource limits the jobs that require or prefer a resource.
	LimitResource LimitKind = "resource"
	// LimitGroup limits the jobs of a group ID (every incarnation of it).
	LimitGroup LimitKind = "group"
)

// Limit is a limit on the jobs of one resource or one group ID, enforced by the coordinator
// across the whole fleet. A job under several limits (a group's, and its resources') runs only
// when every one of them allows it. A limit with neither a concurrency nor a rate, and not
// paused, is no limit: publishing one removes the limit.
type Limit struct {
	Kind LimitKind `json:"kind"`
	Name string    `json:"name"`
	// Paused holds back every job under the limit: none is released until it is resumed (the
	// jobs released before go on). Concurrency and rate are kept for the resume.
	Paused bool `json:"paused,omitempty"`
	// Concurrency is the most jobs under the limit released at once (running, or queued at a
	// worker); 0: no concurrency limit.
	Concurrency int `json:"concurrency,omitempty"`
	// Rate is the most starts per Per: a token bucket refilled at Rate per Per, holding at most
	// Burst tokens (default 1: starts evenly spaced); 0: no rate limit.
	Rate  int           `json:"rate,omitempty"`
	Per   time.Duration `json:"per,omitempty"`
	Burst int           `json:"burst,omitempty"`
}

// Bounds of a limit's fields.
const (
	MaxLimitConcurrency = 1_000_000
	MaxLimitRate        = 1_000_000
	MinLimitPer         = time.Millisecond
	MaxLimitPer         = 24 * time.Hour
	MaxLimitBytes       = 2048 // of a limit message's body
)

// Removes reports whether l is a removal: not paused, no concurrency and no rate.
func (l Limit) Removes() bool { return !l.Paused && l.Concurrency == 0 && l.Rate == 0 }

// Validate checks a limit's fields.
func (l Limit) Validate() error {
	switch l.Kind {
	case LimitResource:
		if err := ValidateResources("limited", []string{l.Name}); err != nil {
			return err
		}
	case LimitGroup:
		if err := ValidateGroupID(l.Name); err != nil {
			return err
		}
	default:
		return fmt.Errorf("%w: limit kind %q, want %q or %q", ErrBadOption, l.Kind, LimitResource, LimitGroup)
	}
	switch {
	case l.Concurrency < 0 || l.Concurrency > MaxLimitConcurrency:
		return fmt.Errorf("%w: concurrency %d outside 0..%d", ErrBadOption, l.Concurrency, MaxLimitConcurrency)
	case l.Rate < 0 || l.Rate > MaxLimitRate:
		return fmt.Errorf("%w: rate %d outside 0..%d", ErrBadOption, l.Rate, MaxLimitRate)
	case l.Rate > 0 && (l.Per < MinLimitPer || l.Per > MaxLimitPer):
		return fmt.Errorf("%w: rate per %v outside %v..%v", ErrBadOption, l.Per, MinLimitPer, MaxLimitPer)
	case l.Rate == 0 && (l.Per != 0 || l.Burst != 0):
		return fmt.Errorf("%w: per and burst need a rate", ErrBadOption)
	case l.Burst < 0 || l.Burst > MaxLimitRate:
		return fmt.Errorf("%w: burst %d outside 0..%d", ErrBadOption, l.Burst, MaxLimitRate)
	}
	return nil
}

// String describes the limit as the CLI prints it.
func (l Limit) String() string {
	var parts []string
	if l.Paused {
		parts = append(parts, "paused")
	}
	if l.Concurrency > 0 {
		parts = append(parts, fmt.Sprintf("%d at once", l.Concurrency))
	}
	if l.Rate > 0 {
		parts = append(parts, fmt.Sprintf("%d per %v (burst %d)", l.Rate, l.Per, max(l.Burst, 1)))
	}
	if len(parts) == 0 {
		return "no limit"
	}
	return strings.Join(parts, ", ")
}

// AppendLimit encodes a limit's message body.
func AppendLimit(b []byte, l Limit) []byte {
	out, _ := json.Marshal(l) // plain fields: cannot fail
	return append(b, out...)
}

// ParseLimit decodes and validates a limit message stored on subject: the body's kind and name
// must be the subject's, so a limit cannot be stored under another's subject.
func (n Names) ParseLimit(subject string, body []byte) (Limit, error) {
	var l Limit
	if len(body) > MaxLimitBytes {
		return l, fmt.Errorf("%w: limit of %d bytes, at most %d", ErrMalformed, len(body), MaxLimitBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return Limit{}, fmt.Errorf("%w: limit: %v", ErrMalformed, err)
	}
	if dec.More() {
		return Limit{}, fmt.Errorf("%w: limit: trailing data", ErrMalformed)
	}
	if err := l.Validate(); err != nil {
		return Limit{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if want := n.LimitSubject(l.Kind, l.Name); subject != want {
		return Limit{}, fmt.Errorf("%w: limit of %s %q on subject %s, want %s", ErrMalformed, l.Kind, l.Name, subject, want)
	}
	return l, nil
}
