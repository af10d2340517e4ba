package engine

import (
	"time"

	"github.com/rs/zerolog"

	"github.com/weavejobs/weave/spreader"
)

// Config is what the engine reads of the coordinator's configuration, defaults applied:
// coordinator.Config documents each field.
type Config struct {
	Logger              zerolog.Logger
	Feeders             int
	Policy              spreader.Policy
	MaxInFlightPerGroup int
	Prefetch            int
	QueueAhead          int
	MaxAttempts         int
	RetryBase, RetryMax time.Duration
	MaxBatch            int
	HeartbeatMisses     int
	AbandonAfter        time.Duration
	LearnAffinity       time.Duration
	ResultRetention     time.Duration
	OutcomeLinger       time.Duration
	// OutcomesExpire: the RESULTS stream expires messages by their TTL (Nats-TTL). A single
	// job's outcome messages, all written when it completes, then carry ResultRetention as their
	// TTL (Write.TTL), and its retention's end purges nothing in RESULTS: a purge request per
	// single job would cost the server more than running it.
	OutcomesExpire bool

	// Now is the clock (time.Now when nil); tests replace it.
	Now func() time.Time
}

// now reads the clock.
func (c *Config) now() time.Time {
	if c.Now == nil {
		return time.Now()
	}
	return c.Now()
}
