//go:build linux

package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/integration/chaos/internal/record"
	"github.com/weavejobs/weave/internal/testwait"
	"github.com/weavejobs/weave/internal/wire"
)

// config sizes a run. shortForm runs in `go test ./...`; longForm with WEAVE_CHAOS=long (make chaos).
type config struct {
	name string

	groups, minJobs, maxJobs int           // the workload (record.Workload)
	jobGap                   time.Duration // the producer's pause between jobs: it is mid-publish most of the time
	pending                  int           // groups the producer has published and not seen finish, at most

	workers, slots int
	minJob, maxJob time.Duration // each job's run time, uniform
	workerLease    time.Duration // worker.Config.Lease: the work consumer's AckWait
	leaseTTL       time.Duration // the coordinator lease's TTL
	rounds         int           // rounds of faults
	faults         []string      // a round's faults in order: all five unless WEAVE_CHAOS_FAULTS picks
	progress       int           // executions started between two faults: the load they hit
	stopFor        time.Duration // how long a SIGSTOPped worker stays stopped
	stall          time.Duration // no progress for this long after a fault fails the run
	drain          time.Duration // after the last fault, how long every group may take to finish
	deadline       time.Duration // the whole run, from the cluster's start to the report
}

var shortForm = config{
	name:   "short",
	groups: 140, minJobs: 10, maxJobs: 90, jobGap: time.Millisecond, pending: 12,
	workers: 3, slots: 4, minJob: 5 * time.Millisecond, maxJob: 45 * time.Millisecond,
	workerLease: 2 * time.Second, leaseTTL: 3 * time.Second,
	rounds: 2, progress: 300, stopFor: 4 * time.Second,
	stall: 90 * time.Second, drain: 120 * time.Second, deadline: 300 * time.Second,
}

var longForm = config{
	name:   "long",
	groups: 1200, minJobs: 10, maxJobs: 90, jobGap: time.Millisecond, pending: 16,
	workers: 4, slots: 4, minJob: 5 * time.Millisecond, maxJob: 45 * time.Millisecond,
	workerLease: 2 * time.Second, leaseTTL: 3 * time.Second,
	rounds: 8, progress: 1500, stopFor: 4 * time.Second,
	stall: 90 * time.Second, drain: 120 * time.Second, deadline: 25 * time.Minute,
}

// namespace is the Weave namespace of the run.
const namespace = "chaos"

// TestChaos runs Weave across real processes on a 3-node JetStream cluster and injects faults
// under load, round after round: SIGKILL of the active coordinator, of a worker, of the NATS node
// that leads the streams and of the producer mid-publish, and SIGSTOP of a worker past its lease.
// Then it checks, from the handlers' own records and the outcomes stored, that no job was lost or
// ended twice, that work ran again only where a fault interrupted it, and that every group
// finished; it prints a report either way. The package documentation says how and why.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("the fault-injection test takes minutes; run it without -short")
	}
	if raceEnabled {
		t.Skip("the race detector would watch only this harness, not the processes under test: run without -race")
	}
	cfg := shortForm
	if os.Getenv("WEAVE_CHAOS") == "long" {
		cfg = longForm
	}
	cfg.faults = allFaults
	if v := os.Getenv("WEAVE_CHAOS_FAULTS"); v != "" {
		cfg.faults = nil
		for _, name := range strings.Split(v, ",") {
			kind, ok := faultNames[strings.TrimSpace(name)]
			if !ok {
				t.Fatalf("WEAVE_CHAOS_FAULTS: unknown fault %q (want some of coordinator,worker,node,producer,stop)", name)
			}
			cfg.faults = append(cfg.faults, kind)
		}
	}
	dir := os.Getenv("WEAVE_CHAOS_DIR")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The build is not under the run's deadline: with a cold build cache it takes minutes.
	bin := build(t.Context(), t, filepath.Join(dir, "bin"))
	ctx, cancel := context.WithTimeout(t.Context(), cfg.deadline)
	defer cancel()

	r := setup(ctx, t, cfg, dir, bin)
	t.Logf("chaos %s form: %d groups, %d jobs; %d workers × %d slots; %d rounds; logs and records in %s",
		cfg.name, len(r.workload), r.jobs(), cfg.workers, cfg.slots, cfg.rounds, r.dir)

	r.injectFaults(ctx)
	r.drain(ctx)
	r.stopHostile(ctx)
	rep := r.analyse(ctx)
	t.Log("\n" + rep.String())
	for _, c := range rep.checks {
		if !c.ok {
			t.Errorf("check failed: %s: %s", c.name, c.detail)
		}
	}
	if t.Failed() {
		t.Logf("the processes' logs and records: %s (set WEAVE_CHAOS_DIR to keep them)", r.dir)
	}
}

// run is one chaos run: the cluster, the processes, and what happened to them.
type run struct {
	t        *testing.T
	cfg      config
	dir      string
	start    time.Time
	workload []record.Group
	names    wire.Names

	procs    *procs
	cluster  *cluster
	coords   []*proc
	workers  []*proc
	producer *proc
	hostile  *proc // a worker of another pool forging reports about guessed jobs, throughout (hostile_test.go)

	producerTail *tail // the producer's records, as far as killProducer has read them

	nc  *nats.Conn
	js  jetstream.JetStream
	mon *monitor

	faults []*fault // in the order injected
	stalls []string // progress that did not come: the run stalled
}

// fault is one fault injected.
type fault struct {
	kind     string // see the fault* constants
	target   string
	at, end  time.Time // injected; ended (the process restarted and, for a node, caught up; SIGCONT)
	affected []string  // workers whose executions in flight at the fault may run again: the bound
	// window extends "at the fault" for the bound: while a node is down a worker may be unable to
	// extend its batches' lease, so what it runs until the lease has run out may run again.
	window   time.Duration
	inFlight int // executions in flight on the affected workers at the fault (worked out at the end)
	takeover time.Duration
	election time.Duration
	pause    time.Duration // the longest time without an execution starting, until the next fault
	note     string
}

const (
	faultCoordinator = "SIGKILL active coordinator"
	faultWorker      = "SIGKILL worker"
	faultNode        = "SIGKILL stream-leader node"
	faultProducer    = "SIGKILL producer mid-publish"
	faultStop        = "SIGSTOP worker past lease"
)

// allFaults is a round's faults, in order.
var allFaults = []string{faultCoordinator, faultWorker, faultNode, faultProducer, faultStop}

// faultNames are the faults' names in WEAVE_CHAOS_FAULTS.
var faultNames = map[string]string{
	"coordinator": faultCoordinator,
	"worker":      faultWorker,
	"node":        faultNode,
	"producer":    faultProducer,
	"stop":        faultStop,
}

// setup starts the cluster and the processes, and the monitor that watches them.
func setup(ctx context.Context, t *testing.T, cfg config, dir string, bin binaries) *run {
	names, err := wire.NewNames(namespace)
	if err != nil {
		t.Fatal(err)
	}
	r := &run{t: t, cfg: cfg, dir: dir, names: names, procs: &procs{},
		workload: record.Workload(1, cfg.groups, cfg.minJobs, cfg.maxJobs)}
	t.Cleanup(r.procs.killAll) // whatever happens, no process outlives the test

	r.cluster, err = startCluster(ctx, r.procs, bin.natsServer, dir, 3)
	if err != nil {
		t.Fatal(err)
	}
	r.nc, err = r.cluster.connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.nc.Close)
	r.js, err = jetstream.New(r.nc)
	if err != nil {
		t.Fatal(err)
	}

	urls := r.cluster.urls()
	for i := range 2 {
		p := newProc(fmt.Sprintf("coordinator-%d", i+1), dir, bin.weave, "coordinator",
			"--nats", urls, "--namespace", namespace, "--replicas", "3",
			"--lease-ttl", cfg.leaseTTL.String(), "--max-attempts", "50",
			"--heartbeat-misses", "3", "--log-level", "info")
		p.supervised = true
		r.coords = append(r.coords, r.procs.add(p))
	}
	var workerFiles []string
	for i := range cfg.workers {
		id := fmt.Sprintf("w%d", i+1)
		file := filepath.Join(dir, "records-"+id+".jsonl")
		workerFiles = append(workerFiles, file)
		p := newProc("worker-"+id, dir, bin.chaosproc, "worker", "--nats", urls, "--namespace", namespace,
			"--records", file, "--id", id, "--slots", strconv.Itoa(cfg.slots), "--lease", cfg.workerLease.String(),
			"--min-job", cfg.minJob.String(), "--max-job", cfg.maxJob.String(), "--heartbeat", "500ms")
		p.supervised = true
		r.workers = append(r.workers, r.procs.add(p))
	}
	r.producer = r.procs.add(newProc("producer", dir, bin.chaosproc, "producer", "--nats", urls, "--namespace", namespace,
		"--records", r.producerFile(), "--groups", strconv.Itoa(cfg.groups),
		"--min-jobs", strconv.Itoa(cfg.minJobs), "--max-jobs", strconv.Itoa(cfg.maxJobs),
		"--pending", strconv.Itoa(cfg.pending), "--job-gap", cfg.jobGap.String()))
	r.producer.supervised = true
	r.producerTail = &tail{path: r.producerFile()}
	r.hostile = r.procs.add(newProc("hostile", dir, bin.chaosproc, "hostile", "--nats", urls, "--namespace", namespace,
		"--records", r.hostileFile(), "--every", hostileEvery.String()))
	r.hostile.supervised = true

	r.mon = newMonitor(r.nc, names.StatusSubject(), workerFiles)
	monCtx, stopMon := context.WithCancel(context.Background())
	monDone := make(chan struct{})
	go func() { defer close(monDone); r.mon.run(monCtx) }()
	t.Cleanup(func() { stopMon(); <-monDone })

	// The first coordinator creates the streams at 3 replicas and takes the lease; the second
	// stands by. Workers and producer start once a coordinator answers.
	r.start = time.Now()
	if err := r.coords[0].start(); err != nil {
		t.Fatal(err)
	}
	answered := func() (string, error) {
		if r.mon.lastEpoch() != 0 {
			return "", nil
		}
		return "the first coordinator to answer status", nil
	}
	if err := testwait.Until(ctx, 50*time.Millisecond, answered); err != nil {
		t.Fatalf("%v (see %s)", err, r.coords[0].log)
	}
	for _, p := range append([]*proc{r.coords[1], r.producer, r.hostile}, r.workers...) {
		if err := p.start(); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

func (r *run) producerFile() string { return filepath.Join(r.dir, "records-producer.jsonl") }

func (r *run) jobs() int {
	n := 0
	for _, g := range r.workload {
		n += len(g.Keys) + len(g.Again)
	}
	return n
}

func (r *run) incarnations() int {
	n := 0
	for _, g := range r.workload {
		n += len(g.Incarnations())
	}
	return n
}

// streams are the streams whose leaders a node kill targets.
func (r *run) streams() []string {
	return []string{r.names.JobsStream(), r.names.WorkStream(), r.names.EventsStream(), r.names.ResultsStream(), "KV_" + r.names.LeaseBucket()}
}

// injectFaults runs the rounds. Each fault waits first until cfg.progress more executions have
// started, so every fault hits a working system; a wait that runs out is a stall, and the rounds
// stop there (the checks will say what was lost).
func (r *run) injectFaults(ctx context.Context) {
	kinds := r.cfg.faults
	for round := range r.cfg.rounds {
		for i, kind := range kinds {
			switch r.awaitProgress(ctx, fmt.Sprintf("before %s (round %d)", kind, round+1)) {
			case stalled:
				return
			case outOfWork:
				r.t.Logf("no work left before round %d's %s: the rounds end early", round+1, kind)
				return
			}
			f := &fault{kind: kind, at: time.Now()}
			worker := r.workers[(round*len(kinds)+i)%len(r.workers)]
			var err error
			switch kind {
			case faultCoordinator:
				err = r.killCoordinator(ctx, f)
			case faultWorker:
				err = r.killWorker(ctx, f, worker)
			case faultNode:
				err = r.killNode(ctx, f)
			case faultProducer:
				err = r.killProducer(ctx, f)
			case faultStop:
				err = r.stopWorker(ctx, f)
			}
			r.faults = append(r.faults, f)
			r.t.Logf("%6.1fs %s %s: %s", f.at.Sub(r.start).Seconds(), f.kind, f.target, f.note)
			if err != nil {
				r.stalls = append(r.stalls, fmt.Sprintf("%s %s: %v", f.kind, f.target, err))
				return
			}
		}
	}
}

// progress is what awaitProgress saw.
type progress int

const (
	progressed progress = iota
	outOfWork           // the producer finished, or the coordinator had no job left to run for idleLimit
	stalled             // neither within cfg.stall
)

// idleLimit is how long the coordinator must report no job pending, running or waiting for a
// retry before the run counts as out of work rather than stalled.
const idleLimit = 5 * time.Second

// awaitProgress waits until cfg.progress more executions have started. A wait that sees no work
// left ends early; one that runs past cfg.stall is recorded as a stall.
func (r *run) awaitProgress(ctx context.Context, when string) progress {
	from := r.mon.startCount()
	sctx, cancel := context.WithTimeout(ctx, r.cfg.stall)
	defer cancel()
	result := progressed
	err := testwait.Until(sctx, recordsEvery, func() (string, error) {
		if r.mon.startCount() >= from+r.cfg.progress {
			return "", nil
		}
		if r.producer.finished() || r.mon.idleFor(idleLimit) {
			result = outOfWork
			return "", nil
		}
		return "executions to start", nil
	})
	if err != nil {
		r.stalls = append(r.stalls, fmt.Sprintf("%s: %d of %d executions started within %v",
			when, r.mon.startCount()-from, r.cfg.progress, r.cfg.stall))
		return stalled
	}
	return result
}

// allWorkers is every worker's ID: the executions a coordinator or node fault can interrupt.
func (r *run) allWorkers() []string {
	ids := make([]string, len(r.workers))
	for i := range r.workers {
		ids[i] = fmt.Sprintf("w%d", i+1)
	}
	return ids
}

// activeCoordinator returns the coordinator process holding the lease: the running one whose
// log says it acquired the epoch the status answers with. (The lease's value names the holder
// only until its first renewal.)
func (r *run) activeCoordinator() (*proc, error) {
	epoch := r.mon.lastEpoch()
	if epoch == 0 {
		return nil, errors.New("no coordinator has answered status")
	}
	for _, c := range r.coords {
		if c.running() && acquiredEpoch(c.log) == epoch {
			return c, nil
		}
	}
	return nil, fmt.Errorf("no running coordinator logged taking epoch %d", epoch)
}

// acquiredLine matches the coordinator's log line for taking the lease.
var acquiredLine = regexp.MustCompile(`coordinator lease acquired .*epoch=(\d+)`)

// acquiredEpoch returns the epoch a coordinator's current run logged taking, 0 if none.
func acquiredEpoch(log string) uint64 {
	b, err := os.ReadFile(log)
	if err != nil {
		return 0
	}
	if i := bytes.LastIndex(b, []byte(startMarker)); i >= 0 {
		b = b[i:] // the current run
	}
	var epoch uint64
	for _, m := range acquiredLine.FindAllSubmatch(b, -1) {
		epoch, _ = strconv.ParseUint(string(m[1]), 10, 64)
	}
	return epoch
}

// killCoordinator kills the active coordinator, waits for the standby to release work (the
// takeover), then starts the killed one again: it becomes the standby.
func (r *run) killCoordinator(ctx context.Context, f *fault) error {
	active, err := r.activeCoordinator()
	if err != nil {
		f.note = "no active coordinator: " + err.Error()
		return err
	}
	f.target, f.affected = active.name, r.allWorkers()
	epoch := r.mon.lastEpoch()
	f.at = time.Now()
	if err := active.kill(ctx); err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, r.cfg.stall)
	defer cancel()
	var took statusSample
	err = testwait.Until(sctx, statusEvery, func() (string, error) {
		var ok bool
		if took, ok = r.mon.releasedSince(f.at, epoch); ok {
			return "", nil
		}
		return "a coordinator to release work", nil
	})
	if err == nil {
		f.takeover = took.at.Sub(f.at)
		f.note = fmt.Sprintf("epoch %d → %d, releasing after %v", epoch, took.epoch, f.takeover.Round(time.Millisecond))
	} else {
		f.note = fmt.Sprintf("no coordinator released work within %v", r.cfg.stall)
	}
	f.end = time.Now()
	if serr := active.start(); serr != nil {
		return serr
	}
	if err != nil {
		return fmt.Errorf("no takeover within %v", r.cfg.stall)
	}
	return nil
}

// killWorker kills a worker and starts it again at once, with the same ID.
func (r *run) killWorker(ctx context.Context, f *fault, w *proc) error {
	f.target, f.affected = w.name, []string{strings.TrimPrefix(w.name, "worker-")}
	f.at = time.Now()
	if err := w.kill(ctx); err != nil {
		return err
	}
	f.note = "restarted at once with the same ID"
	f.end = time.Now()
	return w.start()
}

// killNode kills the node that leads the most of Weave's streams, waits until every stream has a
// leader again (the election) and work goes on without the node, then restarts it with its store
// and waits until it has caught up.
func (r *run) killNode(ctx context.Context, f *fault) error {
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	nd, before, err := r.cluster.leaderOfStreams(lctx, r.js, r.streams())
	cancel()
	if err != nil {
		f.note = err.Error()
		return err
	}
	f.target, f.affected, f.window = nd.Name, r.allWorkers(), r.cfg.workerLease
	f.at = time.Now()
	if err := nd.kill(ctx); err != nil {
		return err
	}
	led := 0
	for _, l := range before {
		if l == nd.Name {
			led++
		}
	}
	sctx, cancel := context.WithTimeout(ctx, r.cfg.stall)
	defer cancel()
	err = testwait.Until(sctx, 50*time.Millisecond, func() (string, error) {
		if len(streamLeaders(sctx, r.js, r.streams())) == len(r.streams()) {
			return "", nil
		}
		return "every stream to have a leader", nil
	})
	if err != nil {
		f.note = fmt.Sprintf("led %d of %d streams; not every stream had a leader again within %v", led, len(before), r.cfg.stall)
	} else {
		f.election = time.Since(f.at)
		f.note = fmt.Sprintf("led %d of %d streams; all led again after %v", led, len(before), f.election.Round(time.Millisecond))
		// Work must go on with two nodes, not only once the third is back.
		if r.awaitProgress(ctx, fmt.Sprintf("with %s down", nd.Name)) == stalled {
			f.note += "; no progress on two nodes"
		}
	}
	if serr := nd.start(); serr != nil {
		return serr
	}
	hctx, cancel := context.WithTimeout(ctx, r.cfg.stall)
	defer cancel()
	if herr := nd.WaitHealthy(hctx); herr != nil {
		f.note += "; " + herr.Error()
	}
	f.end = time.Now()
	if err != nil {
		return fmt.Errorf("streams without a leader for %v", r.cfg.stall)
	}
	return nil
}

// killProducer kills the producer while it is publishing a group (its last record is
// "publishing"), then starts it again: it resumes that group.
func (r *run) killProducer(ctx context.Context, f *fault) error {
	f.target = "producer"
	sctx, cancel := context.WithTimeout(ctx, r.cfg.stall)
	defer cancel()
	// Follow the producer's records from where the last such wait left off: publishing is the
	// last thing it recorded.
	var last record.Producer
	err := testwait.Until(sctx, time.Millisecond, func() (string, error) {
		for _, line := range r.producerTail.lines() {
			last = record.Producer{}
			_ = json.Unmarshal(line, &last) // each line is written whole (record.Writer)
		}
		if last.Event == record.Publishing {
			return "", nil
		}
		return "the producer to publish", nil
	})
	if err != nil {
		f.note = "the producer was never seen publishing"
		return nil // not a stall of Weave: the producer may be done or waiting
	}
	f.at = time.Now()
	if err := r.producer.kill(ctx); err != nil {
		return err
	}
	f.note = "killed while publishing " + last.Group
	f.end = time.Now()
	return r.producer.start()
}

// stopWorker stops the worker with the most executions in flight for longer than its lease, so
// its batches go to other workers, then lets it go on.
func (r *run) stopWorker(ctx context.Context, f *fault) error {
	busiest := r.workers[0]
	counts := r.mon.inFlight(time.Now())
	for _, w := range r.workers {
		if counts[strings.TrimPrefix(w.name, "worker-")] > counts[strings.TrimPrefix(busiest.name, "worker-")] {
			busiest = w
		}
	}
	f.target, f.affected = busiest.name, []string{strings.TrimPrefix(busiest.name, "worker-")}
	f.at = time.Now()
	if _, err := busiest.signal(syscall.SIGSTOP); err != nil {
		return err
	}
	// The fault itself: the worker stays stopped past its lease.
	select {
	case <-time.After(r.cfg.stopFor):
	case <-ctx.Done():
	}
	f.end = time.Now()
	f.note = fmt.Sprintf("stopped for %v, lease %v", r.cfg.stopFor, r.cfg.workerLease)
	_, err := busiest.signal(syscall.SIGCONT)
	return err
}
