package dispatcher_test

import (
	"context"
	"iter"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/integration/jstest"
	"github.com/weavejobs/weave/internal/config"
	"github.com/weavejobs/weave/internal/topology"
	"github.com/weavejobs/weave/internal/wire"
)

// BenchmarkPublish measures Publish of 128-byte jobs into an embedded server, and, in the same run
// and on the same connection, a reference: the same messages (open, jobs, seal) published by hand
// with jetstream's PublishMsgAsync and the same limit of pending acks, into another namespace of
// the server. It reports both rates and their ratio (dispatcher / reference). One op publishes
// rounds groups of jobsPerGroup jobs through each path, alternating, so that the server's pauses
// (file store flushes) fall on both paths alike.
//
//	go test -run='^$' -bench=Publish -benchtime=5x ./dispatcher/
func BenchmarkPublish(b *testing.B) {
	for _, bc := range []struct {
		name   string
		keyed  bool
		memory bool
	}{
		{"file/no-key", false, false},
		{"file/key", true, false}, // every job has a key: the server also deduplicates
		{"memory/no-key", false, true},
	} {
		b.Run(bc.name, func(b *testing.B) { benchmarkPublish(b, bc.keyed, bc.memory) })
	}
}

const (
	rounds       = 5
	jobsPerGroup = 10_000
)

func benchmarkPublish(b *testing.B, keyed, memory bool) {
	ctx, cancel := context.WithTimeout(b.Context(), 10*time.Minute)
	defer cancel()
	srv := jstest.New(b)
	nc := jstest.NewConn(b, srv.ClientURL())
	streams := config.StreamOptions{MemoryStorage: memory}
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	names, _ := wire.NewNames("bench")
	if _, err := topology.Init(ctx, js, names, streams); err != nil {
		b.Fatal(err)
	}
	d, err := dispatcher.New(nc, dispatcher.Config{Namespace: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	ref := newReference(ctx, b, nc, dispatcher.DefaultMaxPending, streams)
	payload := make([]byte, 128)
	jobs := func(group string) iter.Seq[dispatcher.Job] {
		return func(yield func(dispatcher.Job) bool) {
			for i := range jobsPerGroup {
				job := dispatcher.Job{Payload: payload}
				if keyed {
					job.Key = strconv.Itoa(i)
				}
				if !yield(job) {
					return
				}
			}
		}
	}
	publish := func(group string) time.Duration {
		start := time.Now()
		h, err := d.Publish(ctx, group, jobs(group))
		if err != nil || h.Accepted() != jobsPerGroup {
			b.Fatalf("accepted %d: %v", h.Accepted(), err)
		}
		return time.Since(start)
	}
	reference := func(group string) time.Duration {
		start := time.Now()
		ref.publish(ctx, b, group, jobs(group))
		return time.Since(start)
	}
	// Warm up both paths (stream files, connection buffers) before timing.
	publish("warm-up")
	reference("warm-up")

	var dispatcherTime, referenceTime time.Duration
	groups := 0
	for b.Loop() {
		for range rounds {
			group := "group-" + strconv.Itoa(groups)
			if groups%2 == 0 {
				dispatcherTime += publish(group)
				referenceTime += reference(group)
			} else {
				referenceTime += reference(group)
				dispatcherTime += publish(group)
			}
			groups++
		}
	}
	total := float64(groups * jobsPerGroup)
	b.ReportMetric(total/dispatcherTime.Seconds(), "jobs/s")
	b.ReportMetric(total/referenceTime.Seconds(), "raw-msgs/s")
	b.ReportMetric(referenceTime.Seconds()/dispatcherTime.Seconds(), "ratio")
}

// reference publishes a group the way a careful hand-written producer would, with no validation,
// deduplication accounting or per-job error reporting.
type reference struct {
	js    jetstream.JetStream
	names wire.Names
}

func newReference(ctx context.Context, b *testing.B, nc *nats.Conn, maxPending int, streams config.StreamOptions) *reference {
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(maxPending))
	if err != nil {
		b.Fatal(err)
	}
	names, err := wire.NewNames("reference")
	if err != nil {
		b.Fatal(err)
	}
	if _, err := topology.Init(ctx, js, names, streams); err != nil {
		b.Fatal(err)
	}
	return &reference{js: js, names: names}
}

func (r *reference) publish(ctx context.Context, b *testing.B, group string, jobs iter.Seq[dispatcher.Job]) {
	gtok := wire.GroupToken(group)
	control := func(c wire.GroupControl) {
		if _, err := r.js.PublishMsg(ctx, &nats.Msg{Subject: r.names.GroupSubject(gtok), Header: c.Header()}); err != nil {
			b.Fatal(err)
		}
	}
	control(wire.GroupControl{Group: group, Op: wire.OpOpen})
	subject := r.names.JobSubject(gtok)
	// Wait out a slow server at the pending limit, as Publish does, instead of failing after the
	// default 200ms.
	stall := jetstream.WithStallWait(time.Minute)
	n := 0
	for job := range jobs {
		meta := wire.JobMeta{Group: group, Key: job.Key}
		if _, err := r.js.PublishMsgAsync(&nats.Msg{Subject: subject, Header: meta.Header(), Data: job.Payload}, stall); err != nil {
			b.Fatal(err)
		}
		n++
	}
	select {
	case <-r.js.PublishAsyncComplete():
	case <-ctx.Done():
		b.Fatal(ctx.Err())
	}
	control(wire.GroupControl{Group: group, Op: wire.OpSeal, Count: uint64(n)})
}

// benchNamespace starts an embedded server and creates the streams of namespace "bench" on it.
func benchNamespace(ctx context.Context, b *testing.B) (*nats.Conn, jetstream.JetStream, wire.Names) {
	srv := jstest.New(b)
	nc := jstest.NewConn(b, srv.ClientURL())
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	names, _ := wire.NewNames("bench")
	if _, err := topology.Init(ctx, js, names, config.StreamOptions{}); err != nil {
		b.Fatal(err)
	}
	return nc, js, names
}

// BenchmarkSubmitMany measures SubmitMany of 10,000 single jobs of 128 bytes into an embedded
// server, and, in the same run and on the same connection, a reference: as many single-job
// messages published by hand with PublishMsgAsync and the same limit of pending acks. It reports
// both rates and their ratio (SubmitMany / reference).
//
//	go test -run='^$' -bench=SubmitMany -benchtime=5x ./dispatcher/
func BenchmarkSubmitMany(b *testing.B) {
	ctx, cancel := context.WithTimeout(b.Context(), 10*time.Minute)
	defer cancel()
	nc, _, _ := benchNamespace(ctx, b)
	d, err := dispatcher.New(nc, dispatcher.Config{Namespace: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	ref := newReference(ctx, b, nc, dispatcher.DefaultMaxPending, config.StreamOptions{})
	const n = 10_000
	payload := make([]byte, 128)
	jobs := make([]dispatcher.Single, n)
	for i := range jobs {
		jobs[i].Job.Payload = payload
	}
	submit := func() time.Duration {
		start := time.Now()
		subs, err := d.SubmitMany(ctx, jobs)
		if err != nil || len(subs) != n {
			b.Fatalf("submitted %d: %v", len(subs), err)
		}
		return time.Since(start)
	}
	stall := jetstream.WithStallWait(time.Minute)
	reference := func() time.Duration {
		start := time.Now()
		for i := range n {
			group := "ref-" + strconv.Itoa(i)
			meta := wire.JobMeta{Group: group, Single: true}
			if _, err := ref.js.PublishMsgAsync(&nats.Msg{Subject: ref.names.JobSubject(group), Header: meta.Header(), Data: payload}, stall); err != nil {
				b.Fatal(err)
			}
		}
		select {
		case <-ref.js.PublishAsyncComplete():
		case <-ctx.Done():
			b.Fatal(ctx.Err())
		}
		return time.Since(start)
	}
	submit()
	reference()
	var submitTime, referenceTime time.Duration
	ops := 0
	for b.Loop() {
		if ops%2 == 0 {
			submitTime += submit()
			referenceTime += reference()
		} else {
			referenceTime += reference()
			submitTime += submit()
		}
		ops++
	}
	total := float64(ops * n)
	b.ReportMetric(total/submitTime.Seconds(), "jobs/s")
	b.ReportMetric(total/referenceTime.Seconds(), "raw-msgs/s")
	b.ReportMetric(referenceTime.Seconds()/submitTime.Seconds(), "ratio")
}

// BenchmarkWaiters measures what waiting costs: 10,000 callers each Wait on a group of their own
// (Handles from Attach, the groups running), all at once on one Dispatcher. It reports the
// memory each waiter adds (Go heap and goroutine stacks, the caller's goroutine included), the
// RESULTS consumers while they wait (0: Wait needs none), and how long it takes from the last
// group's summary being recorded to every Wait returning.
//
//	go test -run='^$' -bench=Waiters -benchtime=1x ./dispatcher/
func BenchmarkWaiters(b *testing.B) {
	const n = 10_000
	ctx, cancel := context.WithTimeout(b.Context(), 10*time.Minute)
	defer cancel()
	nc, js, names := benchNamespace(ctx, b)
	for range b.N {
		d, err := dispatcher.New(nc, dispatcher.Config{Namespace: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		var waiting sync.WaitGroup
		waiting.Add(n)
		dispatcher.SetWaitHook(d, waiting.Done)
		before := inUse()
		done := make(chan error, n)
		for i := range n {
			h := d.Attach("waiter-" + strconv.Itoa(i))
			go func() {
				_, err := h.Wait(ctx)
				done <- err
			}()
		}
		waiting.Wait()
		perWaiter := float64(inUse()-before) / n
		info, err := js.Stream(ctx, names.ResultsStream())
		if err != nil {
			b.Fatal(err)
		}
		consumers := info.CachedInfo().State.Consumers
		sum := wire.AppendSummary(nil, wire.GroupSummary{})
		for i := range n {
			if _, err := js.PublishAsync(names.OutcomeSubject(wire.GroupToken("waiter-"+strconv.Itoa(i))), sum); err != nil {
				b.Fatal(err)
			}
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-ctx.Done():
			b.Fatal(ctx.Err())
		}
		start := time.Now()
		for range n {
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(perWaiter, "B/waiter")
		b.ReportMetric(float64(consumers), "consumers")
		b.ReportMetric(time.Since(start).Seconds()*1e3, "ms-to-release-all")
		d.Close()
	}
}

// inUse is the process's Go heap and goroutine stacks in use after a collection.
func inUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse + m.StackInuse
}
