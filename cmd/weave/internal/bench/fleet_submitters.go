package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/cmd/weave/internal/inproc"
	"github.com/weavejobs/weave/dispatcher"
)

// SubmittersResult is what the fleet scenario measured with one count of submitters.
type SubmittersResult struct {
	Submitters int        `json:"submitters"`
	Weave      SingleSide `json:"weave"`
	Raw        SingleSide `json:"raw"`
	// WeaveSeconds runs from the first submission to the last outcome seen (or the give-up).
	WeaveSeconds float64 `json:"weave_s"`
	// Unfinished counts the jobs whose outcome was not seen before the give-up.
	Unfinished int `json:"unfinished"`
	// The CPU per job ÷ the same side's with the first count of submitters.
	WeaveCPUGrowth float64 `json:"weave_cpu_growth"`
	RawCPUGrowth   float64 `json:"raw_cpu_growth"`
	// Error says why the run failed, if it did; what it measured before is kept.
	Error string `json:"error,omitempty"`
}

// outcomeGrace bounds the wait for outcomes after the last submission: long enough for a
// backlog to drain, short enough that a fleet that falls behind for good ends the run.
const outcomeGrace = 2 * time.Minute

// connectParallel bounds the connections opened at once: the server takes them as fast as it
// can, and thousands at once would only time out each other's handshakes.
const connectParallel = 16

// runSubmitters measures n submitters on a deployment of their own: Weave, then raw JetStream.
func runSubmitters(ctx context.Context, env *Env, cfg FleetConfig, n int) (res *SubmittersResult, err error) {
	d, err := env.deploy(ctx, "fleet")
	if err != nil {
		return nil, err
	}
	defer d.closeInto(&err)
	jobs := max(int(float64(cfg.Rate)*cfg.Duration.Seconds()), 1)
	res = &SubmittersResult{Submitters: n}

	wl := newSingleLog(jobs)
	if err := wl.startFleet(d, cfg.SubmitFleet.Workers, cfg.SubmitFleet.Concurrency); err != nil {
		return nil, err
	}
	env.progressf("fleet: %s submitters: connecting", count(n))
	disps := make([]*dispatcher.Dispatcher, n)
	conns := make([]*nats.Conn, n)
	if err := forEach(ctx, n, connectParallel, func(i int) (err error) {
		disps[i], conns[i], err = d.DispatcherConn()
		return err
	}); err != nil {
		return nil, err
	}
	// Each submitter's first Submit and WaitJob, untimed: its checks and subscriptions exist
	// before the measurement, as they do in a producer that has been running.
	if err := forEach(ctx, n, 64, func(i int) error {
		h, id, err := disps[i].Submit(ctx, "", dispatcher.Job{Payload: make([]byte, 8)})
		if err == nil {
			_, err = h.WaitJob(ctx, id)
		}
		return err
	}); err != nil {
		return nil, fmt.Errorf("warm-up: %w", err)
	}
	env.progressf("fleet: %s submitters: %s single jobs at %s jobs/s", count(n), count(jobs), count(cfg.Rate))
	cpu0, t0 := env.cpu(), time.Now()
	if err := submitWeave(ctx, disps, jobs, cfg.Rate, wl); err != nil {
		return nil, err
	}
	res.WeaveSeconds = time.Since(t0).Seconds()
	res.Weave = wl.side()
	res.Weave.CPUPerJob = perJobMicros(env.cpu()-cpu0, jobs)
	res.Unfinished = jobs - wl.seenCount()
	for i := range disps {
		disps[i].Close()
		conns[i].Close()
	}

	rl := newSingleLog(jobs)
	var rawCPU time.Duration
	if err := rawSubmitters(ctx, env, d, n, cfg.SubmitFleet, jobs, cfg.Rate, rl, &rawCPU); err != nil {
		return nil, fmt.Errorf("raw JetStream reference: %w", err)
	}
	res.Raw = rl.side()
	res.Raw.CPUPerJob = perJobMicros(rawCPU, jobs)
	return res, nil
}

// submitWeave submits jobs single jobs open loop at rate, job i through disps[i mod len(disps)],
// each waiting for its outcome, and gives up on the outcomes outcomeGrace after the last
// submission: the jobs not seen by then are counted in l at the wait they had.
func submitWeave(ctx context.Context, disps []*dispatcher.Dispatcher, jobs, rate int, l *singleLog) error {
	waitCtx, stopWaits := context.WithCancel(ctx)
	defer stopWaits()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var submitted atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		openLoop(ctx, jobs, rate, func(i int) {
			p, at := stamp(i)
			l.mu.Lock()
			l.submit[i] = at
			l.mu.Unlock()
			h, id, err := disps[i%len(disps)].Submit(ctx, "", dispatcher.Job{Payload: p})
			if err != nil {
				cancel(fmt.Errorf("submit: %w", err))
				return
			}
			submitted.Add(1)
			if _, err := h.WaitJob(waitCtx, id); err != nil {
				if waitCtx.Err() == nil {
					cancel(fmt.Errorf("wait: %w", err))
				}
				return
			}
			l.sawOutcome(i, time.Now())
		})
	}()
	var giveUp <-chan time.Time
	for giveUp == nil {
		select {
		case <-done:
			return context.Cause(ctx)
		case <-ctx.Done():
			<-done
			return context.Cause(ctx)
		case <-time.After(10 * time.Millisecond):
			if submitted.Load() == int64(jobs) {
				giveUp = time.After(outcomeGrace)
			}
		}
	}
	select {
	case <-done:
		return context.Cause(ctx)
	case <-giveUp:
	}
	l.censor(time.Now())
	stopWaits()
	<-done
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return ctx.Err()
}

// censor counts every job submitted and not seen yet as seen at now: its wait so far, a lower
// bound of its latency.
func (l *singleLog) censor(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range l.n {
		if l.seen[i] == 0 && !l.submit[i].IsZero() {
			l.seen[i] = now.Sub(l.submit[i])
		}
	}
}

// seenCount is how many outcomes were seen.
func (l *singleLog) seenCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.nSeen
}

// rawReplyHeader carries the inbox a raw submitter waits on.
const rawReplyHeader = "Bench-Reply"

// rawSubmitters runs the submitters' reference on deployment d: n connections, each publishing
// its share of the jobs synchronously into a stream and waiting on its own inbox, and responders
// of fleet's shape pulling from the stream and answering each job with a core NATS reply.
func rawSubmitters(ctx context.Context, env *Env, d *deployment, n int, fleet Shape, jobs, rate int, l *singleLog, cpu *time.Duration) error {
	names := d.Names()
	subject, name := names.Namespace()+".raw.req", rawStream(names)
	env.progressf("fleet: %s submitters: raw JetStream", count(n))
	admin, err := d.Connect("reference")
	if err != nil {
		return err
	}
	ajs, err := jetstream.New(admin)
	if err != nil {
		return err
	}
	s, err := ajs.CreateStream(ctx, jetstream.StreamConfig{
		Name: name, Subjects: []string{subject}, Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage, Replicas: d.replicas,
	})
	if err != nil {
		return err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = ajs.DeleteStream(dctx, name)
	}()
	if _, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "raw", AckPolicy: jetstream.AckExplicitPolicy, Replicas: d.replicas}); err != nil {
		return err
	}
	for range fleet.Workers {
		nc, err := d.Connect("reference")
		if err != nil {
			return err
		}
		js, err := jetstream.New(nc)
		if err != nil {
			return err
		}
		cons, err := js.Consumer(ctx, name, "raw")
		if err != nil {
			return err
		}
		var cc jetstream.ConsumeContext
		inproc.Labeled("reference", func() {
			cc, err = cons.Consume(func(m jetstream.Msg) {
				if err := nc.Publish(m.Headers().Get(rawReplyHeader), m.Data()[:12]); err == nil {
					_ = m.Ack()
				}
			}, jetstream.PullMaxMessages(fleet.Concurrency))
		})
		if err != nil {
			return err
		}
		defer cc.Stop()
	}
	type submitter struct {
		js    jetstream.JetStream
		inbox string
	}
	subs := make([]submitter, n)
	if err := forEach(ctx, n, connectParallel, func(i int) error {
		nc, err := d.Connect("reference")
		if err != nil {
			return err
		}
		if subs[i].js, err = jetstream.New(nc); err != nil {
			return err
		}
		subs[i].inbox = nc.NewRespInbox()
		_, err = nc.Subscribe(subs[i].inbox, func(m *nats.Msg) {
			if i, _, ok := unstamp(m.Data); ok {
				l.sawOutcome(i, time.Now())
			}
		})
		if err == nil {
			err = nc.Flush()
		}
		return err
	}); err != nil {
		return err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	cpu0 := env.cpu()
	defer func() { *cpu = env.cpu() - cpu0 }()
	openLoop(ctx, jobs, rate, func(i int) {
		p, at := stamp(i)
		l.mu.Lock()
		l.submit[i] = at
		l.mu.Unlock()
		sub := subs[i%n]
		msg := &nats.Msg{Subject: subject, Header: nats.Header{rawReplyHeader: []string{sub.inbox}}, Data: p}
		if _, err := sub.js.PublishMsg(ctx, msg); err != nil {
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
	case <-time.After(outcomeGrace):
		return fmt.Errorf("%d of %d replies seen %v after the last publish", l.seenCount(), jobs, outcomeGrace)
	}
}

// forEach calls fn(i) for i in [0, n), at most parallel at once, and returns the first error.
func forEach(ctx context.Context, n, parallel int, fn func(i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		wg   sync.WaitGroup
		next atomic.Int64
	)
	for range min(parallel, n) {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}
