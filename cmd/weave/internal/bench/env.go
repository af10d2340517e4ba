package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/weavejobs/weave/cmd/weave/internal/inproc"
	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/internal/wire"
)

// Env says where the scenarios run. The zero value runs each scenario on its own embedded
// JetStream server (file storage in a new temporary directory, removed at the end), silently.
type Env struct {
	// Dial connects to an external NATS server, naming the connection after the component that
	// uses it. Nil: every scenario starts its own embedded server.
	Dial func(ctx context.Context, name string) (*nats.Conn, error)

	// Dir is where embedded servers store their data: a new directory inside it per scenario,
	// removed when the scenario ends. Empty: the system's temporary directory.
	Dir string

	// NamespacePrefix starts the name of the fresh namespace each scenario uses (and deletes at
	// its end on an external server): prefix-scenario-random. Default "bench".
	NamespacePrefix string

	// Log receives the components' logs. The zero Logger is silent.
	Log zerolog.Logger

	// Progress receives a line per step of a scenario. Nil: none.
	Progress io.Writer

	// ServerCPU, if set, returns the CPU time the external server's processes have used so far
	// (a cluster the bench started itself), so that the throughput and fleet scenarios count it
	// with this process's, as they do an embedded server's. Nil: an external server's CPU is not
	// counted.
	ServerCPU func() time.Duration

	// Replicas is the replicas of every stream the scenarios create (the namespace's, through
	// the coordinator, and the references'): 0 or 1 for a single server, 3 on a cluster.
	Replicas int

	// ChildCommand, if set, runs the measurements that must be apart from this process in a
	// fresh one: each scale measurement (so that its heap holds nothing but that deployment) and
	// the fleet scenario's idle coordinator (so that its CPU is not the workers'). It is the
	// command (program and arguments) that runs RunChild with the next argument as its spec and
	// its standard input and output, as weave bench --child does. Nil: they run in this process.
	ChildCommand []string
	// ChildEnv is added to this process's environment for the child processes (secrets that
	// should not appear on a command line).
	ChildEnv []string
}

func (e *Env) progressf(format string, args ...any) {
	if e.Progress != nil {
		fmt.Fprintf(e.Progress, format+"\n", args...)
	}
}

// Validate checks the namespace prefix: every scenario's namespace must be valid.
func (e *Env) Validate() error {
	prefix := e.NamespacePrefix
	if prefix == "" {
		prefix = "bench"
	}
	if _, err := wire.NewNames(prefix + "-spread-000000"); err != nil {
		return fmt.Errorf("namespace prefix %q: at most 18 characters of [A-Za-z0-9_-]", prefix)
	}
	return nil
}

// cpu returns the CPU time used so far by this process and, where Env.ServerCPU knows it, the
// external server's processes.
func (e *Env) cpu() time.Duration {
	if e.ServerCPU != nil {
		return processCPU() + e.ServerCPU()
	}
	return processCPU()
}

// serverCPUCounted reports whether the CPU figures include the server's: embedded, or external
// with Env.ServerCPU.
func (e *Env) serverCPUCounted() bool { return !e.External() || e.ServerCPU != nil }

// External reports whether the scenarios run on an external server.
func (e *Env) External() bool { return e.Dial != nil }

// deployment is one scenario's Weave (see package inproc): a fresh namespace on a server, the
// connections and the components started in it.
type deployment struct {
	*inproc.Deployment
	replicas int // Env.Replicas
}

// benchAlarms is the coordinators' alarm configuration in every scenario: the scenarios publish
// bursts by design, which pending_growth would report at each round (a warning on stderr that
// says nothing about the run). The other alarms keep their defaults.
func benchAlarms(cfg coordinator.Config) coordinator.Config {
	if cfg.Alarms.PendingGrowth == 0 {
		cfg.Alarms.PendingGrowth = math.MaxInt32
	}
	return cfg
}

// Coordinator starts a coordinator (see inproc.Deployment.Coordinator) with benchAlarms and the
// deployment's replicas.
func (d *deployment) Coordinator(cfg coordinator.Config) error {
	return d.Deployment.Coordinator(d.config(cfg))
}

// StartCoordinator starts a coordinator (see inproc.Deployment.StartCoordinator) with benchAlarms
// and the deployment's replicas.
func (d *deployment) StartCoordinator(cfg coordinator.Config) (*inproc.Service, error) {
	return d.Deployment.StartCoordinator(d.config(cfg))
}

func (d *deployment) config(cfg coordinator.Config) coordinator.Config {
	if cfg.Streams.Replicas == 0 {
		cfg.Streams.Replicas = d.replicas
	}
	return benchAlarms(cfg)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// deploy starts a server (unless external) and picks a fresh namespace tagged with the scenario.
// Connections to the embedded server are TCP connections, as separate processes would have.
func (e *Env) deploy(ctx context.Context, tag string) (*deployment, error) {
	prefix := e.NamespacePrefix
	if prefix == "" {
		prefix = "bench"
	}
	names, err := wire.NewNames(prefix + "-" + tag + "-" + randomHex(3))
	if err != nil {
		return nil, fmt.Errorf("namespace: %w", err)
	}
	d, err := inproc.New(ctx, inproc.Options{
		Namespace: names.Namespace(),
		Streams:   []string{rawStream(names)},
		Name:      "bench",
		Dial:      e.Dial,
		Dir:       e.Dir,
		Log:       e.Log,
	})
	if err != nil {
		return nil, err
	}
	return &deployment{Deployment: d, replicas: e.Replicas}, nil
}

// lastClose is when a deployment of this process last closed (UnixNano).
var lastClose atomic.Int64

// closedAgo returns how long ago a deployment of this process last closed, or a day if none did.
func closedAgo() time.Duration {
	if t := lastClose.Load(); t != 0 {
		return time.Since(time.Unix(0, t))
	}
	return 24 * time.Hour
}

// closeInto closes the deployment at the end of a scenario (inproc.Deployment.Close), notes when
// for closedAgo, and sets *err to the error of closing unless the scenario failed already.
func (d *deployment) closeInto(err *error) {
	cerr := d.Close()
	lastClose.Store(time.Now().UnixNano())
	if *err == nil {
		*err = cerr
	}
}
