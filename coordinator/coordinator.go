package coordinator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/internal/directget"
	"github.com/weavejobs/weave/internal/lease"
	"github.com/weavejobs/weave/internal/wire"
)

// Coordinator admits groups, schedules their jobs onto worker pools and tracks every job's state.
// Run one per namespace; a second one waits as a standby and takes over when the first dies.
type Coordinator struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	cfg   Config
	names wire.Names

	mu      sync.Mutex
	running bool
	mx      coordMetrics // read by Collector

	// outcomesExpire: the RESULTS stream takes message TTLs (found by prepare, before any term).
	outcomesExpire bool
}

// New validates cfg and returns a coordinator using nc. It does no I/O; Run does.
func New(nc *nats.Conn, cfg Config) (*Coordinator, error) {
	if nc == nil {
		return nil, fmt.Errorf("%w: nil NATS connection", ErrInvalidConfig)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	names, _ := wire.NewNames(cfg.Namespace)
	// Every async publish resolves: a lost ack times out instead of leaving a release or a
	// write waiting for ever.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(requestTimeout))
	if err != nil {
		return nil, fmt.Errorf("weave: jetstream: %w", err)
	}
	if max := int(nc.MaxPayload()) - 64<<10; max > 0 && cfg.MaxBatchBytes > max {
		cfg.MaxBatchBytes = max
	}
	return &Coordinator{nc: nc, js: js, cfg: cfg, names: names}, nil
}

// ErrLeaseLost reports that the coordinator lost its lease while it held it: another took over,
// or it could not renew the lease within its TTL. It stopped coordinating; calling Run again
// makes it a standby that takes the lease back once it is free.
var ErrLeaseLost = lease.ErrLost

// ErrRunning reports a second concurrent call of Run on the same Coordinator.
var ErrRunning = errors.New("weave: coordinator already running")

// Run acquires the namespace's lease (waiting as a standby while another coordinator holds it),
// rebuilds the state from the streams and coordinates until ctx is done. It returns nil after a
// clean stop, or an error that ended coordination: one wrapping ErrLeaseLost if the lease was
// lost, one wrapping ErrStalled if a request it depends on (a write, a read of the streams)
// failed for longer than the lease TTL. Whatever the error, calling Run again makes it a
// standby that takes the lease once it is free.
func (c *Coordinator) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.running {
		c.mu.Unlock()
		return ErrRunning
	}
	c.running = true
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.running = false
		c.mu.Unlock()
	}()

	if err := c.prepare(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	host, _ := os.Hostname()
	stopAnnounce := c.announceStandby(ctx, host+"/"+strconv.Itoa(os.Getpid()))
	l, err := lease.Acquire(ctx, c.js, c.names.LeaseBucket(), host+"/"+strconv.Itoa(os.Getpid()), c.cfg.LeaseTTL, c.cfg.Streams.Replicas)
	stopAnnounce()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	c.cfg.Logger.Info().Uint64("epoch", l.Epoch()).Msg("coordinator lease acquired")
	c.mx.termStarted(l.Epoch())

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := l.Keep(ctx); err != nil {
			cancel(err)
		}
	})
	r, err := newRun(ctx, c, l.Epoch(), cancel)
	if err == nil {
		err = r.loop(ctx)
	}
	cancel(nil)
	wg.Wait()
	if cause := context.Cause(ctx); err == nil && cause != nil && !errors.Is(cause, context.Canceled) {
		err = cause
	}
	c.mx.termEnded(err)
	return err
}

func (c *Coordinator) directGet(stream string) *directget.Client {
	return directget.New(c.nc, stream)
}
