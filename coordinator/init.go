package coordinator

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/internal/natsver"
	"github.com/weavejobs/weave/internal/topology"
	"github.com/weavejobs/weave/internal/wire"
)

// StreamStatus is what InitNamespace did with one stream: created it, or found it, and then how
// its configuration differs from the options asked for.
type StreamStatus = topology.StreamStatus

// InitNamespace creates the namespace's streams that do not exist yet, as Run does when it starts
// ('weave init' calls it). Like Run it first checks the server's version (ErrServerTooOld). Workers and producers do not create streams: they fail with an error
// wrapping ErrNamespaceNotFound (worker.ErrNamespaceNotFound, dispatcher.ErrNamespaceNotFound are
// the same error) until the namespace is initialised. It is idempotent: a stream that exists is
// left as it is, and its StreamStatus lists how it differs from opts (replicas, say), since
// changing a live stream is an operator's decision. The lease bucket is not created: its TTL is
// the coordinator's Config.LeaseTTL, so Run creates it.
func InitNamespace(ctx context.Context, nc *nats.Conn, namespace string, opts StreamOptions) ([]StreamStatus, error) {
	if nc == nil {
		return nil, fmt.Errorf("%w: nil NATS connection", ErrInvalidConfig)
	}
	names, err := wire.NewNames(namespace)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if err := opts.Validate(""); err != nil {
		return nil, err
	}
	if err := natsver.CheckConn(nc); err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("weave: jetstream: %w", err)
	}
	// As Run's prepare does, wait out errors that pass by themselves (a leader election, a peer
	// not heard from yet), but not for ever: a command gets the error after initPatience.
	ictx, cancel := context.WithTimeout(ctx, initPatience)
	defer cancel()
	var sts []StreamStatus
	err = topology.Retry(ictx, prepareTimeout, func(ctx context.Context) (err error) {
		sts, err = topology.Init(ctx, js, names, opts)
		return err
	}, nil)
	return sts, err
}

// initPatience bounds how long InitNamespace tries again after errors that pass by themselves.
const initPatience = 30 * time.Second

// ErrNamespaceNotFound is the error workers and producers wrap when the namespace's streams do
// not exist (see InitNamespace).
var ErrNamespaceNotFound = topology.ErrNamespaceNotFound

// ErrServerTooOld is wrapped by the error Run and InitNamespace return when the NATS server is
// older than the one Weave needs (MinServerVersion). worker.ErrServerTooOld and
// dispatcher.ErrServerTooOld are the same error.
var ErrServerTooOld = natsver.ErrServerTooOld

// MinServerVersion is the oldest nats-server Weave runs on.
const MinServerVersion = natsver.Minimum

// prepareTimeout bounds one try of prepare's stream creation and checks.
const prepareTimeout = 10 * time.Second

// prepare starts Run: it checks the server's version, creates the namespace's missing streams,
// and warns about existing ones that differ from Config.Streams (they are used as they are).
func (c *Coordinator) prepare(ctx context.Context) error {
	if err := natsver.CheckConn(c.nc); err != nil {
		return err
	}
	// A coordinator (re)started while a cluster elects leaders, or under a load that times its
	// requests out, waits that out rather than return: errors that pass by themselves are tried
	// again until ctx ends.
	var sts []topology.StreamStatus
	err := topology.Retry(ctx, prepareTimeout, func(ctx context.Context) (err error) {
		sts, err = topology.Init(ctx, c.js, c.names, c.cfg.Streams)
		return err
	}, func(err error, pause time.Duration) {
		c.cfg.Logger.Warn().Err(err).Stringer("retry_in", pause).Msg("coordinator: streams not reachable yet; trying again")
	})
	if err != nil {
		return err
	}
	var differ []string
	for _, st := range sts {
		if st.Name == c.names.ResultsStream() {
			c.outcomesExpire = st.AllowMsgTTL
		}
		if st.Created {
			c.cfg.Logger.Info().Str("stream", st.Name).Msg("stream created")
			continue
		}
		if len(st.Upgraded) > 0 {
			c.cfg.Logger.Info().Str("stream", st.Name).Strs("added", st.Upgraded).Msg("stream upgraded for this release")
		}
		for _, d := range st.Differences {
			differ = append(differ, st.Name+": "+d)
		}
	}
	if len(differ) > 0 {
		c.cfg.Logger.Warn().Strs("differences", differ).
			Msg("streams exist with another configuration than this coordinator's flags; using them as they are")
	}
	// Without --replicas, the buckets this coordinator creates (lease, release key) follow the
	// namespace: a coordinator started with defaults on a cluster namespace must not create them
	// with one replica.
	if c.cfg.Streams.Replicas == 0 && len(sts) > 0 {
		c.cfg.Streams.Replicas = sts[0].Replicas
	}
	return nil
}
