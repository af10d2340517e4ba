package integration_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/internal/testwait"
	"github.com/weavejobs/weave/internal/wire"
	"github.com/weavejobs/weave/worker"
)

// The test binary doubles as a coordinator or worker process: with childEnv set ("coordinator"
// or "worker"), TestMain runs runChild.
const childEnv = "WEAVE_TEST_CHILD"

// The child worker's configuration (TestWorkerKill9), with WEAVE_TEST_SLOTS slots and the
// resources listed in WEAVE_TEST_RESOURCES (comma-separated): its handler prints "started <job ID>" on
// stdout, then holds the job until the process dies.
const (
	childWorkerSlots = 4
	childWorkerLease = 2 * time.Second
)

func runChild() int {
	nc, err := nats.Connect(os.Getenv("WEAVE_TEST_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer nc.Close()
	ns := os.Getenv("WEAVE_TEST_NS")
	var run func(context.Context) error
	if os.Getenv(childEnv) == "worker" {
		var resources []string
		if v := os.Getenv("WEAVE_TEST_RESOURCES"); v != "" {
			resources = strings.Split(v, ",")
		}
		slots, err := strconv.Atoi(os.Getenv("WEAVE_TEST_SLOTS"))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		w, err := worker.New(nc, worker.Config{Namespace: ns, ID: "child", Concurrency: slots,
			Resources: resources, Lease: childWorkerLease, HeartbeatInterval: 250 * time.Millisecond},
			worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
				fmt.Printf("started %d\n", j.ID)
				<-ctx.Done()
				return nil, ctx.Err()
			}))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		run = w.Run
	} else {
		c, err := coordinator.New(nc, coordinator.Config{Namespace: ns, LeaseTTL: time.Second, TrimInterval: 100 * time.Millisecond})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		run = c.Run
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// startChildCoordinator runs a coordinator in a subprocess (this test binary), with the extra
// environment variables given ("NAME=value").
func (e *env) startChildCoordinator(env ...string) *exec.Cmd {
	e.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), childEnv+"=coordinator", "WEAVE_TEST_URL="+e.srv.ClientURL(), "WEAVE_TEST_NS="+e.ns), env...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

// TestCoordinatorKill9: killing the coordinator process with SIGKILL mid-run and starting a new
// one loses no job and completes none twice, with keyed jobs (a message each) and with jobs
// published in packs.
func TestCoordinatorKill9(t *testing.T) {
	t.Parallel()
	for _, packed := range []bool{false, true} {
		t.Run(fmt.Sprint("packed=", packed), func(t *testing.T) {
			t.Parallel()
			coordinatorKill9(t, packed)
		})
	}
}

func coordinatorKill9(t *testing.T, packed bool) {
	e := setup(t)
	first := e.startChildCoordinator()
	tr := newTracker()
	var completed atomic.Int64
	e.worker(worker.Config{Concurrency: 8}, func(ctx context.Context, j *worker.Job) ([]byte, error) {
		tr.start("w", j)
		defer tr.end(j)
		select {
		case <-time.After(2 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		completed.Add(1)
		return []byte(fmt.Sprint(j.ID)), nil
	})
	const groups, perGroup = 20, 100
	var hs []*dispatcher.Handle
	for g := range groups {
		js := jobs(perGroup, nil)
		if packed {
			js = unkeyed(perGroup, "", nil)
		}
		hs = append(hs, e.publish(fmt.Sprint("g", g), js))
	}
	testwait.For(t, time.Minute, "a quarter of the jobs to complete", func() bool { return completed.Load() >= groups*perGroup/4 })
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	killedAt := completed.Load()
	e.startChildCoordinator()
	seen := map[uint64]bool{}
	for _, h := range hs {
		res := e.wait(h)
		if res.Summary.Done != perGroup || res.Summary.Failed+res.Summary.Canceled != 0 {
			t.Fatalf("group %s after restart: %+v", h.GroupID(), res.Summary)
		}
		ids := map[uint64]bool{}
		for _, o := range res.Jobs {
			if o.State != dispatcher.StateDone || string(o.Result) != fmt.Sprint(o.ID) {
				t.Fatalf("job %d: %+v", o.ID, o)
			}
			ids[o.ID] = true
			seen[o.ID] = true
		}
		if len(ids) != perGroup {
			t.Fatalf("group %s: %d distinct jobs completed, want %d", h.GroupID(), len(ids), perGroup)
		}
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	dupes := 0
	for id, n := range tr.runs {
		if n > 1 {
			dupes++
		}
		if !seen[id] {
			t.Errorf("job %d ran but has no outcome", id)
		}
	}
	t.Logf("killed after %d completions; %d of %d jobs ran twice (in flight at the kill)", killedAt, dupes, groups*perGroup)
	if dupes > 8*4 {
		t.Errorf("%d jobs ran more than once: more than the attempts that can be in flight at a crash", dupes)
	}
}

// TestCoordinatorLeaseLost: someone else writes the lease key, as a coordinator that took over
// during a partition would. The running coordinator's next renewal fails and Run returns an error
// wrapping ErrLeaseLost; running it again makes it a standby that takes the lease back once the
// other holder's key expires, and it coordinates again.
func TestCoordinatorLeaseLost(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const ttl = time.Second
	c, err := coordinator.New(e.nc, coordinator.Config{Namespace: e.ns, LeaseTTL: ttl, Logger: testLogger("coordinator")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- c.Run(ctx) }()

	js, err := jetstream.New(e.nc)
	if err != nil {
		t.Fatal(err)
	}
	names, _ := wire.NewNames(e.ns)
	var kv jetstream.KeyValue
	testwait.For(t, 30*time.Second, "the coordinator to hold the lease", func() bool {
		if kv == nil {
			if kv, err = js.KeyValue(e.ctx, names.LeaseBucket()); err != nil {
				kv = nil
				return false
			}
		}
		_, err := kv.Get(e.ctx, "coordinator")
		return err == nil
	})
	if _, err := kv.Put(e.ctx, "coordinator", []byte("intruder")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ran:
		if !errors.Is(err, coordinator.ErrLeaseLost) {
			t.Fatalf("Run = %v, want an error wrapping ErrLeaseLost", err)
		}
	case <-e.ctx.Done():
		t.Fatal("Run went on after its lease was taken")
	}

	go func() { ran <- c.Run(ctx) }()
	e.worker(worker.Config{Concurrency: 2}, func(context.Context, *worker.Job) ([]byte, error) { return []byte("ok"), nil })
	h := e.publish("after", jobs(5, nil))
	if res := e.waitFor(h); res.Summary.Done != 5 {
		t.Fatalf("summary %+v after the coordinator took its lease back", res.Summary)
	}
	cancel()
	if err := <-ran; err != nil {
		t.Fatalf("second Run: %v", err)
	}
}

// TestKeyAfterRestart: jobs released before a coordinator restart and finished after it get
// their key in their outcome (WaitKey finds them) and keep their own attempt limit. (The new
// coordinator never learned the keys of jobs released before it started: their outcomes had
// none, and a job's MaxAttempts gave way to the default.)
func TestKeyAfterRestart(t *testing.T) {
	t.Parallel()
	e := setup(t)
	first, err := coordinator.New(e.nc, coordinator.Config{Namespace: e.ns, Logger: testLogger("first")})
	if err != nil {
		t.Fatal(err)
	}
	firstCtx, stopFirst := context.WithCancel(e.ctx)
	defer stopFirst()
	firstDone := make(chan error, 1)
	go func() { firstDone <- first.Run(firstCtx) }()

	started := make(chan string, 2)
	finish := make(chan struct{})
	e.worker(worker.Config{Concurrency: 2}, func(ctx context.Context, j *worker.Job) ([]byte, error) {
		started <- j.Key
		select {
		case <-finish:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if j.Key == "fails" {
			return nil, errors.New("boom")
		}
		return []byte("ok"), nil
	})
	h := e.publish("g", func(yield func(dispatcher.Job) bool) {
		_ = yield(dispatcher.Job{Key: "slow", Payload: []byte("1")}) &&
			yield(dispatcher.Job{Key: "fails", Payload: []byte("2"), MaxAttempts: 1})
	})
	for range 2 {
		select {
		case <-started:
		case <-e.ctx.Done():
			t.Fatal("jobs did not start")
		}
	}
	stopFirst()
	if err := <-firstDone; err != nil {
		t.Fatal(err)
	}
	e.coordinator(coordinator.Config{})
	// Let the jobs finish once the new coordinator has replayed (it answers status then).
	testwait.For(t, 30*time.Second, "the new coordinator to answer status", func() bool {
		_, err := coordinator.QueryStatus(e.ctx, e.nc, e.ns)
		return err == nil
	})
	close(finish)

	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	o, err := h.WaitKey(ctx, "slow")
	if err != nil || o.State != dispatcher.StateDone || o.Key != "slow" {
		t.Fatalf("WaitKey(slow) = %+v, %v", o, err)
	}
	res, err := h.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range res.Jobs {
		if o.Key == "" {
			t.Errorf("job %d has no key in its outcome: %+v", o.ID, o)
		}
		if o.Key == "fails" && (o.State != dispatcher.StateFailed || o.Attempts != 1) {
			t.Errorf("job with MaxAttempts 1: %+v, want failed after 1 attempt", o)
		}
	}
}

// TestRestartOnPurgedStreams: once the latest groups are complete and purged, JOBS no longer
// holds its last message (here it holds only an earlier group's open); a coordinator that starts
// then (after a SIGKILL) must finish replay and coordinate, not wait for that message. It used to
// wait until the next message was published.
func TestRestartOnPurgedStreams(t *testing.T) {
	t.Parallel()
	e := setup(t)
	first := e.startChildCoordinator()
	e.worker(worker.Config{ID: "w", Concurrency: 8}, func(context.Context, *worker.Job) ([]byte, error) { return nil, nil })
	js, err := jetstream.New(e.nc)
	if err != nil {
		t.Fatal(err)
	}
	names, _ := wire.NewNames(e.ns)
	// An open group, never sealed within the test: its open stays in JOBS, before the last message.
	if _, err := js.PublishMsg(e.ctx, &nats.Msg{Subject: names.GroupSubject("open"), Header: wire.GroupControl{Group: "open", Op: wire.OpOpen}.Header()}); err != nil {
		t.Fatal(err)
	}
	e.wait(e.publish("g", jobs(10, nil)))
	testwait.For(t, 30*time.Second, "the complete group to be purged from JOBS", func() bool {
		s, err := js.Stream(e.ctx, names.JobsStream())
		return err == nil && s.CachedInfo().State.Msgs == 1 && s.CachedInfo().State.LastSeq > 1
	})
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	e.startChildCoordinator()
	// Nothing is published until it answers: a new message would end its wait.
	testwait.For(t, 20*time.Second, "the new coordinator to end replay and answer status", func() bool {
		ctx, cancel := context.WithTimeout(e.ctx, time.Second)
		defer cancel()
		_, err := coordinator.QueryStatus(ctx, e.nc, e.ns)
		return err == nil
	})
	if res := e.wait(e.publish("h", jobs(10, nil))); res.Summary.Done != 10 {
		t.Fatalf("a group published after the restart: %+v", res.Summary)
	}
}
