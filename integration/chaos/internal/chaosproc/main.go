// Command chaosproc is a worker or a producer process for the fault-injection test
// (integration/chaos), built on the public packages worker and dispatcher as any Weave user's
// program would be. Both write what they do to a record file (package record) with unbuffered
// appends, so the test can check, from the processes' own words, what ran and what came out,
// however often they were killed.
//
//	chaosproc worker   -nats URLS -records FILE -id ID [-slots N] [-lease D] [-min-job D] [-max-job D]
//	chaosproc producer -nats URLS -records FILE [-groups N] [-min-jobs N] [-max-jobs N] [-seed N] [-pending N]
//	chaosproc hostile  -nats URLS -records FILE [-every D] [-reports N]
//
// A worker runs until SIGTERM; each job sleeps between -min-job and -max-job and succeeds. A
// producer publishes the workload (record.Workload) group by group, at most -pending groups in
// progress at once, waits for each group's outcome with Handle.Wait, publishes some group IDs a
// second time once they finished (a new incarnation), and exits when all are in. Restarted after
// a SIGKILL, it reads its record file, publishes again the groups it was publishing (the same
// keys: JetStream drops the jobs already stored as duplicates) and waits again for the groups
// whose outcome it had not recorded.
//
// A hostile process is an attacker holding one worker's credentials, of a pool no job is released
// to: it publishes only what those credentials allow, forged reports on its own report subject,
// every -every, each message -reports reports about job IDs guessed near the JOBS stream's last
// sequence (job IDs are sequences), done or failed with the result record.Forged, some with a
// release proof it made up. It records every message the server stored, until SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/integration/chaos/internal/record"
	"github.com/weavejobs/weave/worker"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: chaosproc worker|producer|hostile [flags]")
		os.Exit(2)
	}
	var run func(ctx context.Context, args []string) error
	switch os.Args[1] {
	case "worker":
		run = runWorker
	case "producer":
		run = runProducer
	case "hostile":
		run = runHostile
	default:
		fmt.Fprintf(os.Stderr, "chaosproc: unknown mode %q\n", os.Args[1])
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[2:]); err != nil {
		fmt.Fprintf(os.Stderr, "chaosproc %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

// common are the flags both modes share.
type common struct {
	url       string
	namespace string
	records   string
	replicas  int
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.url, "nats", "", "NATS server URLs, comma-separated")
	fs.StringVar(&c.namespace, "namespace", "weave", "Weave namespace")
	fs.StringVar(&c.records, "records", "", "file to append records to")
	fs.IntVar(&c.replicas, "replicas", 3, "stream replicas, should this process create the streams")
}

// connect connects for as long as the process runs: through node restarts, and waiting for a
// cluster that is not reachable yet.
func (c *common) connect(name string, log zerolog.Logger) (*nats.Conn, error) {
	return nats.Connect(c.url,
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
		nats.ReconnectWait(100*time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn().Err(err).Msg("disconnected")
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info().Str("url", nc.ConnectedUrl()).Msg("reconnected") }),
	)
}

func newLogger(id string) zerolog.Logger {
	cw := zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: "15:04:05.000", NoColor: true}
	return zerolog.New(cw).With().Timestamp().Str("proc", id).Logger()
}

func runWorker(ctx context.Context, args []string) error {
	var (
		c                    common
		id                   string
		slots                int
		lease                time.Duration
		minRun, maxRun       time.Duration
		heartbeat, reportMax time.Duration
	)
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	c.register(fs)
	fs.StringVar(&id, "id", "", "worker ID")
	fs.IntVar(&slots, "slots", 4, "jobs run at once")
	fs.DurationVar(&lease, "lease", 2*time.Second, "how long a batch stays with a silent worker")
	fs.DurationVar(&minRun, "min-job", 10*time.Millisecond, "shortest job")
	fs.DurationVar(&maxRun, "max-job", 50*time.Millisecond, "longest job")
	fs.DurationVar(&heartbeat, "heartbeat", 500*time.Millisecond, "heartbeat interval")
	fs.DurationVar(&reportMax, "report-linger", 0, "worker.Config.ReportLinger (0: adaptive)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := newLogger(id)
	out, err := record.Create(c.records)
	if err != nil {
		return err
	}
	defer out.Close()
	nc, err := c.connect("chaos worker "+id, log)
	if err != nil {
		return err
	}
	defer nc.Close()

	pid := os.Getpid()
	note := func(ev string, j *worker.Job) error {
		key := j.Key
		if key == "" {
			key = record.KeyOf(j.Payload) // a packed group's job
		}
		return out.Write(record.Exec{Event: ev, Job: j.ID, Group: j.Group, Key: key, Attempt: j.Attempt, Worker: id, PID: pid, At: time.Now()})
	}
	handler := worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
		if err := note("start", j); err != nil {
			return nil, err
		}
		t := time.NewTimer(minRun + rand.N(maxRun-minRun+1))
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
		if err := note("end", j); err != nil {
			return nil, err
		}
		return []byte(record.KeyOf(j.Payload)), nil
	})
	w, err := worker.New(nc, worker.Config{
		Namespace:         c.namespace,
		ID:                id,
		Concurrency:       slots,
		Lease:             lease,
		HeartbeatInterval: heartbeat,
		ReportLinger:      reportMax,
		Logger:            log.Level(zerolog.InfoLevel),
	}, handler)
	if err != nil {
		return err
	}
	log.Info().Int("slots", slots).Msg("worker starting")
	return w.Run(ctx)
}

func runProducer(ctx context.Context, args []string) error {
	var (
		c                common
		groups           int
		minJobs, maxJobs int
		seed             uint64
		pending          int
		jobGap           time.Duration
	)
	fs := flag.NewFlagSet("producer", flag.ContinueOnError)
	c.register(fs)
	fs.IntVar(&groups, "groups", 50, "groups to publish")
	fs.IntVar(&minJobs, "min-jobs", 10, "fewest jobs in a group")
	fs.IntVar(&maxJobs, "max-jobs", 90, "most jobs in a group")
	fs.Uint64Var(&seed, "seed", 1, "workload seed")
	fs.IntVar(&pending, "pending", 8, "groups published and not yet finished, at most")
	fs.DurationVar(&jobGap, "job-gap", 0, "pause between two jobs of a group, as a producer that makes its jobs as it goes")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := newLogger("producer")
	// What an earlier run of this producer did, read before this run appends to the file.
	past, err := record.Read[record.Producer](c.records)
	if err != nil {
		return err
	}
	out, err := record.Create(c.records)
	if err != nil {
		return err
	}
	defer out.Close()
	nc, err := c.connect("chaos producer", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	d, err := dispatcher.New(nc, dispatcher.Config{
		Namespace: c.namespace,
		Logger:    log.Level(zerolog.InfoLevel),
	})
	if err != nil {
		return err
	}
	defer d.Close()

	p := &producer{d: d, out: out, log: log, pid: os.Getpid(), jobGap: jobGap, slots: make(chan struct{}, pending),
		published: map[incarnation]bool{}, waited: map[incarnation]bool{}}
	for _, r := range past {
		inc := incarnation{r.Group, r.Incarnation}
		switch {
		case r.Event == record.Published && r.Sealed:
			p.published[inc] = true
		case r.Event == record.Waited && r.Err == "":
			p.waited[inc] = true
		}
	}
	log.Info().Int("published", len(p.published)).Int("waited", len(p.waited)).Msg("producer starting")
	var (
		running sync.WaitGroup
		batch   []record.Group
	)
	workload := record.Workload(seed, groups, minJobs, maxJobs)
	lastBatched := -1 // the last Batched group's index: the batch gathered then goes, full or not
	for i, g := range workload {
		if g.Batched {
			lastBatched = i
		}
	}
	for i, g := range workload {
		if g.Batched {
			if batch = append(batch, g); len(batch) < record.BatchSize && i != lastBatched {
				continue
			}
		}
		if err := p.acquire(ctx); err != nil {
			break
		}
		if g.Batched {
			gs := batch
			batch = nil
			running.Go(func() {
				defer p.release()
				p.batch(ctx, gs)
			})
			continue
		}
		running.Go(func() {
			defer p.release()
			p.group(ctx, g)
		})
	}
	running.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	return out.Write(record.Producer{Event: record.Done, At: time.Now(), PID: p.pid})
}

// producer publishes groups and waits for their outcomes.
type producer struct {
	d      *dispatcher.Dispatcher
	out    *record.Writer
	log    zerolog.Logger
	pid    int
	jobGap time.Duration
	slots  chan struct{} // a token per group being published or waited for

	// What earlier runs recorded; read-only once the groups start.
	published, waited map[incarnation]bool
}

// incarnation names one publication of a group ID: 1 for the first, 2 for the next.
type incarnation struct {
	group string
	n     int
}

// group publishes each incarnation of g in turn (the second once the first has finished) and
// waits for it, skipping what an earlier run of the producer completed.
func (p *producer) group(ctx context.Context, g record.Group) {
	for i, keys := range g.Incarnations() {
		inc := incarnation{g.ID, i + 1}
		switch {
		case p.waited[inc]:
			continue
		case p.published[inc] && inc.n == 1:
			// Published by an earlier run, which died before the outcome was in.
			if !p.wait(ctx, inc, p.d.Attach(g.ID)) {
				return
			}
		case p.published[inc]:
			// Attach reads the group ID's first incarnation still retained: this run has no
			// Handle for a later one.
			_ = p.out.Write(record.Producer{Event: record.Waited, Group: g.ID, Incarnation: inc.n, Skipped: true, At: time.Now(), PID: p.pid})
		default:
			h, err := p.publish(ctx, inc, keys, g)
			if err != nil || !p.wait(ctx, inc, h) {
				return
			}
		}
	}
}

// batch submits the single jobs of gs together (SubmitMany, which packs them) and waits for each.
// Every run submits the whole batch, also the jobs an earlier run stored: packed as before, each
// pack is a duplicate of the one stored then (its dedup ID is its groups'), and its Handles are
// the first ones'. A SubmitMany that fails is repeated likewise.
func (p *producer) batch(ctx context.Context, gs []record.Group) {
	todo := 0
	singles := make([]dispatcher.Single, len(gs))
	for i, g := range gs {
		singles[i] = dispatcher.Single{Group: g.ID, Job: dispatcher.Job{Payload: []byte(g.ID + "/" + g.Keys[0])}}
		if !p.waited[incarnation{g.ID, 1}] {
			todo++
		}
	}
	if todo == 0 {
		return
	}
	var subs []dispatcher.Submitted
	for {
		for _, g := range gs {
			if err := p.out.Write(record.Producer{Event: record.Publishing, Group: g.ID, Incarnation: 1, Jobs: 1, At: time.Now(), PID: p.pid}); err != nil {
				return
			}
		}
		var err error
		subs, err = p.d.SubmitMany(ctx, singles)
		for i, g := range gs {
			r := record.Producer{Event: record.Published, Group: g.ID, Incarnation: 1, Jobs: 1, At: time.Now(), PID: p.pid}
			if i < len(subs) {
				h := subs[i].Handle
				r.Handle, r.Accepted, r.Duplicates, r.Sealed = true, h.Accepted(), h.Duplicates(), true
			} else {
				r.Err = fmt.Sprint(err)
			}
			if werr := p.out.Write(r); werr != nil {
				return
			}
		}
		if err == nil {
			break
		}
		p.log.Warn().Err(err).Str("first", gs[0].ID).Int("stored", len(subs)).Msg("submit batch failed")
		// Not a wait for a condition: a pause before submitting again to a cluster that just
		// failed.
		select {
		case <-time.After(250 * time.Millisecond):
		case <-ctx.Done():
			return
		}
	}
	for i, g := range gs {
		if inc := (incarnation{g.ID, 1}); !p.waited[inc] && !p.wait(ctx, inc, subs[i].Handle) {
			return
		}
	}
}

func (p *producer) acquire(ctx context.Context) error {
	select {
	case p.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *producer) release() { <-p.slots }

// publish publishes g until it is sealed: a Publish that left the group open (no Handle, or the
// seal failed, as while the cluster elects a leader) is repeated with the same keys, which is
// what the dispatcher's documentation tells a producer to do. Jobs it could not publish are
// recorded in the error of the "published" record; the group is sealed without them.
func (p *producer) publish(ctx context.Context, inc incarnation, keys []string, g record.Group) (*dispatcher.Handle, error) {
	packed, single := g.Packed, g.Single
	var opts []dispatcher.GroupOption
	if g.FollowUp && inc.n == 1 {
		// A follow-up on completion, stored with the group: it must run once, after the
		// group's last job, whatever is killed meanwhile.
		f := record.FollowUpID(g.ID)
		opts = append(opts, dispatcher.Then(dispatcher.FollowUp{When: dispatcher.OnCompletion,
			Jobs: []dispatcher.Job{{Key: record.FollowUpKey, Payload: []byte(f + "/" + record.FollowUpKey)}}}))
	}
	jobs := func(yield func(dispatcher.Job) bool) {
		for i, k := range keys {
			if i > 0 && p.jobGap > 0 && !packed {
				time.Sleep(p.jobGap) // making the next job (a packed group's come at once, so they pack)
			}
			j := dispatcher.Job{Key: k, Payload: []byte(inc.group + "/" + k)}
			if packed {
				j.Key = "" // stored in packs, the key only in the payload
			}
			if !yield(j) {
				return
			}
		}
	}
	for {
		if err := p.out.Write(record.Producer{Event: record.Publishing, Group: inc.group, Incarnation: inc.n, Jobs: len(keys), At: time.Now(), PID: p.pid}); err != nil {
			return nil, err
		}
		var h *dispatcher.Handle
		var err error
		if single {
			// One job, submitted alone; submitted again with its key after a crash, it is
			// deduplicated.
			h, _, err = p.d.Submit(ctx, inc.group, dispatcher.Job{Key: keys[0], Payload: []byte(inc.group + "/" + keys[0])})
		} else {
			h, err = p.d.Publish(ctx, inc.group, jobs, opts...)
		}
		r := record.Producer{Event: record.Published, Group: inc.group, Incarnation: inc.n, Jobs: len(keys), Handle: h != nil, At: time.Now(), PID: p.pid}
		if h != nil {
			r.Accepted, r.Duplicates = h.Accepted(), h.Duplicates()
			r.Sealed = !errors.Is(err, dispatcher.ErrNotSealed)
		}
		if err != nil {
			r.Err = err.Error()
			p.log.Warn().Err(err).Str("group", inc.group).Int("incarnation", inc.n).Bool("handle", h != nil).Msg("publish failed")
		}
		if werr := p.out.Write(r); werr != nil {
			return nil, werr
		}
		if r.Sealed {
			return h, nil
		}
		// Not a wait for a condition: a pause before publishing again to a cluster that just
		// failed.
		select {
		case <-time.After(250 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// wait waits for h's group to finish and records its outcome; it reports whether it did (not when
// ctx ended first). A Wait that fails (a node went away under it) is tried again.
func (p *producer) wait(ctx context.Context, inc incarnation, h *dispatcher.Handle) bool {
	for ctx.Err() == nil {
		res, err := h.Wait(ctx)
		r := record.Producer{Event: record.Waited, Group: inc.group, Incarnation: inc.n, At: time.Now(), PID: p.pid}
		if err != nil {
			if ctx.Err() != nil {
				return false
			}
			r.Err = err.Error()
			p.log.Warn().Err(err).Str("group", inc.group).Msg("wait failed; waiting again")
		} else {
			s := res.Summary
			r.Summary = &record.Summary{Jobs: s.Jobs, Done: s.Done, Failed: s.Failed, Canceled: s.Canceled}
			for _, o := range res.Jobs {
				r.Outcomes = append(r.Outcomes, record.Outcome{Job: o.ID, Key: o.Key, State: string(o.State), Attempts: o.Attempts})
			}
		}
		if werr := p.out.Write(r); werr != nil {
			p.log.Error().Err(werr).Msg("recording an outcome failed")
			return false
		}
		if err == nil {
			return true
		}
		// Not a wait for a condition: a pause before asking a cluster that just failed again.
		select {
		case <-time.After(250 * time.Millisecond):
		case <-ctx.Done():
		}
	}
	return false
}
