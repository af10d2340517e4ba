// Package topology creates Weave's streams and consumers. Only the coordinator (at start) and
// 'weave init' create a namespace's streams (Init); workers and producers check that they
// exist (Check) and fail with ErrNamespaceNotFound when they do not, so a namespace typo cannot
// create streams that accept jobs nothing will run, and those roles need no stream-create rights.
package topology

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/internal/config"
	"github.com/weavejobs/weave/internal/wire"
)

// Rejection records are for operators: the newest are kept, within these bounds.
const (
	rejectedMaxAge  = 7 * 24 * time.Hour
	rejectedMaxMsgs = 100_000
)

// Streams returns the configuration of every stream of the namespace.
// o must be valid (config.StreamOptions.Validate); its zero fields take their defaults.
func Streams(n wire.Names, o config.StreamOptions) []jetstream.StreamConfig {
	o = o.WithDefaults()
	src, dst := n.OutcomeTransform()
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
			// Outcomes published to a producer's reply token are stored under their group's
			// subject, so readers find them in one place (wire.Names.OutcomeSubjectTo).
			SubjectTransform: &jetstream.SubjectTransformConfig{Source: src, Destination: dst},
			// A single job's outcome is written once, when it completes: it carries a TTL of
			// ResultRetention and the server expires it, instead of a purge request per job.
			AllowMsgTTL: true,
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
		{
			Name:        n.LimitsStream(),
			Description: "Weave limits per resource and per group: the latest of each",
			Subjects:    []string{n.AllLimits()},
			Retention:   jetstream.LimitsPolicy,
			Storage:     storage,
			Replicas:    o.Replicas,
			// One message per limit: the latest says what the limit is (or that it is removed).
			MaxMsgsPerSubject: 1,
			AllowDirect:       true,
		},
		{
			Name:        n.SchedulesStream(),
			Description: "Weave schedules: each one's definition and last tick fired",
			Subjects:    []string{n.AllSchedules()},
			Retention:   jetstream.LimitsPolicy,
			Storage:     storage,
			Replicas:    o.Replicas,
			// The latest definition (or removal) and the latest fired tick of each schedule.
			MaxMsgsPerSubject: 1,
			AllowDirect:       true,
		},
	}
}

// ErrNamespaceNotFound reports that a namespace's streams do not exist: nobody initialised it
// ('weave init', or a coordinator started once), or the namespace is misspelt.
var ErrNamespaceNotFound = errors.New("weave: namespace not initialised")

// Check returns an error wrapping ErrNamespaceNotFound, naming the namespace and what to do, if one
// of the given streams of the namespace does not exist. It only reads the streams' info.
func Check(ctx context.Context, js jetstream.JetStream, n wire.Names, streams ...string) error {
	for _, name := range streams {
		_, err := js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return &namespaceError{ns: n.Namespace(), stream: name}
		}
		if err != nil {
			return fmt.Errorf("weave: stream %s: %w", name, err)
		}
	}
	return nil
}

// namespaceError is ErrNamespaceNotFound with the namespace, the stream found missing, and the
// remedy.
type namespaceError struct{ ns, stream string }

func (e *namespaceError) Error() string {
	return fmt.Sprintf("weave: namespace %q is not initialised (stream %s not found): run 'weave init --namespace %s' or start 'weave coordinator --namespace %s'",
		e.ns, e.stream, e.ns, e.ns)
}

func (e *namespaceError) Is(target error) bool { return target == ErrNamespaceNotFound }

// StreamStatus is what Init did with one stream.
type StreamStatus struct {
	Name string
	// Created is true if Init created the stream, false if it existed.
	Created bool
	// Replicas is the stream's replicas: as created, or as found.
	Replicas int
	// Differences lists, for a stream that existed, how its configuration differs from the one
	// asked for ("replicas 1, want 3"). Init changes nothing in an existing stream but Upgraded.
	Differences []string
	// Upgraded lists what Init added to a stream that existed without something this release's
	// protocol needs (a stream created by an earlier release).
	Upgraded []string
	// AllowMsgTTL: the stream accepts messages with a TTL (Nats-TTL), as created or upgraded.
	AllowMsgTTL bool
}

// Init creates the namespace's streams that do not exist and reports, for each stream, whether it
// created it and how an existing one differs from the options. It is idempotent. Options out of
// range are refused with an error wrapping config.ErrInvalid before anything is created.
func Init(ctx context.Context, js jetstream.JetStream, n wire.Names, o config.StreamOptions) ([]StreamStatus, error) {
	if err := o.Validate(""); err != nil {
		return nil, err
	}
	var out []StreamStatus
	for _, cfg := range Streams(n, o) {
		// Look first: creating a stream that exists with the same configuration succeeds too.
		s, err := js.Stream(ctx, cfg.Name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			_, err = js.CreateStream(ctx, cfg)
			if err == nil {
				out = append(out, StreamStatus{Name: cfg.Name, Created: true, Replicas: cfg.Replicas, AllowMsgTTL: cfg.AllowMsgTTL})
				continue
			}
			if !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
				return out, fmt.Errorf("weave: create stream %s: %w", cfg.Name, err)
			}
			s, err = js.Stream(ctx, cfg.Name) // created by someone else meanwhile
		}
		if err != nil {
			return out, fmt.Errorf("weave: stream %s: %w", cfg.Name, err)
		}
		have := s.CachedInfo().Config
		st := StreamStatus{Name: cfg.Name, Replicas: have.Replicas, Differences: differences(have, cfg, o)}
		if st.Upgraded, err = upgrade(ctx, js, have, cfg); err != nil {
			return out, err
		}
		st.AllowMsgTTL = have.AllowMsgTTL || cfg.AllowMsgTTL && len(st.Upgraded) > 0
		out = append(out, st)
	}
	return out, nil
}

// upgrade adds to an existing stream what the protocol needs and an earlier release did not
// create: the RESULTS stream's outcome transform, without which an outcome published to a reply
// token would be stored where no reader looks, and its message TTLs. Only additions that change
// nothing stored are made.
func upgrade(ctx context.Context, js jetstream.JetStream, have, want jetstream.StreamConfig) ([]string, error) {
	var added []string
	if want.SubjectTransform != nil && (have.SubjectTransform == nil || *have.SubjectTransform != *want.SubjectTransform) {
		if have.SubjectTransform != nil {
			return nil, fmt.Errorf("weave: stream %s transforms subjects %s to %s; Weave needs %s to %s",
				have.Name, have.SubjectTransform.Source, have.SubjectTransform.Destination, want.SubjectTransform.Source, want.SubjectTransform.Destination)
		}
		have.SubjectTransform = want.SubjectTransform
		added = append(added, "subject transform "+want.SubjectTransform.Source+" to "+want.SubjectTransform.Destination)
	}
	if want.AllowMsgTTL && !have.AllowMsgTTL {
		have.AllowMsgTTL = true
		added = append(added, "message TTLs")
	}
	if len(added) == 0 {
		return nil, nil
	}
	if _, err := js.UpdateStream(ctx, have); err != nil {
		return nil, fmt.Errorf("weave: stream %s: add %s: %w", have.Name, strings.Join(added, " and "), err)
	}
	return added, nil
}

// differences compares an existing stream's configuration with the one Weave would create, on the
// settings Weave chooses. Settings left to the server's default in want, and options the caller
// left unset in o (0: a coordinator started without --replicas on a namespace created with 3 has
// nothing to be warned about), are not compared.
func differences(have, want jetstream.StreamConfig, o config.StreamOptions) []string {
	var d []string
	diff := func(what string, h, w any) { d = append(d, fmt.Sprintf("%s %v, want %v", what, h, w)) }
	if o.Replicas != 0 && have.Replicas != want.Replicas {
		diff("replicas", have.Replicas, want.Replicas)
	}
	if have.Storage != want.Storage {
		diff("storage", have.Storage, want.Storage)
	}
	if have.Retention != want.Retention {
		diff("retention", have.Retention, want.Retention)
	}
	if o.DedupWindow != 0 && want.Duplicates > 0 && have.Duplicates != want.Duplicates {
		diff("dedup window", have.Duplicates, want.Duplicates)
	}
	if want.MaxAge > 0 && have.MaxAge != want.MaxAge {
		diff("max age", have.MaxAge, want.MaxAge)
	}
	if want.MaxMsgs > 0 && have.MaxMsgs != want.MaxMsgs {
		diff("max messages", have.MaxMsgs, want.MaxMsgs)
	}
	if want.AllowDirect && !have.AllowDirect {
		diff("direct get", have.AllowDirect, want.AllowDirect)
	}
	hs, ws := slices.Clone(have.Subjects), slices.Clone(want.Subjects)
	slices.Sort(hs)
	slices.Sort(ws)
	if !slices.Equal(hs, ws) {
		diff("subjects", hs, ws)
	}
	return d
}

// MaxWaitingPulls is the most pull requests a pool's consumer holds at once: two for each of
// 8,192 workers. The server cannot change it on an existing consumer; one created by an earlier
// release holds DefaultMaxWaiting, the server's default.
const (
	MaxWaitingPulls   = 16384
	DefaultMaxWaiting = 512
)

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
		// Every worker of the pool keeps a pull or two waiting; the server's default (512)
		// would refuse the pulls of a pool past a few hundred workers.
		MaxWaiting: MaxWaitingPulls,
		// Pull requests of idle workers wait this long at the server before expiring, which bounds
		// idle request traffic (see worker's fetch loop).
		MaxRequestExpires: 0,
	}
}

// Transient reports whether err may pass by itself: no stream leader to answer (a cluster
// electing one, a server restarting), a request that timed out, or a replicated stream that
// cannot be placed because a peer is offline (a node restarting, or a cluster that has just
// formed and not yet heard from every node). Callers that must get through (the lease, a worker
// starting) try again; others report it.
func Transient(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) ||
		errors.As(err, &apiErr) && (apiErr.Code == 503 || apiErr.ErrorCode == errNoPeers && strings.Contains(apiErr.Description, "peer offline"))
}

// errNoPeers is JetStream's "no suitable peers for placement": permanent when the cluster has
// fewer nodes than replicas, transient when its reason is a peer offline.
const errNoPeers jetstream.ErrorCode = 10005

// Retry calls try until it returns nil or an error that is not Transient, or until ctx ends; it
// returns try's last error. Each call gets its own deadline, perTry, since a request lost with a
// node would otherwise wait for ctx's. Between calls it pauses, from 100ms doubling up to 2s,
// after passing the error and the pause to retrying (to log them), if it is not nil.
func Retry(ctx context.Context, perTry time.Duration, try func(context.Context) error, retrying func(err error, pause time.Duration)) error {
	pause := 100 * time.Millisecond
	for {
		tctx, cancel := context.WithTimeout(ctx, perTry)
		err := try(tctx)
		cancel()
		if err == nil || !Transient(err) || ctx.Err() != nil {
			return err
		}
		if retrying != nil {
			retrying(err, pause)
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		pause = min(2*pause, 2*time.Second)
	}
}

// An API error with code 503 is the server's "service unavailable" class: "JetStream system
// temporarily unavailable" (10008: no meta leader), or "insufficient resources" (10023) when a
// replicated consumer cannot be placed because peers are down. Both pass once the cluster has its
// nodes back; a worker retrying logs the error each time, so a real resource limit shows.
