// Package config holds what Weave's packages share about their configuration, declared and
// validated once: the error every invalid setting wraps (ErrInvalid; each public package exports
// it as its ErrInvalidConfig, the same value, so errors.Is matches it from any of them) and the
// options of the namespace's streams (StreamOptions, with their one rule for Replicas).
//
// It imports nothing of Weave's and no NATS client, so every package can use it, spreader
// included.
package config

import (
	"errors"
	"fmt"
	"time"
)

// ErrInvalid is wrapped by every error that reports a setting Weave cannot use. coordinator,
// worker, dispatcher and spreader export it as ErrInvalidConfig.
var ErrInvalid = errors.New("weave: invalid config")

// Errorf returns an error wrapping ErrInvalid, formatted after it: "weave: invalid config: " and
// the message, which names the setting.
func Errorf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// Defaults and limits of StreamOptions.
const (
	// DefaultReplicas is the replicas of a stream whose StreamOptions.Replicas is 0: one
	// server.
	DefaultReplicas = 1
	// MaxReplicas is JetStream's limit on the replicas of a stream or KV bucket.
	MaxReplicas            = 5
	DefaultDedupWindow     = 2 * time.Minute
	DefaultResultRetention = 24 * time.Hour
)

// StreamOptions tune the streams of a namespace. The zero value gives the documented defaults.
type StreamOptions struct {
	// Replicas of every stream and of the lease bucket: 0 or 1 (default) for a single server,
	// 3 for a cluster; at most MaxReplicas. Anything else is refused, never clamped.
	Replicas int
	// DedupWindow is how long a job key is remembered for deduplication. Default 2 minutes.
	DedupWindow time.Duration
	// ResultRetention is how long a complete group's outcomes are kept (and the messages of its
	// failed jobs, for inspection and redrive). The coordinator deletes them this long after the
	// group completed; a group that runs longer keeps all of its outcomes. Default 24 hours.
	ResultRetention time.Duration
	// MemoryStorage keeps streams in memory (tests and benchmarks only; nothing survives a
	// restart).
	MemoryStorage bool
}

// Validate returns an error wrapping ErrInvalid, naming the field (after prefix, such as
// "Streams."), for the first setting out of range.
func (o StreamOptions) Validate(prefix string) error {
	if err := Replicas(prefix+"Replicas", o.Replicas); err != nil {
		return err
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"DedupWindow", o.DedupWindow}, {"ResultRetention", o.ResultRetention}} {
		if d.v < 0 {
			return Errorf("%s%s is %v, must not be negative", prefix, d.name, d.v)
		}
	}
	return nil
}

// WithDefaults returns o with every zero field set to its default. It does not validate: call
// Validate first.
func (o StreamOptions) WithDefaults() StreamOptions {
	if o.Replicas == 0 {
		o.Replicas = DefaultReplicas
	}
	if o.DedupWindow == 0 {
		o.DedupWindow = DefaultDedupWindow
	}
	if o.ResultRetention == 0 {
		o.ResultRetention = DefaultResultRetention
	}
	return o
}

// Replicas is the one rule for a replica count, wherever it is set (streams, lease bucket, the
// CLI's --replicas): 0 means DefaultReplicas, 1 to MaxReplicas are used as they are, and
// anything else is an error wrapping ErrInvalid that names field.
func Replicas(field string, n int) error {
	if n < 0 || n > MaxReplicas {
		return Errorf("%s is %d, must be 1 to %d (or 0 for %d)", field, n, MaxReplicas, DefaultReplicas)
	}
	return nil
}
