package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Scenarios are the scenario names, in the order Run runs them.
var Scenarios = []string{"throughput", "latency", "single", "fairness", "weights", "limits", "affinity", "spread", "chains", "herd", "fleet", "scale"}

// Config holds every scenario's configuration; zero fields take the defaults.
type Config struct {
	Throughput ThroughputConfig
	Latency    LatencyConfig
	Single     SingleConfig
	Fairness   FairnessConfig
	Weights    WeightsConfig
	Limits     LimitsConfig
	Affinity   AffinityConfig
	Spread     SpreadConfig
	Chains     ChainsConfig
	Herd       HerdConfig
	Fleet      FleetConfig
	Scale      ScaleConfig
}

// Validate fills in the defaults of the named scenarios' configurations and checks them, so that
// a bad value is reported before anything runs. An unknown scenario is an error.
func (c *Config) Validate(scenarios []string) error {
	for _, s := range scenarios {
		var err error
		switch s {
		case "throughput":
			err = c.Throughput.defaults()
		case "latency":
			err = c.Latency.defaults()
		case "single":
			err = c.Single.defaults()
		case "fairness":
			err = c.Fairness.defaults()
		case "weights":
			err = c.Weights.defaults()
		case "limits":
			err = c.Limits.defaults()
		case "affinity":
			err = c.Affinity.defaults()
		case "spread":
			err = c.Spread.defaults()
		case "chains":
			err = c.Chains.defaults()
		case "herd":
			err = c.Herd.defaults()
		case "fleet":
			err = c.Fleet.defaults()
		case "scale":
			err = c.Scale.defaults()
		default:
			return fmt.Errorf("unknown scenario %q: want one of %s", s, strings.Join(Scenarios, ", "))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Run runs the named scenarios (all of them if none is named) in the order of Scenarios and
// returns the report. A scenario that fails does not stop the others: its error is returned,
// joined with the others', beside the report of those that completed.
func Run(ctx context.Context, env *Env, scenarios []string, cfg Config) (*Report, error) {
	if len(scenarios) == 0 {
		scenarios = Scenarios
	}
	if err := cfg.Validate(scenarios); err != nil {
		return nil, err
	}
	if err := env.Validate(); err != nil {
		return nil, err
	}
	r := &Report{Started: time.Now(), Server: "embedded (one per scenario, file storage in a temporary directory)"}
	r.Machine = Machine{
		OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0),
		CPUModel: cpuModel(), LoadStart: loadAverage(), Go: runtime.Version(),
		NATSServer: server.VERSION, NATSClient: nats.Version,
	}
	if env.External() {
		nc, err := env.Dial(ctx, "bench")
		if err != nil {
			return nil, err
		}
		r.Server = nc.ConnectedUrlRedacted()
		r.Machine.NATSServer = nc.ConnectedServerVersion()
		nc.Close()
	}
	var errs []error
	for _, name := range Scenarios {
		if !slices.Contains(scenarios, name) {
			continue
		}
		if err := ctx.Err(); err != nil {
			errs = append(errs, err)
			break
		}
		env.progressf("%s: starting", name)
		res, err := runScenario(ctx, env, name, &cfg)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			env.progressf("%s: failed: %v", name, err)
			continue
		}
		r.Results = append(r.Results, res)
	}
	r.Finished = time.Now()
	r.Machine.LoadEnd = loadAverage()
	return r, errors.Join(errs...)
}

func runScenario(ctx context.Context, env *Env, name string, cfg *Config) (Result, error) {
	switch name {
	case "throughput":
		return RunThroughput(ctx, env, cfg.Throughput)
	case "latency":
		return RunLatency(ctx, env, cfg.Latency)
	case "single":
		return RunSingle(ctx, env, cfg.Single)
	case "fairness":
		return RunFairness(ctx, env, cfg.Fairness)
	case "weights":
		return RunWeights(ctx, env, cfg.Weights)
	case "limits":
		return RunLimits(ctx, env, cfg.Limits)
	case "affinity":
		return RunAffinity(ctx, env, cfg.Affinity)
	case "spread":
		return RunSpread(ctx, env, cfg.Spread)
	case "chains":
		return RunChains(ctx, env, cfg.Chains)
	case "herd":
		return RunHerd(ctx, env, cfg.Herd)
	case "fleet":
		return RunFleet(ctx, env, cfg.Fleet)
	case "scale":
		return RunScale(ctx, env, cfg.Scale)
	}
	return nil, fmt.Errorf("unknown scenario %q", name)
}
