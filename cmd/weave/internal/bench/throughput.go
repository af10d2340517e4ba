package bench

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/cmd/weave/internal/inproc"
	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/internal/wire"
	"github.com/weavejobs/weave/worker"
)

// ThroughputConfig configures the throughput scenario. Zero fields take the defaults.
type ThroughputConfig struct {
	Jobs        int `json:"jobs"`         // no-op jobs per round; default 20,000
	Groups      int `json:"groups"`       // groups they are split into (log-uniform sizes); default 200
	PayloadSize int `json:"payload_size"` // bytes per job; default 128
	Workers     int `json:"workers"`      // default 1
	Concurrency int `json:"concurrency"`  // slots per worker; default 64
	Rounds      int `json:"rounds"`       // Weave and reference runs each; default 2

	// The coordinator's Prefetch (-1 or more) and MaxBatch; 0: its defaults (adaptive, 64).
	Prefetch int `json:"prefetch,omitempty"`
	MaxBatch int `json:"max_batch,omitempty"`
}

func (c *ThroughputConfig) defaults() error {
	setDefault(&c.Jobs, 20_000)
	setDefault(&c.Groups, 200)
	setDefault(&c.PayloadSize, 128)
	setDefault(&c.Workers, 1)
	setDefault(&c.Concurrency, 64)
	setDefault(&c.Rounds, 2)
	switch {
	case c.Jobs < 1 || c.Groups < 1 || c.PayloadSize < 0 || c.Workers < 1 || c.Concurrency < 1 || c.Rounds < 1:
		return fmt.Errorf("throughput: jobs, groups, workers, concurrency and rounds must be positive")
	case c.Prefetch < -1 || c.MaxBatch < 0:
		return fmt.Errorf("throughput: prefetch %d below -1 or max batch %d negative", c.Prefetch, c.MaxBatch)
	case c.Groups > c.Jobs:
		return fmt.Errorf("throughput: %d groups need at least as many jobs (%d)", c.Groups, c.Jobs)
	case c.Groups > 500:
		// Each group's WaitSummary holds a consumer on the RESULTS stream; the server allows
		// 1,000 per stream by default.
		return fmt.Errorf("throughput: at most 500 groups (%d)", c.Groups)
	}
	return nil
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// ThroughputRound is one round's timings.
type ThroughputRound struct {
	WeaveSeconds    float64 `json:"weave_s"`
	WeaveCPUSeconds float64 `json:"weave_cpu_s"`
	RanSeconds      float64 `json:"ran_s"` // first Publish → last handler call
	RawSeconds      float64 `json:"raw_s"`
	RawCPUSeconds   float64 `json:"raw_cpu_s"`
}

// ThroughputResult is what the throughput scenario measured.
type ThroughputResult struct {
	Config           ThroughputConfig  `json:"config"`
	Embedded         bool              `json:"embedded_server"`
	Rounds           []ThroughputRound `json:"rounds"`
	WeaveJobsPerSec  float64           `json:"weave_jobs_per_s"` // jobs ÷ (first Publish → last group summary)
	RanJobsPerSec    float64           `json:"ran_jobs_per_s"`   // jobs ÷ (first Publish → last handler call)
	RawJobsPerSec    float64           `json:"raw_jobs_per_s"`   // messages ÷ (first publish → last ack flushed)
	Ratio            float64           `json:"ratio"`            // Weave ÷ raw
	WeaveCPUPer1000  float64           `json:"weave_cpu_s_per_1000_jobs"`
	RawCPUPer1000    float64           `json:"raw_cpu_s_per_1000_jobs"`
	WeaveCores       float64           `json:"weave_cores"` // CPU time ÷ wall time of the Weave runs
	JobsPerWorkBatch float64           `json:"jobs_per_work_batch"`
	JobsPerReportMsg float64           `json:"jobs_per_report_msg"`
	// StoredPerJob is the messages each stream (JOBS, WORK, EVENTS, RESULTS) stored per job over
	// the Weave runs: every stored message is a publish, an acknowledgement and a delivery or a
	// read, so this is what the server's share of the cost per job grows with.
	StoredPerJob      map[string]float64 `json:"stored_msgs_per_job"`
	PeakRSSBytes      uint64             `json:"peak_rss_bytes"`       // VmHWM over the Weave runs
	PeakRSSSinceStart bool               `json:"peak_rss_since_start"` // the peak could not be reset: it is since the process started
	Checks            []Check            `json:"checks"`
}

// Scenario implements Result.
func (r *ThroughputResult) Scenario() string { return "throughput" }

// RunThroughput pushes Jobs no-op jobs through Weave end to end (dispatcher → coordinator →
// workers → outcomes) and, on the same server in the same run, the same number of messages
// through a raw JetStream work queue (async publish, pull consume, ack): one hop, the floor of
// what any job system on JetStream costs. Rounds alternate which runs first.
func RunThroughput(ctx context.Context, env *Env, cfg ThroughputConfig) (res *ThroughputResult, err error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	d, err := env.deploy(ctx, "thr")
	if err != nil {
		return nil, err
	}
	defer d.closeInto(&err)
	res = &ThroughputResult{Config: cfg, Embedded: !env.External()}
	sizes := logUniformSizes(cfg.Jobs, cfg.Groups)
	payload := make([]byte, cfg.PayloadSize)

	if err := d.Coordinator(coordinator.Config{Prefetch: cfg.Prefetch, MaxBatch: cfg.MaxBatch}); err != nil {
		return nil, err
	}
	var lastRun atomic.Int64 // UnixNano of the latest handler call
	noop := func(context.Context, *worker.Job) ([]byte, error) {
		lastRun.Store(time.Now().UnixNano())
		return nil, nil
	}
	var ws []*worker.Worker
	for i := range cfg.Workers {
		w, _, err := d.Worker(worker.Config{ID: fmt.Sprint("w", i), Concurrency: cfg.Concurrency}, noop)
		if err != nil {
			return nil, err
		}
		ws = append(ws, w)
	}
	disp, err := d.Dispatcher()
	if err != nil {
		return nil, err
	}
	ref, err := newRawRef(d)
	if err != nil {
		return nil, err
	}
	if err := d.WaitStatus(inproc.FleetReady(cfg.Workers, cfg.Workers*cfg.Concurrency)); err != nil {
		return nil, err
	}
	if err := warmUp(ctx, disp, payload); err != nil {
		return nil, err
	}
	before := sumStats(ws)
	res.PeakRSSSinceStart = true
	var weaveTime, ranTime, rawTime, weaveCPU, rawCPU time.Duration
	storedMsgs := map[string]uint64{}
	for round := range cfg.Rounds {
		var r ThroughputRound
		weave := func() error {
			if resetPeakRSS() {
				res.PeakRSSSinceStart = false
			}
			stored0, err := d.StoredMessages()
			if err != nil {
				return err
			}
			cpu0, start := processCPU(), time.Now()
			if err := publishAndWait(ctx, disp, fmt.Sprint("r", round, "-"), sizes, payload); err != nil {
				return err
			}
			took, cpu := time.Since(start), processCPU()-cpu0
			ran := time.Unix(0, lastRun.Load()).Sub(start)
			res.PeakRSSBytes = max(res.PeakRSSBytes, peakRSS())
			r.WeaveSeconds, r.WeaveCPUSeconds, r.RanSeconds = took.Seconds(), cpu.Seconds(), ran.Seconds()
			stored1, err := d.StoredMessages()
			if err != nil {
				return err
			}
			for name, n := range stored1 {
				storedMsgs[name] += n - stored0[name]
			}
			weaveTime, weaveCPU, ranTime = weaveTime+took, weaveCPU+cpu, ranTime+ran
			env.progressf("throughput: round %d/%d: Weave %s jobs/s", round+1, cfg.Rounds, rate(float64(cfg.Jobs)/took.Seconds()))
			return nil
		}
		raw := func() error {
			cpu0 := processCPU()
			took, err := ref.run(ctx, cfg.Jobs, payload)
			if err != nil {
				return fmt.Errorf("raw JetStream reference: %w", err)
			}
			cpu := processCPU() - cpu0
			r.RawSeconds, r.RawCPUSeconds = took.Seconds(), cpu.Seconds()
			rawTime, rawCPU = rawTime+took, rawCPU+cpu
			env.progressf("throughput: round %d/%d: raw JetStream %s msgs/s", round+1, cfg.Rounds, rate(float64(cfg.Jobs)/took.Seconds()))
			return nil
		}
		// Alternate the order, so that neither path always runs on a server busy with the
		// other's leftovers (file store flushes, purges).
		first, second := raw, weave
		if round%2 == 1 {
			first, second = weave, raw
		}
		if err := first(); err != nil {
			return nil, err
		}
		if err := second(); err != nil {
			return nil, err
		}
		res.Rounds = append(res.Rounds, r)
	}
	after := sumStats(ws)
	n := float64(cfg.Jobs * cfg.Rounds)
	res.WeaveJobsPerSec = n / weaveTime.Seconds()
	res.RanJobsPerSec = n / ranTime.Seconds()
	res.RawJobsPerSec = n / rawTime.Seconds()
	res.Ratio = res.WeaveJobsPerSec / res.RawJobsPerSec
	res.WeaveCPUPer1000 = weaveCPU.Seconds() / n * 1000
	res.RawCPUPer1000 = rawCPU.Seconds() / n * 1000
	res.WeaveCores = weaveCPU.Seconds() / weaveTime.Seconds()
	jobs := float64(after.JobsRun - before.JobsRun)
	res.JobsPerWorkBatch = jobs / float64(max(after.Batches-before.Batches, 1))
	res.JobsPerReportMsg = jobs / float64(max(after.ReportBatches-before.ReportBatches, 1))
	res.StoredPerJob = map[string]float64{}
	for name, m := range storedMsgs {
		res.StoredPerJob[name] = float64(m) / n
	}
	res.Checks = []Check{atLeast("Weave ÷ raw JetStream throughput", res.Ratio, 0.5, "%.2f")}
	return res, nil
}

// Section implements Result.
func (r *ThroughputResult) Section() Section {
	c := r.Config
	coord := "coordinator defaults"
	if c.Prefetch != 0 || c.MaxBatch != 0 {
		coord = fmt.Sprintf("coordinator Prefetch %d, MaxBatch %d (0: default)", c.Prefetch, c.MaxBatch)
	}
	s := Section{
		Scenario: r.Scenario(),
		Setup: fmt.Sprintf("%s no-op jobs of %d B in %d groups (log-uniform sizes), %d worker(s) × %d slots, %s; %d round(s), alternating which path runs first.",
			count(c.Jobs), c.PayloadSize, c.Groups, c.Workers, c.Concurrency, coord, c.Rounds),
		Tables: []Table{{
			Header: []string{"path", "jobs/s", "CPU s / 1,000 jobs", "what is timed"},
			Rows: [][]string{
				{"Weave end to end", rate(r.WeaveJobsPerSec), fmt.Sprintf("%.3f", r.WeaveCPUPer1000), "first Publish → every group's summary received"},
				{"Weave, handlers only", rate(r.RanJobsPerSec), "", "first Publish → last handler call"},
				{"raw JetStream, one hop", rate(r.RawJobsPerSec), fmt.Sprintf("%.3f", r.RawCPUPer1000), "first async publish → last ack flushed (work queue, file storage)"},
			},
		}, {
			Header: []string{"also measured", "value"},
			Rows: [][]string{
				{"Weave ÷ raw", fmt.Sprintf("%.2f", r.Ratio)},
				{"CPU cores used by the Weave runs", fmt.Sprintf("%.2f", r.WeaveCores)},
				{"jobs per work batch", fmt.Sprintf("%.1f", r.JobsPerWorkBatch)},
				{"jobs per report message", fmt.Sprintf("%.1f", r.JobsPerReportMsg)},
				{"messages stored per job: JOBS / WORK / EVENTS / RESULTS", fmt.Sprintf("%.2f / %.2f / %.2f / %.2f",
					r.StoredPerJob["JOBS"], r.StoredPerJob["WORK"], r.StoredPerJob["EVENTS"], r.StoredPerJob["RESULTS"])},
				{"peak RSS of the process", mib(r.PeakRSSBytes)},
			},
		}},
		Checks: r.Checks,
	}
	if r.Embedded {
		s.Notes = append(s.Notes, "CPU is the whole process's (getrusage): the embedded NATS server, coordinator, workers and dispatcher together.")
	} else {
		s.Notes = append(s.Notes, "CPU is this process's (getrusage): coordinator, workers and dispatcher; the external server's CPU is not included.")
	}
	rss := "Peak RSS is VmHWM, reset before each Weave run"
	if r.PeakRSSSinceStart {
		rss = "Peak RSS is VmHWM since the process started (it could not be reset)"
	}
	what := "coordinator, workers, dispatcher"
	if r.Embedded {
		what = "embedded server, " + what
	}
	s.Notes = append(s.Notes, rss+": one process holding the "+what+" and the Go runtime, so it bounds the coordinator's memory from above.")
	return s
}

// sumStats adds up the workers' counters.
func sumStats(ws []*worker.Worker) worker.Stats {
	var t worker.Stats
	for _, w := range ws {
		s := w.Stats()
		t.Batches += s.Batches
		t.Pulls += s.Pulls
		t.Wakeups += s.Wakeups
		t.SpuriousWakeups += s.SpuriousWakeups
		t.JobsRun += s.JobsRun
		t.JobsOK += s.JobsOK
		t.JobsFailed += s.JobsFailed
		t.ReportBatches += s.ReportBatches
		t.ReportRetries += s.ReportRetries
		t.Busy += s.Busy
		t.Sleeping += s.Sleeping
		t.Queued += s.Queued
	}
	return t
}

// repeatJobs yields n jobs with the same payload.
func repeatJobs(n int, payload []byte) iter.Seq[dispatcher.Job] {
	return func(yield func(dispatcher.Job) bool) {
		for range n {
			if !yield(dispatcher.Job{Payload: payload}) {
				return
			}
		}
	}
}

// warmUp runs one small group end to end, so that consumers, pulls and caches exist before
// anything is timed.
func warmUp(ctx context.Context, d *dispatcher.Dispatcher, payload []byte) error {
	h, err := d.Publish(ctx, "warmup-"+randomHex(4), repeatJobs(100, payload))
	if err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	sum, err := h.WaitSummary(ctx)
	if err == nil && sum.Done != 100 {
		err = fmt.Errorf("summary %+v, want 100 done", sum)
	}
	if err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	return nil
}

// publishAndWait publishes the groups from several goroutines (Publish settles a group's acks
// before sealing it, so one publisher would wait a round trip per group) and waits for every
// group's summary, started as soon as the group is published.
func publishAndWait(ctx context.Context, d *dispatcher.Dispatcher, prefix string, sizes []int, payload []byte) error {
	const publishers = 8
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		pubs, waits sync.WaitGroup
		next        atomic.Int64
	)
	inproc.Labeled("producer", func() {
		for range publishers {
			pubs.Go(func() {
				for {
					i := int(next.Add(1)) - 1
					if i >= len(sizes) || ctx.Err() != nil {
						return
					}
					h, err := d.Publish(ctx, fmt.Sprint(prefix, i), repeatJobs(sizes[i], payload))
					if err != nil {
						cancel(fmt.Errorf("publish: %w", err))
						return
					}
					waits.Go(func() {
						sum, err := h.WaitSummary(ctx)
						if err == nil && sum.Done != sizes[i] {
							err = fmt.Errorf("group %s: summary %+v, want %d done", h.GroupID(), sum, sizes[i])
						}
						if err != nil {
							cancel(err)
						}
					})
				}
			})
		}
		pubs.Wait()
	})
	waits.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return ctx.Err()
}

// rawStream is the reference's work-queue stream, in the deployment's namespace.
func rawStream(names wire.Names) string { return names.Namespace() + "_RAW" }

// rawRef is the reference: what the same server does for plain JetStream work-queue messages.
type rawRef struct {
	names        wire.Names
	pubNC, subNC *nats.Conn
	pub, sub     jetstream.JetStream
}

func newRawRef(d *deployment) (*rawRef, error) {
	r := &rawRef{names: d.Names()}
	var err error
	if r.pubNC, err = d.Connect("reference"); err != nil {
		return nil, err
	}
	if r.subNC, err = d.Connect("reference"); err != nil {
		return nil, err
	}
	// The dispatcher's default bound on pending acks.
	if r.pub, err = jetstream.New(r.pubNC, jetstream.WithPublishAsyncMaxPending(dispatcher.DefaultMaxPending)); err != nil {
		return nil, err
	}
	if r.sub, err = jetstream.New(r.subNC); err != nil {
		return nil, err
	}
	return r, nil
}

// run publishes n messages asynchronously into a new work-queue stream (file storage) while a
// pull consumer consumes and acks them, and returns the time from the first publish to the last
// ack, flushed to the server. The stream is deleted afterwards.
func (r *rawRef) run(ctx context.Context, n int, payload []byte) (took time.Duration, err error) {
	name, subject := rawStream(r.names), r.names.Namespace()+".raw"
	s, err := r.sub.CreateStream(ctx, jetstream.StreamConfig{
		Name: name, Subjects: []string{subject}, Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage,
	})
	if err != nil {
		return 0, err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if derr := r.sub.DeleteStream(dctx, name); err == nil && derr != nil {
			err = derr
		}
	}()
	cons, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "raw", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: -1})
	if err != nil {
		return 0, err
	}
	var got atomic.Int64
	done := make(chan struct{})
	var cc jetstream.ConsumeContext
	inproc.Labeled("reference", func() {
		cc, err = cons.Consume(func(m jetstream.Msg) {
			_ = m.Ack()
			if got.Add(1) == int64(n) {
				close(done)
			}
		})
	})
	if err != nil {
		return 0, err
	}
	defer cc.Stop()
	start := time.Now()
	inproc.Labeled("reference", func() {
		for range n {
			if _, err = r.pub.PublishAsync(subject, payload); err != nil {
				return
			}
		}
	})
	if err != nil {
		return 0, err
	}
	select {
	case <-r.pub.PublishAsyncComplete():
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	select {
	case <-done:
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(time.Minute):
		return 0, fmt.Errorf("%d of %d messages consumed after a minute", got.Load(), n)
	}
	if err := r.subNC.Flush(); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}
