package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/cmd/weave/internal/inproc"
	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/worker"
)

// SingleConfig configures the single scenario. Zero fields take the defaults.
type SingleConfig struct {
	Rate        int           `json:"rate"`        // jobs submitted per second; default 1,000
	Duration    time.Duration `json:"duration_ns"` // submission time; default 3s
	Concurrency int           `json:"concurrency"` // slots of the one worker; default 16
}

func (c *SingleConfig) defaults() error {
	setDefault(&c.Rate, 1000)
	setDefault(&c.Duration, 3*time.Second)
	setDefault(&c.Concurrency, 16)
	if c.Rate < 1 || c.Rate > 100_000 || c.Duration <= 0 || c.Concurrency < 1 {
		return fmt.Errorf("single: rate 1..100000, positive duration and concurrency")
	}
	return nil
}

// SingleSide is one side's measurements: Weave or the raw JetStream reference.
type SingleSide struct {
	Jobs        int       `json:"jobs"`
	SubmitStart Quantiles `json:"submit_to_start"`
	SubmitSeen  Quantiles `json:"submit_to_outcome"`
	// CPUPerJob is the whole process's CPU time (every component, the server included) per job
	// over this side's run, in microseconds.
	CPUPerJob float64 `json:"cpu_us_per_job"`
}

// SingleResult is what the single scenario measured.
type SingleResult struct {
	Config SingleConfig `json:"config"`
	Weave  SingleSide   `json:"weave"`
	Raw    SingleSide   `json:"raw"`
	Checks []Check      `json:"checks"`
}

// Scenario implements Result.
func (r *SingleResult) Scenario() string { return "single" }

// stamp returns a payload holding index i and the time now in its first 12 bytes, and that time.
func stamp(i int) ([]byte, time.Time) {
	p, now := make([]byte, 128), time.Now()
	binary.LittleEndian.PutUint32(p, uint32(i))
	binary.LittleEndian.PutUint64(p[4:], uint64(now.UnixNano()))
	return p, now
}

func unstamp(p []byte) (int, time.Time, bool) {
	if len(p) < 12 {
		return 0, time.Time{}, false
	}
	return int(binary.LittleEndian.Uint32(p)), time.Unix(0, int64(binary.LittleEndian.Uint64(p[4:]))), true
}

// singleLog collects one side's samples.
type singleLog struct {
	mu          sync.Mutex
	submit      []time.Time
	start, seen []time.Duration
	n, nSeen    int
	all         chan struct{}
}

// startFleet starts d's coordinator and workers × concurrency no-op workers that log each job's
// start in wl, and waits until the coordinator knows them all.
func (wl *singleLog) startFleet(d *deployment, workers, concurrency int) error {
	if err := d.Coordinator(coordinator.Config{}); err != nil {
		return err
	}
	for i := range workers {
		if _, _, err := d.Worker(worker.Config{ID: fmt.Sprint("w", i), Concurrency: concurrency}, func(_ context.Context, j *worker.Job) ([]byte, error) {
			wl.started(j.Payload)
			return nil, nil
		}); err != nil {
			return err
		}
	}
	return d.WaitStatus(inproc.FleetReady(workers, workers*concurrency))
}

func newSingleLog(n int) *singleLog {
	l := &singleLog{submit: make([]time.Time, n), start: make([]time.Duration, n), seen: make([]time.Duration, n), n: n, all: make(chan struct{})}
	return l
}

func (l *singleLog) started(p []byte) {
	now := time.Now()
	if i, at, ok := unstamp(p); ok && i < l.n {
		l.mu.Lock()
		if l.start[i] == 0 {
			l.start[i] = now.Sub(at)
		}
		l.mu.Unlock()
	}
}

func (l *singleLog) sawOutcome(i int, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if i < l.n && l.seen[i] == 0 {
		l.seen[i] = at.Sub(l.submit[i])
		if l.nSeen++; l.nSeen == l.n {
			close(l.all)
		}
	}
}

func (l *singleLog) side() SingleSide {
	l.mu.Lock()
	defer l.mu.Unlock()
	return SingleSide{Jobs: l.n, SubmitStart: summarize(l.start), SubmitSeen: summarize(l.seen)}
}

// openLoop calls submit(i) for every job at its scheduled time, each in its own goroutine so a
// slow acknowledgement does not delay the next.
func openLoop(ctx context.Context, n, rate int, submit func(i int)) {
	interval := time.Second / time.Duration(rate)
	t0 := time.Now().Add(10 * time.Millisecond)
	var wg sync.WaitGroup
	inproc.Labeled("producer", func() {
		for i := 0; i < n && ctx.Err() == nil; i++ {
			time.Sleep(time.Until(t0.Add(time.Duration(i) * interval)))
			wg.Go(func() { submit(i) })
		}
		wg.Wait()
	})
}

// RunSingle submits single jobs (Dispatcher.Submit: one message, a group of its own) open loop at
// a fixed rate to one worker running a no-op handler, each submitter waiting for its own job's
// outcome (WaitJob, no consumer), and measures submission → handler start and submission →
// outcome seen; then the same hop on raw JetStream, on the same server: a synchronous publish, a
// pull consumer that records the start and publishes a result into a stream, and a subscriber
// that sees it.
func RunSingle(ctx context.Context, env *Env, cfg SingleConfig) (res *SingleResult, err error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	d, err := env.deploy(ctx, "single")
	if err != nil {
		return nil, err
	}
	defer d.closeInto(&err)
	n := max(int(float64(cfg.Rate)*cfg.Duration.Seconds()), 1)
	res = &SingleResult{Config: cfg}

	// Weave.
	wl := newSingleLog(n)
	if err := wl.startFleet(d, 1, cfg.Concurrency); err != nil {
		return nil, err
	}
	disp, err := d.Dispatcher()
	if err != nil {
		return nil, err
	}
	if err := warmUp(ctx, disp, make([]byte, 8)); err != nil {
		return nil, err
	}
	env.progressf("single: %s single jobs at %s jobs/s", count(n), count(cfg.Rate))
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	cpu0 := processCPU()
	openLoop(ctx, n, cfg.Rate, func(i int) {
		p, at := stamp(i)
		wl.mu.Lock()
		wl.submit[i] = at
		wl.mu.Unlock()
		h, id, err := disp.Submit(ctx, "", dispatcher.Job{Payload: p})
		if err != nil {
			cancel(fmt.Errorf("submit: %w", err))
			return
		}
		if _, err := h.WaitJob(ctx, id); err != nil {
			cancel(fmt.Errorf("wait: %w", err))
			return
		}
		wl.sawOutcome(i, time.Now())
	})
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	res.Weave = wl.side()
	res.Weave.CPUPerJob = perJobMicros(processCPU()-cpu0, n)

	// Raw JetStream: job → consumer → result → subscriber.
	rl := newSingleLog(n)
	var rawCPU time.Duration
	if err := rawSingle(ctx, d, n, cfg.Rate, rl, &rawCPU); err != nil {
		return nil, fmt.Errorf("raw JetStream reference: %w", err)
	}
	res.Raw = rl.side()
	res.Raw.CPUPerJob = perJobMicros(rawCPU, n)
	res.Checks = []Check{
		atMost("single jobs at 1,000/s: submit → start p50 (ms)", res.Weave.SubmitStart.P50, 0.5, "%.2f"),
		atMost("single jobs at 1,000/s: submit → start p99 (ms)", res.Weave.SubmitStart.P99, 2, "%.2f"),
		atMost("single jobs at 1,000/s: submit → outcome seen p99 (ms)", res.Weave.SubmitSeen.P99, 5, "%.2f"),
	}
	return res, nil
}

// rawSingle runs the reference: each job published synchronously into a stream, consumed by a
// pull consumer that records its start and publishes its result into the same stream, seen by a
// core subscription of the producer.
func rawSingle(ctx context.Context, d *deployment, n, rate int, l *singleLog, cpu *time.Duration) error {
	names := d.Names()
	jobSubj, resSubj := names.Namespace()+".raw.job", names.Namespace()+".raw.result"
	pubNC, err := d.Connect("reference")
	if err != nil {
		return err
	}
	subNC, err := d.Connect("reference")
	if err != nil {
		return err
	}
	pub, err := jetstream.New(pubNC)
	if err != nil {
		return err
	}
	sub, err := jetstream.New(subNC)
	if err != nil {
		return err
	}
	name := rawStream(names)
	s, err := sub.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{jobSubj, resSubj}, Storage: jetstream.FileStorage, Replicas: d.replicas})
	if err != nil {
		return err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = sub.DeleteStream(dctx, name)
	}()
	cons, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "raw", FilterSubject: jobSubj, AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		return err
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		l.started(m.Data())
		if _, err := sub.PublishAsync(resSubj, m.Data()[:12]); err == nil {
			_ = m.Ack()
		}
	})
	if err != nil {
		return err
	}
	defer cc.Stop()
	results, err := pubNC.Subscribe(resSubj, func(m *nats.Msg) {
		if i, _, ok := unstamp(m.Data); ok {
			l.sawOutcome(i, time.Now())
		}
	})
	if err != nil {
		return err
	}
	defer func() { _ = results.Unsubscribe() }()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	cpu0 := processCPU()
	defer func() { *cpu = processCPU() - cpu0 }()
	openLoop(ctx, n, rate, func(i int) {
		p, at := stamp(i)
		l.mu.Lock()
		l.submit[i] = at
		l.mu.Unlock()
		if _, err := pub.Publish(ctx, jobSubj, p); err != nil {
			cancel(err)
		}
	})
	if err := context.Cause(ctx); err != nil {
		return err
	}
	select {
	case <-l.all:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(30 * time.Second):
		return fmt.Errorf("%d of %d results seen 30s after the last publish", l.nSeen, n)
	}
}

// Section implements Result.
func (r *SingleResult) Section() Section {
	c := r.Config
	row := func(name string, w, raw Quantiles) []string {
		return []string{name, fmt.Sprintf("%s / %s / %s", msec(w.P50), msec(w.P99), msec(w.Max)), fmt.Sprintf("%s / %s / %s", msec(raw.P50), msec(raw.P99), msec(raw.Max))}
	}
	return Section{
		Scenario: r.Scenario(),
		Setup: fmt.Sprintf("%s single jobs (Dispatcher.Submit: one message, a group of its own) at %d/s open loop to 1 worker × %d slots, no-op handler, 128-byte payloads, each submitter waiting for its own outcome (WaitJob, no consumer); the raw JetStream reference on the same server: synchronous publish, a pull consumer that publishes a result into a stream, a subscriber that sees it.",
			count(r.Weave.Jobs), c.Rate, c.Concurrency),
		Tables: []Table{{
			Header: []string{"ms: p50 / p99 / max", "Weave", "raw JetStream"},
			Rows: [][]string{
				row("submit → handler start", r.Weave.SubmitStart, r.Raw.SubmitStart),
				row("submit → outcome seen by the submitter", r.Weave.SubmitSeen, r.Raw.SubmitSeen),
				{"process CPU per job (µs)", fmt.Sprintf("%.0f", r.Weave.CPUPerJob), fmt.Sprintf("%.0f", r.Raw.CPUPerJob)},
			},
		}},
		Notes: []string{"Submit is the moment just before Submit (or the raw publish) is called; the time travels in the payload, and every component runs in this process, on one clock.",
			"CPU per job is the whole process's (server, coordinator, worker, producer) from the first submission to the last outcome seen, over the jobs: at 1,000/s on 2 cores it is also how busy the processors are, which sets the tail (BENCHMARKS.md)."},
		Checks: r.Checks,
	}
}

// perJobMicros is cpu over n jobs, in microseconds.
func perJobMicros(cpu time.Duration, n int) float64 {
	return float64(cpu.Microseconds()) / float64(max(n, 1))
}
