package integration_test

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"iter"
	"math"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/integration/jstest"
	"github.com/weavejobs/weave/internal/wire"
	"github.com/weavejobs/weave/worker"
)

// End-to-end benchmarks: dispatcher → coordinator → workers on one embedded JetStream server
// (file storage), every component on its own connection, as separate processes would be. The
// machine they run on may be shared and noisy, so each benchmark measures a reference in the same
// run (a raw JetStream work queue; the generator's own lateness) and the report should quote
// ratios, CPU per job and the load average rather than absolute rates alone.
//
//	go test -run='^$' -bench=. -benchtime=1x ./integration/      # what CI runs, about 40s
//	go test -run='^$' -bench=Throughput -benchtime=3x ./integration/
//	go test -run='^$' -bench=Latency -benchtime=1x ./integration/ -args -weave.rate=2000
//
// Components run under a pprof label component=server|coordinator|worker|dispatcher|producer|
// reference, inherited by the goroutines they start, their connections' included. The server's
// stream and consumer goroutines are started outside those labels: count every sample with a
// nats-server frame as the server's. With -weave.ref=false BenchmarkThroughput skips the reference,
// so a profile holds Weave alone:
//
//	go test -run='^$' -bench='Throughput/w1x64/prefetch=1/' -benchtime=5x -cpuprofile=/tmp/cpu.prof ./integration/ -args -weave.ref=false
//	go tool pprof -tags /tmp/cpu.prof
//	go tool pprof -top -nodecount=40 -tagfocus=component=coordinator /tmp/cpu.prof
//	go tool pprof -top -cum -focus=nats-server /tmp/cpu.prof

var (
	benchJobs     = flag.Int("weave.jobs", 20_000, "BenchmarkThroughput: jobs per op")
	benchGroups   = flag.Int("weave.groups", 200, "BenchmarkThroughput: groups per op (each has a WaitSummary, so a consumer, open: keep well under the server's 1,000 per stream)")
	benchRate     = flag.Int("weave.rate", 1000, "BenchmarkLatency: submitted jobs per second")
	benchDuration = flag.Duration("weave.duration", 3*time.Second, "BenchmarkLatency: submission time per op")
	benchRef      = flag.Bool("weave.ref", true, "BenchmarkThroughput: also run the raw JetStream reference (off: profile Weave alone)")
	benchTrace    = flag.Duration("weave.trace", 0, "BenchmarkThroughput: log the pipeline's state at this interval (0: off)")
)

const benchPayloadSize = 128

// benchEnv is a benchmark's deployment: an embedded server and components started under pprof
// labels. It is torn down by the benchmark's cleanup: components first, then connections, then
// the server.
type benchEnv struct {
	tb  testing.TB
	srv *jstest.Server
	ns  string
	ctx context.Context
}

func newBenchEnv(tb testing.TB) *benchEnv {
	tb.Helper()
	e := &benchEnv{tb: tb, ns: "b" + randomHex(4)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	tb.Cleanup(cancel)
	e.ctx = ctx
	var err error
	labeled("server", func() { e.srv, err = jstest.Start(ctx, jstest.Options{}) })
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(e.srv.Shutdown)
	return e
}

// labeled runs fn with the pprof label component=name; goroutines fn starts inherit it.
func labeled(name string, fn func()) {
	pprof.Do(context.Background(), pprof.Labels("component", name), func(context.Context) { fn() })
}

// conn opens a connection whose read loop and handlers are labeled as component.
func (e *benchEnv) conn(component string) *nats.Conn {
	e.tb.Helper()
	var nc *nats.Conn
	var err error
	labeled(component, func() { nc, err = nats.Connect(e.srv.ClientURL()) })
	if err != nil {
		e.tb.Fatal(err)
	}
	e.tb.Cleanup(nc.Close)
	return nc
}

// run runs fn under a label until the benchmark ends, then cancels it and waits.
func (e *benchEnv) run(component string, fn func(ctx context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	labeled(component, func() { go func() { done <- fn(ctx) }() })
	e.tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			e.tb.Errorf("%s: %v", component, err)
		}
	})
}

func (e *benchEnv) coordinator(cfg coordinator.Config) {
	e.tb.Helper()
	cfg.Namespace = e.ns
	cfg.Logger = testLogger("coordinator")
	c, err := coordinator.New(e.conn("coordinator"), cfg)
	if err != nil {
		e.tb.Fatal(err)
	}
	e.run("coordinator", c.Run)
}

func (e *benchEnv) worker(cfg worker.Config, h worker.HandlerFunc) *worker.Worker {
	e.tb.Helper()
	cfg.Namespace = e.ns
	cfg.HeartbeatInterval = 100 * time.Millisecond
	cfg.Logger = testLogger("worker")
	w, err := worker.New(e.conn("worker"), cfg, h)
	if err != nil {
		e.tb.Fatal(err)
	}
	e.run("worker", w.Run)
	return w
}

func (e *benchEnv) dispatcher() *dispatcher.Dispatcher {
	e.tb.Helper()
	d, err := dispatcher.New(e.conn("dispatcher"), dispatcher.Config{Namespace: e.ns})
	if err != nil {
		e.tb.Fatal(err)
	}
	return d
}

// waitWorkers waits until the coordinator knows n live workers.
func (e *benchEnv) waitWorkers(nc *nats.Conn, n int) {
	e.tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := coordinator.QueryStatus(e.ctx, nc, e.ns)
		if err == nil && len(st.Workers) == n {
			return
		}
		if time.Now().After(deadline) {
			e.tb.Fatalf("timed out waiting for %d workers to join", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// warmUp runs one small group end to end, so consumers, pulls and caches exist before timing.
func (e *benchEnv) warmUp(d *dispatcher.Dispatcher, payload []byte) {
	e.tb.Helper()
	h, err := d.Publish(e.ctx, "warmup-"+randomHex(4), repeatJobs(100, payload))
	if err == nil {
		var sum dispatcher.Summary
		sum, err = h.WaitSummary(e.ctx)
		if err == nil && sum.Done != 100 {
			err = fmt.Errorf("summary %+v", sum)
		}
	}
	if err != nil {
		e.tb.Fatalf("warm-up: %v", err)
	}
}

func repeatJobs(n int, payload []byte) iter.Seq[dispatcher.Job] {
	return func(yield func(dispatcher.Job) bool) {
		for range n {
			if !yield(dispatcher.Job{Payload: payload}) {
				return
			}
		}
	}
}

// groupSizes splits total jobs into groups of log-uniformly varying sizes (1 to ~1000 before
// scaling), the same for every run.
func groupSizes(total, groups int) []int {
	r := rand.New(rand.NewPCG(1, 2))
	w := make([]float64, groups)
	sum := 0.0
	for i := range w {
		w[i] = math.Exp(r.Float64() * math.Log(1000))
		sum += w[i]
	}
	sizes := make([]int, groups)
	acc := 0
	for i := range w {
		sizes[i] = max(1, int(w[i]/sum*float64(total)))
		acc += sizes[i]
	}
	sizes[slices.Index(sizes, slices.Max(sizes))] += total - acc
	return sizes
}

// BenchmarkThroughput pushes jobs=20,000 no-op jobs of 128 bytes in groups=200 groups of varying
// size through Weave and, in the same op and on the same server, the same number of 128-byte
// messages through a raw JetStream work queue (async publish, pull consume, ack). It reports:
//
//	weave-jobs/s    jobs ÷ time from the first Publish to the last group's WaitSummary
//	raw-jobs/s      messages ÷ time from the first publish to the last ack (flushed)
//	ratio           weave-jobs/s ÷ raw-jobs/s
//	ran-jobs/s      jobs ÷ time from the first Publish to the last handler call (Weave)
//	*-cpu-µs/job    CPU time of the whole process (server included) per job, while each path ran
//	                (Linux only): less sensitive to other load on the machine than the rates
//	weave-cores     CPU time ÷ wall time of the Weave path: near GOMAXPROCS means CPU bound
//	jobs/batch      jobs per work batch received by the workers
//	jobs/report     reports per report message persisted by the workers
//
// Sub-benchmarks vary the worker fleet (workers × Concurrency), the coordinator's Prefetch
// (0: adaptive, the default) and its MaxBatch (0: the default, 64).
func BenchmarkThroughput(b *testing.B) {
	for _, bc := range []struct {
		workers, conc, prefetch, batch int
	}{
		{1, 64, 0, 0}, // the coordinator's defaults
		{2, 32, 0, 0},
		{1, 64, 1, 64}, // a fixed window of one job beyond the slots
		{1, 64, 256, 256},
		{1, 256, 0, 0},
	} {
		prefetch, batch := fmt.Sprint(bc.prefetch), fmt.Sprint(bc.batch)
		if bc.prefetch == 0 {
			prefetch = "auto"
		}
		if bc.batch == 0 {
			batch = "default"
		}
		name := fmt.Sprintf("w%dx%d/prefetch=%s/batch=%s", bc.workers, bc.conc, prefetch, batch)
		b.Run(name, func(b *testing.B) {
			benchmarkThroughput(b, bc.workers, bc.conc, coordinator.Config{Prefetch: bc.prefetch, MaxBatch: bc.batch})
		})
	}
}

func benchmarkThroughput(b *testing.B, workers, conc int, ccfg coordinator.Config) {
	e := newBenchEnv(b)
	sizes := groupSizes(*benchJobs, *benchGroups)
	total := *benchJobs
	payload := make([]byte, benchPayloadSize)

	e.coordinator(ccfg)
	var lastRun atomic.Int64 // UnixNano of the latest handler call
	noop := func(context.Context, *worker.Job) ([]byte, error) {
		lastRun.Store(time.Now().UnixNano())
		return nil, nil
	}
	var ws []*worker.Worker
	for i := range workers {
		ws = append(ws, e.worker(worker.Config{ID: fmt.Sprint("w", i), Concurrency: conc}, noop))
	}
	d := e.dispatcher()
	ref := newRawRef(e)
	e.waitWorkers(ref.pubNC, workers)
	e.warmUp(d, payload)

	var weaveTime, rawTime, ranTime, weaveCPU, rawCPU time.Duration
	var batches0, jobs0, reports0, reportMsgs0 uint64
	for _, w := range ws {
		st := w.Stats()
		batches0, jobs0, reports0, reportMsgs0 = batches0+st.Batches, jobs0+st.JobsRun, reports0+st.JobsOK, reportMsgs0+st.ReportBatches
	}
	op := 0
	for b.Loop() {
		weave := func() {
			cpu0 := processCPU()
			start := time.Now()
			if *benchTrace > 0 {
				defer traceThroughput(e, ref.pubNC, ws, start)()
			}
			if err := publishAndWait(e.ctx, d, fmt.Sprint("op", op, "-"), sizes, payload); err != nil {
				b.Fatal(err)
			}
			weaveTime += time.Since(start)
			weaveCPU += processCPU() - cpu0
			ranTime += time.Unix(0, lastRun.Load()).Sub(start)
		}
		raw := func() {
			if !*benchRef {
				return
			}
			cpu0 := processCPU()
			took, err := ref.run(op, total, payload)
			if err != nil {
				b.Fatal(err)
			}
			rawTime += took
			rawCPU += processCPU() - cpu0
		}
		// Alternate the order, so that neither path always runs on a server busy with the
		// other's leftovers (file store flushes, purges).
		if op%2 == 0 {
			raw()
			weave()
		} else {
			weave()
			raw()
		}
		op++
	}
	var batches, jobs, reports, reportMsgs uint64
	for _, w := range ws {
		st := w.Stats()
		batches, jobs, reports, reportMsgs = batches+st.Batches, jobs+st.JobsRun, reports+st.JobsOK, reportMsgs+st.ReportBatches
	}
	n := float64(total * op)
	weaveRate := n / weaveTime.Seconds()
	b.ReportMetric(weaveRate, "weave-jobs/s")
	if *benchRef {
		rawRate := n / rawTime.Seconds()
		b.ReportMetric(rawRate, "raw-jobs/s")
		b.ReportMetric(weaveRate/rawRate, "ratio")
	}
	b.ReportMetric(n/ranTime.Seconds(), "ran-jobs/s")
	if weaveCPU > 0 {
		b.ReportMetric(float64(weaveCPU.Microseconds())/n, "weave-cpu-µs/job")
		b.ReportMetric(weaveCPU.Seconds()/weaveTime.Seconds(), "weave-cores")
	}
	if rawCPU > 0 {
		b.ReportMetric(float64(rawCPU.Microseconds())/n, "raw-cpu-µs/job")
	}
	b.ReportMetric(float64(jobs-jobs0)/float64(max(batches-batches0, 1)), "jobs/batch")
	b.ReportMetric(float64(reports-reports0)/float64(max(reportMsgs-reportMsgs0, 1)), "jobs/report")
}

// publishAndWait publishes the groups from several goroutines (Publish settles a group's acks
// before sealing it, so one publisher would wait a round trip per group) and waits for every
// group's summary, started as soon as the group is published.
func publishAndWait(ctx context.Context, d *dispatcher.Dispatcher, prefix string, sizes []int, payload []byte) error {
	const publishers = 8
	var (
		mu       sync.Mutex
		firstErr error
		pubs     sync.WaitGroup
		waits    sync.WaitGroup
		next     atomic.Int64
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if firstErr == nil {
			firstErr = err
		}
	}
	labeled("producer", func() {
		for range publishers {
			pubs.Go(func() {
				for {
					i := int(next.Add(1)) - 1
					if i >= len(sizes) {
						return
					}
					h, err := d.Publish(ctx, fmt.Sprint(prefix, i), repeatJobs(sizes[i], payload))
					if err != nil {
						fail(err)
						return
					}
					waits.Go(func() {
						sum, err := h.WaitSummary(ctx)
						if err == nil && sum.Done != sizes[i] {
							err = fmt.Errorf("group %s: summary %+v, want %d done", h.GroupID(), sum, sizes[i])
						}
						if err != nil {
							fail(err)
						}
					})
				}
			})
		}
		pubs.Wait()
	})
	waits.Wait()
	return firstErr
}

// rawRef is the reference: what the same server does for plain JetStream work-queue messages.
type rawRef struct {
	e            *benchEnv
	pubNC, subNC *nats.Conn
	pub, sub     jetstream.JetStream
}

func newRawRef(e *benchEnv) *rawRef {
	r := &rawRef{e: e, pubNC: e.conn("reference"), subNC: e.conn("reference")}
	var err error
	// The dispatcher's default bound on pending acks.
	if r.pub, err = jetstream.New(r.pubNC, jetstream.WithPublishAsyncMaxPending(dispatcher.DefaultMaxPending)); err != nil {
		e.tb.Fatal(err)
	}
	if r.sub, err = jetstream.New(r.subNC); err != nil {
		e.tb.Fatal(err)
	}
	return r
}

// run publishes n messages asynchronously into a new work-queue stream (file storage) while a
// pull consumer consumes and acks them, and returns the time from the first publish to the last
// ack, flushed to the server.
func (r *rawRef) run(op, n int, payload []byte) (took time.Duration, err error) {
	ctx := r.e.ctx
	name, subject := fmt.Sprint("RAW", op), fmt.Sprint("raw", op, ".jobs")
	s, err := r.sub.CreateStream(ctx, jetstream.StreamConfig{
		Name: name, Subjects: []string{subject}, Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage,
	})
	if err != nil {
		return 0, err
	}
	defer func() {
		if derr := r.sub.DeleteStream(ctx, name); err == nil {
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
	labeled("reference", func() {
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
	for range n {
		if _, err := r.pub.PublishAsync(subject, payload); err != nil {
			return 0, err
		}
	}
	select {
	case <-r.pub.PublishAsyncComplete():
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	select {
	case <-done:
	case <-time.After(time.Minute):
		return 0, fmt.Errorf("reference: %d of %d messages consumed", got.Load(), n)
	}
	if err := r.subNC.Flush(); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// BenchmarkLatency submits jobs open loop at a fixed rate (weave.rate, default 1,000 jobs/s)
// for weave.duration (3 s) per op, to one worker of 16 slots running a no-op handler, and
// reports percentiles in µs of:
//
//	start-*   submit → handler start: from just before the job is handed to the dispatcher
//	          (the Publish call for a group's first job, the iterator's yield for later jobs)
//	          to the handler's first line; the submit time travels in the payload
//	done-*    submit → outcome seen by the producer
//	ret-*     handler return → outcome seen: the completion path alone
//	lag-max   the worst lateness of a submission against its schedule (the generator's own
//	          delay; if large, the load was not open loop)
//
// Sub-benchmarks: g1 publishes each job as its own group (one Publish per job); g10 publishes
// groups of 10, each job yielded at its scheduled time while the group is open. "follow" sees
// outcomes through one ordered consumer over the RESULTS stream; "wait" calls Handle.Wait per
// group, as a producer would, which creates a consumer per group, and counts a job done when its
// group's Wait returns (so done includes the wait for the group's later jobs, up to 9 intervals).
// There is no g1/wait: each Wait holds a consumer on the RESULTS stream, and the server allows
// 1,000 per stream by default, which 1,000 single-job groups a second exceed as soon as the
// coordinator falls a second behind.
func BenchmarkLatency(b *testing.B) {
	for _, bc := range []struct {
		name      string
		groupSize int
		wait      bool
		ccfg      coordinator.Config
	}{
		{"g1/follow", 1, false, coordinator.Config{}},
		{"g10/follow", 10, false, coordinator.Config{}},
		{"g10/wait", 10, true, coordinator.Config{}},
	} {
		b.Run(bc.name, func(b *testing.B) { benchmarkLatency(b, bc.groupSize, bc.wait, bc.ccfg) })
	}
}

// latencySample is one job's timeline.
type latencySample struct {
	submit   time.Time     // just before the job was handed to the dispatcher
	lag      time.Duration // submit's lateness against the schedule
	startLat time.Duration // submit → handler start, from the payload's timestamp
	ret      time.Time     // the handler returned
	seen     time.Time     // the producer saw the job's outcome
	hasRun   bool
}

func benchmarkLatency(b *testing.B, groupSize int, wait bool, ccfg coordinator.Config) {
	e := newBenchEnv(b)
	rate, dur := *benchRate, *benchDuration
	n := max(int(float64(rate)*dur.Seconds())/groupSize, 1) * groupSize
	interval := time.Second / time.Duration(rate)

	var (
		mu      sync.Mutex
		samples []latencySample // this op's, by index
		byID    map[uint64]int  // this op's jobs that ran, by job ID
		seen    int             // outcomes seen in this op
		allSeen chan struct{}   // closed when seen reaches n
	)
	// markSeen records that the producer saw a job's outcome. An outcome always follows its
	// handler's return, so an ID not in byID is not this op's (the warm-up's, say).
	markSeen := func(id uint64, at time.Time) {
		mu.Lock()
		defer mu.Unlock()
		i, ok := byID[id]
		if !ok || !samples[i].seen.IsZero() {
			return
		}
		samples[i].seen = at
		if seen++; seen == n {
			close(allSeen)
		}
	}
	e.coordinator(ccfg)
	e.worker(worker.Config{ID: "w0", Concurrency: 16}, func(_ context.Context, j *worker.Job) ([]byte, error) {
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
	d := e.dispatcher()
	fnc := e.conn("producer")
	e.waitWorkers(fnc, 1)
	e.warmUp(d, make([]byte, 8))

	if !wait {
		// One ordered consumer over every group's outcomes: it sees what Wait would, without a
		// consumer per group.
		names, _ := wire.NewNames(e.ns)
		js, err := jetstream.New(fnc)
		if err != nil {
			b.Fatal(err)
		}
		cons, err := js.OrderedConsumer(e.ctx, names.ResultsStream(), jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{names.AllOutcomes()}, DeliverPolicy: jetstream.DeliverNewPolicy,
		})
		if err != nil {
			b.Fatal(err)
		}
		var cc jetstream.ConsumeContext
		labeled("producer", func() {
			cc, err = cons.Consume(func(m jetstream.Msg) {
				now := time.Now()
				outs, _, err := wire.DecodeOutcomeMsg(m.Data())
				if err != nil {
					return
				}
				for _, o := range outs {
					markSeen(o.ID, now)
				}
			})
		})
		if err != nil {
			b.Fatal(err)
		}
		defer cc.Stop()
	}

	var all []latencySample
	op := 0
	for b.Loop() {
		mu.Lock()
		samples, byID, seen, allSeen = make([]latencySample, n), map[uint64]int{}, 0, make(chan struct{})
		done := allSeen
		mu.Unlock()
		var errMu sync.Mutex
		var firstErr error
		fail := func(err error) {
			errMu.Lock()
			defer errMu.Unlock()
			if firstErr == nil {
				firstErr = err
			}
		}
		var wg sync.WaitGroup
		t0 := time.Now().Add(10 * time.Millisecond)
		// submit stamps job i's payload just before it is handed over.
		submit := func(i int) dispatcher.Job {
			now := time.Now()
			p := make([]byte, benchPayloadSize)
			binary.LittleEndian.PutUint32(p, uint32(i))
			binary.LittleEndian.PutUint64(p[4:], uint64(now.UnixNano()))
			mu.Lock()
			samples[i].submit, samples[i].lag = now, now.Sub(t0.Add(time.Duration(i)*interval))
			mu.Unlock()
			return dispatcher.Job{Payload: p}
		}
		labeled("producer", func() {
			for g := 0; g < n/groupSize; g++ {
				first := g * groupSize
				time.Sleep(time.Until(t0.Add(time.Duration(first) * interval)))
				wg.Go(func() {
					job0 := submit(first) // just before Publish
					jobs := func(yield func(dispatcher.Job) bool) {
						for k := range groupSize {
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
					h, err := d.Publish(e.ctx, fmt.Sprint("op", op, "-", g), jobs)
					if err != nil {
						fail(err)
						return
					}
					if wait {
						res, err := h.Wait(e.ctx)
						if err != nil {
							fail(err)
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
		if firstErr != nil {
			b.Fatal(firstErr)
		}
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			mu.Lock()
			defer mu.Unlock()
			b.Fatalf("%d of %d outcomes seen 30s after the last submission", seen, n)
		}
		mu.Lock()
		all = append(all, samples...)
		mu.Unlock()
		op++
	}

	var start, done, ret, lag []time.Duration
	for _, s := range all {
		if !s.hasRun || s.seen.IsZero() {
			b.Fatalf("a job ran %v, its outcome seen %v", s.hasRun, !s.seen.IsZero())
		}
		start = append(start, s.startLat)
		done = append(done, s.seen.Sub(s.submit))
		ret = append(ret, s.seen.Sub(s.ret))
		lag = append(lag, s.lag)
	}
	reportPercentiles(b, "start", start, 50, 90, 99, 100)
	reportPercentiles(b, "done", done, 50, 90, 99, 100)
	reportPercentiles(b, "ret", ret, 50, 99)
	b.ReportMetric(float64(slices.Max(lag).Microseconds()), "lag-max-µs")
}

// processCPU returns the user and system CPU time of this process so far, from /proc/self/stat
// (Linux; clock ticks of 10ms assumed), or 0 where that is not available.
func processCPU() time.Duration {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return 0
	}
	utime, err1 := strconv.ParseUint(fields[11], 10, 64)
	stime, err2 := strconv.ParseUint(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

func reportPercentiles(b *testing.B, name string, d []time.Duration, ps ...int) {
	slices.Sort(d)
	for _, p := range ps {
		i := min(len(d)-1, max(0, int(math.Ceil(float64(p)/100*float64(len(d))))-1))
		label := fmt.Sprintf("%s-p%d-µs", name, p)
		if p == 100 {
			label = name + "-max-µs"
		}
		b.ReportMetric(float64(d[i].Microseconds()), label)
	}
}

// traceThroughput logs, every weave.trace, what the coordinator and the workers hold, until the
// returned function is called.
func traceThroughput(e *benchEnv, nc *nats.Conn, ws []*worker.Worker, start time.Time) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(*benchTrace)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			st, err := coordinator.QueryStatus(e.ctx, nc, e.ns)
			if err != nil {
				e.tb.Logf("trace: %v", err)
				continue
			}
			out := 0
			for _, p := range st.Pools {
				out += p.Outstanding
			}
			line := fmt.Sprintf("%6.0fms admitted %6d released %6d pending %6d running %4d done %6d groups %3d outstanding %4d |",
				float64(time.Since(start).Microseconds())/1000, st.Totals.Admitted, st.Totals.Released, st.Jobs["pending"], st.Jobs["running"], st.Jobs["done"], len(st.Groups), out)
			for _, w := range ws {
				ws := w.Stats()
				line += fmt.Sprintf(" busy %3d queued %3d run %6d batches %5d pulls %5d reports %5d |", ws.Busy, ws.Queued, ws.JobsRun, ws.Batches, ws.Pulls, ws.ReportBatches)
			}
			e.tb.Log(line)
		}
	})
	return func() { close(done); wg.Wait() }
}
