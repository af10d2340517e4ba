// Package topology creates Weave's streams and consumers. Every component calls Ensure at start,
// so whichever starts first creates them and the others accept what exists.
package topology

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/internal/wire"
)

// Options tune the streams. The zero value gives the documented defaults.
type Options struct {
	// Replicas of every stream: 1 (default) for a single server, 3 for a cluster.
	Replicas int
	// DedupWindow is how long a job key is remembered for deduplication. Default 2 minutes.
	DedupWindow time.Duration
	// ResultRetention is how long a finished group's outcomes are kept (and the messages of its
	// failed jobs, for inspection and redrive). The coordinator deletes them this long after the
	// group finished; a group that runs longer keeps all of its outcomes. Default 24 hours.
	ResultRetention time.Duration
	// MemoryStorage keeps streams in memory (tests and benchmarks only; nothing survives a restart).
	MemoryStorage bool
}

// Defaults.
const (
	DefaultDedupWindow     = 2 * time.Minute
	DefaultResultRetention = 24 * time.Hour
	// Rejection records are for operators: the newest are kept, within these bounds.
	rejectedMaxAge  = 7 * 24 * time.Hour
	rejectedMaxMsgs = 100_000
)

// WithDefaults returns o with every zero field set to its default.
func (o Options) WithDefaults() Options { return o.withDefaults() }

func (o Options) withDefaults() Options {
	if o.Replicas <= 0 {
		o.Replicas = 1
	}
	if o.DedupWindow <= 0 {
		o.DedupWindow = DefaultDedupWindow
	}
	if o.ResultRetention <= 0 {
		o.ResultRetention = DefaultResultRetention
	}
	return o
}

// Streams returns the configuration of every stream of the namespace.
func Streams(n wire.Names, o Options) []jetstream.StreamConfig {
	o = o.withDefaults()
	storage := jetstream.FileStorage
	if o.MemoryStorage {
		storage = jetstream.MemoryStorage
	}
	return []jetstream.StreamConfig{
		{
			Name:        n.JobsStream(),
			Description: "Weave groups and jobs",
			Subjects:    []string{n.AllGroups(), n.AllJobs()},
			Retention:   jetstream.LimitsPolicy,
			Storage:     storage,
			Replicas:    o.Replicas,
			Duplicates:  o.DedupWindow,
			AllowDirect: true,
		},
		{
			Name:        n.WorkStream(),
			Description: "Weave released job batches, one subject per worker pool",
			Subjects:    []string{n.AllWork()},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     storage,
			Replicas:    o.Replicas,
			// A restarting coordinator scans the batches still here with batch direct get.
			AllowDirect: true,
		},
		{
			Name:        n.EventsStream(),
			Description: "Weave worker reports and coordinator journal",
			Subjects:    []string{n.AllEvents()},
			Retention:   jetstream.LimitsPolicy,
			Storage:     storage,
			Replicas:    o.Replicas,
			AllowDirect: true,
		},
		{
			Name:        n.ResultsStream(),
			Description: "Weave per-group outcomes",
			Subjects:    []string{n.AllOutcomes()},
			Retention:   jetstream.LimitsPolicy,
			Storage:     storage,
			Replicas:    o.Replicas,
			// No MaxAge: a group running longer than the retention must keep its outcomes (a
			// restarting coordinator reads them). The coordinator deletes each finished group's
			// outcomes ResultRetention after it finished.
			AllowDirect: true,
		},
		{
			Name:        n.RejectedStream(),
			Description: "Weave messages refused, with the reason",
			Subjects:    []string{n.RejectSubject()},
			Retention:   jetstream.LimitsPolicy,
			Storage:     storage,
			Replicas:    o.Replicas,
			MaxAge:      rejectedMaxAge,
			MaxMsgs:     rejectedMaxMsgs,
			Discard:     jetstream.DiscardOld,
		},
	}
}

// lookupTimeout bounds Ensure's look-up of a stream: on a cluster a stream just created by
// another client may have no leader yet and leave the request unanswered; creating it then
// answers at once that it exists.
const lookupTimeout = 2 * time.Second

// Ensure creates the namespace's streams, accepting streams that already exist. It looks a stream
// up before creating it, so a client whose NATS permissions allow stream info but not stream
// creation (a producer or worker; see internal/auth) works when the streams exist.
func Ensure(ctx context.Context, js jetstream.JetStream, n wire.Names, o Options) error {
	for _, cfg := range Streams(n, o) {
		lctx, cancel := context.WithTimeout(ctx, lookupTimeout)
		_, err := js.Stream(lctx, cfg.Name)
		cancel()
		if err == nil {
			continue
		}
		if _, err := js.CreateStream(ctx, cfg); err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return fmt.Errorf("weave: create stream %s: %w", cfg.Name, err)
		}
	}
	return nil
}

// DefaultLease is a pool consumer's AckWait unless its workers set another one.
const DefaultLease = 30 * time.Second

// WorkConsumer returns the config of the durable consumer shared by one pool's workers. AckWait is
// the lease: a batch not acked (nor marked in progress) within it goes to another worker.
func WorkConsumer(n wire.Names, pool string, lease time.Duration) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       n.WorkConsumer(pool),
		Description:   "Weave workers of pool " + pool,
		FilterSubject: n.WorkSubject(pool),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       lease,
		MaxDeliver:    -1,
		MaxAckPending: -1,
		// Pull requests of idle workers wait this long at the server before expiring, which bounds
		// idle request traffic (see worker's fetch loop).
		MaxRequestExpires: 0,
	}
}
