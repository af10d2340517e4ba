package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weavejobs/weave/cmd/weave/internal/inproc"
	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/worker"
)

// IdleFleetResult is what an idle fleet cost.
type IdleFleetResult struct {
	Workers int     `json:"workers"`
	Seconds float64 `json:"window_s"`
	// Isolated: the coordinator (and the embedded server, if any) ran in a child process of their
	// own, so ServerCPUPct is theirs alone and WorkersCPUPct the workers' process's. Otherwise
	// everything ran in this process and ServerCPUPct is the whole process's.
	Isolated bool `json:"isolated"`
	// ServerIncluded: the server's CPU is in ServerCPUPct: it ran in the measured process
	// (embedded), or Env.ServerCPU measured its processes over the window.
	ServerIncluded bool    `json:"server_included"`
	ServerCPUPct   float64 `json:"coordinator_server_cpu_pct_of_core"`
	WorkersCPUPct  float64 `json:"workers_cpu_pct_of_core"`
	// PullsPerWorkerS is the pull requests each idle worker sent per second over the window.
	PullsPerWorkerS float64 `json:"pulls_per_worker_per_s"`
	// Dormant is how many workers were dormant (worker.Stats.Dormant) when the window began.
	Dormant int `json:"dormant"`
}

// idleChildSpec is what a child process runs for the idle fleet: a deployment with a coordinator
// and no worker.
type idleChildSpec struct {
	Profile string `json:"profile,omitempty"` // FleetConfig.IdleProfile
}

// idleChildReady is the child's first line: where its deployment is.
type idleChildReady struct {
	URL       string `json:"url"` // the embedded server's; "" on an external server
	Namespace string `json:"namespace"`
}

// idleChildWindow is the child's CPU between the parent's "start" and "stop".
type idleChildWindow struct {
	CPUSeconds float64 `json:"cpu_s"`
	Seconds    float64 `json:"wall_s"`
}

// runIdleFleet starts cfg.IdleWorkers workers of one slot with no job to run and measures, over
// cfg.Idle, the CPU of the coordinator and the server apart from the workers': the coordinator
// (with the embedded server) runs in a child process when Env.ChildCommand is set, else all run
// in this process.
func runIdleFleet(ctx context.Context, env *Env, cfg FleetConfig) (*IdleFleetResult, error) {
	res := &IdleFleetResult{Workers: cfg.IdleWorkers, Isolated: len(env.ChildCommand) > 0, ServerIncluded: env.serverCPUCounted()}
	if !res.Isolated {
		d, err := env.deploy(ctx, "idle")
		if err != nil {
			return nil, err
		}
		if err := d.Coordinator(coordinator.Config{}); err != nil {
			return nil, err
		}
		settle := max(idleStartup, idleSettle-closedAgo())
		err = idleWorkers(ctx, env, d.Deployment, cfg, res, settle, func() error {
			stop, err := startProfile(cfg.IdleProfile)
			if err != nil {
				return err
			}
			cpu0, t0 := env.cpu(), time.Now()
			err = sleepCtx(ctx, cfg.Idle)
			stop()
			if err != nil {
				return err
			}
			res.Seconds = time.Since(t0).Seconds()
			res.ServerCPUPct = 100 * (env.cpu() - cpu0).Seconds() / res.Seconds
			return nil
		})
		d.closeInto(&err)
		return res, err
	}
	err := env.runChild(ctx, childSpec{Idle: &idleChildSpec{Profile: cfg.IdleProfile}}, func(c *child) error {
		var ready idleChildReady
		if err := c.read(&ready); err != nil {
			return err
		}
		dial := env.Dial
		if ready.URL != "" {
			dial = func(_ context.Context, name string) (*nats.Conn, error) {
				return nats.Connect(ready.URL, nats.Name("weave "+name))
			}
		}
		d, err := inproc.New(ctx, inproc.Options{Namespace: ready.Namespace, Joined: true, Name: "bench", Dial: dial, Log: env.Log})
		if err != nil {
			return err
		}
		defer d.Close()
		err = idleWorkers(ctx, env, d, cfg, res, idleStartup, func() error {
			if err := c.signal("start"); err != nil {
				return err
			}
			cpu0, t0 := processCPU(), time.Now()
			var server0 time.Duration
			if env.ServerCPU != nil {
				server0 = env.ServerCPU()
			}
			if err := sleepCtx(ctx, cfg.Idle); err != nil {
				return err
			}
			if err := c.signal("stop"); err != nil {
				return err
			}
			cpu, wall := processCPU()-cpu0, time.Since(t0)
			var server time.Duration
			if env.ServerCPU != nil {
				server = env.ServerCPU() - server0
			}
			var w idleChildWindow
			if err := c.read(&w); err != nil {
				return err
			}
			res.Seconds = w.Seconds
			res.ServerCPUPct = 100 * (w.CPUSeconds + server.Seconds()) / w.Seconds
			res.WorkersCPUPct = 100 * cpu.Seconds() / wall.Seconds()
			return nil
		})
		if err != nil {
			return err
		}
		return d.Close()
	})
	return res, err
}

// idleWorkers starts the idle fleet's workers on d, waits until the coordinator knows them all
// and they have gone dormant (a worker idle for a pull's expiry pulls less often: that is
// the idle fleet's steady state), then for settle and until this process is quiet, and calls
// measure; it counts the workers' pull requests meanwhile into res.
func idleWorkers(ctx context.Context, env *Env, d *inproc.Deployment, cfg FleetConfig, res *IdleFleetResult, settle time.Duration, measure func() error) error {
	n := cfg.IdleWorkers
	env.progressf("fleet: %s idle workers: starting", count(n))
	noop := func(context.Context, *worker.Job) ([]byte, error) { return nil, nil }
	ws := make([]*worker.Worker, n)
	if err := forEach(ctx, n, connectParallel, func(i int) (err error) {
		ws[i], _, err = d.Worker(worker.Config{ID: fmt.Sprint("idle", i), Concurrency: 1}, noop)
		return err
	}); err != nil {
		return err
	}
	if err := d.WaitStatusWithin(5*time.Minute, inproc.FleetReady(n, n)); err != nil {
		return err
	}
	env.progressf("fleet: %s idle workers: waiting for them to go dormant", count(n))
	dormant := func() int {
		k := 0
		for _, w := range ws {
			if w.Stats().Dormant {
				k++
			}
		}
		return k
	}
	for deadline := time.Now().Add(idleDormantWait); dormant() < n && time.Now().Before(deadline); {
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	if err := sleepCtx(ctx, settle); err != nil {
		return err
	}
	debug.FreeOSMemory()
	waitQuiet(ctx, 5*time.Second)
	env.progressf("fleet: %s idle workers: idle for %v", count(n), cfg.Idle)
	res.Dormant = dormant()
	s0, t0 := sumStats(ws), time.Now()
	if err := measure(); err != nil {
		return err
	}
	res.PullsPerWorkerS = float64(sumStats(ws).Pulls-s0.Pulls) / time.Since(t0).Seconds() / float64(n)
	return nil
}

// idleStartup is how long an idle fleet runs, once dormant, before it is measured: the last
// workers' first dormant pulls are start-up, not idling. In this process, earlier deployments'
// timers must pass too (see idleSettle). idleDormantWait bounds the wait for the workers to go
// dormant (they do once a pull has waited out its expiry, 10s, without work).
const (
	idleStartup     = 3 * time.Second
	idleDormantWait = time.Minute
)

// sleepCtx sleeps for d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// runIdleChild is the child process's side of the idle fleet: a deployment with a coordinator,
// announced on out; then its own CPU between the lines "start" and "stop" read from in, written
// to out; it ends when in does.
func runIdleChild(ctx context.Context, env *Env, spec idleChildSpec, in io.Reader, out io.Writer) (err error) {
	d, err := env.deploy(ctx, "idle")
	if err != nil {
		return err
	}
	defer d.closeInto(&err)
	if err := d.Coordinator(coordinator.Config{}); err != nil {
		return err
	}
	enc := json.NewEncoder(out)
	if err := enc.Encode(idleChildReady{URL: d.ClientURL(), Namespace: d.Namespace()}); err != nil {
		return err
	}
	var (
		cpu0 time.Duration
		t0   time.Time
		stop = func() {}
	)
	defer func() { stop() }()
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		switch sc.Text() {
		case "start":
			if stop, err = startProfile(spec.Profile); err != nil {
				return err
			}
			cpu0, t0 = processCPU(), time.Now()
		case "stop":
			stop()
			stop = func() {}
			w := idleChildWindow{CPUSeconds: (processCPU() - cpu0).Seconds(), Seconds: time.Since(t0).Seconds()}
			if err := enc.Encode(w); err != nil {
				return err
			}
		}
	}
	return sc.Err()
}

// startProfile starts a CPU profile into the file path, if path is not empty, and returns what
// stops it.
func startProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("idle profile: %w (not with --cpuprofile in the same process)", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
