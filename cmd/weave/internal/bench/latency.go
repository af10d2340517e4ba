package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/cmd/weave/internal/inproc"
	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/internal/wire"
	"github.com/weavejobs/weave/worker"
)

// LatencyConfig configures the latency scenario. Zero fields take the defaults.
type LatencyConfig struct {
	Rate        int           `json:"rate"`         // jobs submitted per second; default 1,000
	Duration    time.Duration `json:"duration_ns"`  // submission time; default 3s
	GroupSize   int           `json:"group_size"`   // jobs per group, each yielded at its time; default 10
	Concurrency int           `json:"concurrency"`  // slots of the one worker; default 16
	PayloadSize int           `json:"payload_size"` // default 128 (at least 12: index and timestamp)

	// Wait sees outcomes the way a producer would, through each group's Handle.Wait (a consumer
	// per group), instead of one ordered consumer over the RESULTS stream: a job counts as done
	// when its group's Wait returns. Each open Wait holds a consumer, and the server allows 1,000
	// per stream by default: keep Rate ÷ GroupSize well under that.
	Wait bool `json:"wait,omitempty"`
}

func (c *LatencyConfig) defaults() error {
	setDefault(&c.Rate, 1000)
	setDefault(&c.Duration, 3*time.Second)
	setDefault(&c.GroupSize, 10)
	setDefault(&c.Concurrency, 16)
	setDefault(&c.PayloadSize, 128)
	switch {
	case c.Rate < 1 || c.Duration <= 0 || c.GroupSize < 1 || c.Concurrency < 1:
		return fmt.Errorf("latency: rate, duration, group size and concurrency must be positive")
	case c.PayloadSize < 12:
		return fmt.Errorf("latency: payload size %d below 12 bytes", c.PayloadSize)
	case c.Rate > 1_000_000:
		return fmt.Errorf("latency: rate %d above 1,000,000 jobs/s", c.Rate)
	}
	return nil
}

// LatencyResult is what the latency scenario measured.
type LatencyResult struct {
	Config      LatencyConfig `json:"config"`
	Jobs        int           `json:"jobs"`
	SubmitStart Quantiles     `json:"submit_to_start"`  // submission → handler start
	SubmitDone  Quantiles     `json:"submit_to_result"` // submission → outcome seen by the producer
	ReturnDone  Quantiles     `json:"return_to_result"` // handler return → outcome seen
	MaxLagMS    float64       `json:"max_lag_ms"`       // worst lateness of a submission against its schedule
	Checks      []Check       `json:"checks"`
}

// Scenario implements Result.
func (r *LatencyResult) Scenario() string { return "latency" }

type latencySample struct {
	submit   time.Time     // just before the job was handed to the dispatcher
	lag      time.Duration // submit's lateness against the schedule
	startLat time.Duration // submit → handler start
	ret      time.Time     // the handler returned
	seen     time.Time     // the producer saw the job's outcome
	hasRun   bool
}

// RunLatency submits jobs open loop at a fixed rate to one worker running a no-op handler, and
// measures, per job, submission → handler start and submission → outcome seen by the producer.
// Jobs are published in groups of GroupSize, each job yielded to the open group at its scheduled
// time. The producer sees outcomes through one ordered consumer over the RESULTS stream: what
// Handle.Wait reads, without a consumer per group (or, with Wait, through each group's Wait).
func RunLatency(ctx context.Context, env *Env, cfg LatencyConfig) (res *LatencyResult, err error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	d, err := env.deploy(ctx, "lat")
	if err != nil {
		return nil, err
	}
	defer d.closeInto(&err)
	n := max(int(float64(cfg.Rate)*cfg.Duration.Seconds())/cfg.GroupSize, 1) * cfg.GroupSize
	interval := time.Second / time.Duration(cfg.Rate)
	var (
		mu      sync.Mutex
		samples = make([]latencySample, n)
		byID    = map[uint64]int{} // jobs that ran, by job ID
		seen    int
		allSeen = make(chan struct{})
	)
	markSeen := func(id uint64, at time.Time) {
		mu.Lock()
		defer mu.Unlock()
		i, ok := byID[id]
		if !ok || !samples[i].seen.IsZero() {
			return // the warm-up's, or a repeated outcome
		}
		samples[i].seen = at
		if seen++; seen == n {
			close(allSeen)
		}
	}
	if err := d.Coordinator(coordinator.Config{}); err != nil {
		return nil, err
	}
	_, _, err = d.Worker(worker.Config{ID: "w0", Concurrency: cfg.Concurrency}, func(_ context.Context, j *worker.Job) ([]byte, error) {
		now := time.Now()
		if len(j.Payload) < 12 {
			return nil, nil // warm-up
		}
		i := int(binary.LittleEndian.Uint32(j.Payload))
		lat := time.Duration(now.UnixNano() - int64(binary.LittleEndian.Uint64(j.Payload[4:])))
		mu.Lock()
		defer mu.Unlock()
		if i < len(samples) && !samples[i].hasRun {
			s := &samples[i]
			s.hasRun, s.startLat, s.ret = true, lat, time.Now()
			byID[j.ID] = i
		}
		return nil, nil
	})
	if err != nil {
		return nil, err
	}
	disp, err := d.Dispatcher()
	if err != nil {
		return nil, err
	}
	if err := d.WaitStatus(inproc.FleetReady(1, cfg.Concurrency)); err != nil {
		return nil, err
	}
	if err := warmUp(ctx, disp, make([]byte, 8)); err != nil {
		return nil, err
	}

	if !cfg.Wait {
		cc, err := followOutcomes(ctx, d, markSeen)
		if err != nil {
			return nil, err
		}
		defer cc.Stop()
	}

	env.progressf("latency: submitting %s jobs at %s jobs/s", count(n), count(cfg.Rate))
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	t0 := time.Now().Add(10 * time.Millisecond)
	// submit stamps job i's payload just before it is handed over.
	submit := func(i int) dispatcher.Job {
		now := time.Now()
		p := make([]byte, cfg.PayloadSize)
		binary.LittleEndian.PutUint32(p, uint32(i))
		binary.LittleEndian.PutUint64(p[4:], uint64(now.UnixNano()))
		mu.Lock()
		samples[i].submit, samples[i].lag = now, now.Sub(t0.Add(time.Duration(i)*interval))
		mu.Unlock()
		return dispatcher.Job{Payload: p}
	}
	inproc.Labeled("producer", func() {
		for g := 0; g < n/cfg.GroupSize && ctx.Err() == nil; g++ {
			first := g * cfg.GroupSize
			time.Sleep(time.Until(t0.Add(time.Duration(first) * interval)))
			wg.Go(func() {
				job0 := submit(first) // just before Publish
				jobs := func(yield func(dispatcher.Job) bool) {
					for k := range cfg.GroupSize {
						j := job0
						if k > 0 {
							time.Sleep(time.Until(t0.Add(time.Duration(first+k) * interval)))
							j = submit(first + k)
						}
						if !yield(j) {
							return
						}
					}
				}
				h, err := disp.Publish(ctx, fmt.Sprint("lat-", g), jobs)
				if err != nil {
					cancel(fmt.Errorf("publish: %w", err))
					return
				}
				if cfg.Wait {
					res, err := h.Wait(ctx)
					if err != nil {
						cancel(fmt.Errorf("wait: %w", err))
						return
					}
					now := time.Now()
					for _, o := range res.Jobs {
						markSeen(o.ID, now)
					}
				}
			})
		}
		wg.Wait()
	})
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	select {
	case <-allSeen:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(30 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		return nil, fmt.Errorf("latency: %d of %d outcomes seen 30s after the last submission", seen, n)
	}

	mu.Lock()
	defer mu.Unlock()
	var start, done, ret, lag []time.Duration
	for _, s := range samples {
		start = append(start, s.startLat)
		done = append(done, s.seen.Sub(s.submit))
		ret = append(ret, s.seen.Sub(s.ret))
		lag = append(lag, s.lag)
	}
	res = &LatencyResult{
		Config: cfg, Jobs: n,
		SubmitStart: summarize(start), SubmitDone: summarize(done), ReturnDone: summarize(ret),
		MaxLagMS: ms(slices.Max(lag)),
	}
	res.Checks = []Check{atMost("p99 submit → start (ms)", res.SubmitStart.P99, 5, "%.2f")}
	return res, nil
}

// followOutcomes follows every group's outcomes with one ordered consumer over the RESULTS
// stream, on the producer's connection, and marks each job's as seen.
func followOutcomes(ctx context.Context, d *deployment, markSeen func(id uint64, at time.Time)) (jetstream.ConsumeContext, error) {
	fnc, err := d.Connect("producer")
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(fnc)
	if err != nil {
		return nil, err
	}
	cons, err := js.OrderedConsumer(ctx, d.Names().ResultsStream(), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{d.Names().AllOutcomes()}, DeliverPolicy: jetstream.DeliverNewPolicy,
	})
	if err != nil {
		return nil, err
	}
	var cc jetstream.ConsumeContext
	inproc.Labeled("producer", func() {
		cc, err = cons.Consume(func(m jetstream.Msg) {
			now := time.Now()
			outs, _, err := wire.DecodeOutcomeMsg(m.Data())
			if err != nil {
				return // not an outcome batch
			}
			for _, o := range outs {
				markSeen(o.ID, now)
			}
		})
	})
	if err != nil {
		return nil, err
	}
	return cc, nil
}

// Section implements Result.
func (r *LatencyResult) Section() Section {
	c := r.Config
	seen := "outcomes followed with one ordered consumer on the RESULTS stream"
	if c.Wait {
		seen = "outcomes seen through each group's Handle.Wait (a job is done when its group's Wait returns)"
	}
	row := func(name string, q Quantiles) []string {
		return []string{name, msec(q.P50), msec(q.P90), msec(q.P99), msec(q.Max)}
	}
	return Section{
		Scenario: r.Scenario(),
		Setup: fmt.Sprintf("%s no-op jobs submitted open loop at %s jobs/s for %v, in groups of %d (each job yielded to its open group at its scheduled time), to 1 worker × %d slots; %s.",
			count(r.Jobs), count(c.Rate), c.Duration, c.GroupSize, c.Concurrency, seen),
		Tables: []Table{{
			Header: []string{"ms", "p50", "p90", "p99", "max"},
			Rows: [][]string{
				row("submit → handler start", r.SubmitStart),
				row("submit → outcome seen", r.SubmitDone),
				row("handler return → outcome seen", r.ReturnDone),
			},
		}},
		Notes: []string{
			"Submit is the moment just before the job is handed to the dispatcher (the Publish call for a group's first job, the iterator's yield for the others); the time travels in the payload, and every component runs in this process, on one clock.",
			fmt.Sprintf("The worst lateness of a submission against its schedule was %s ms: if large, the load was not open loop.", msec(r.MaxLagMS)),
		},
		Checks: r.Checks,
	}
}
