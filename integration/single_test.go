package integration_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/internal/testwait"
	"github.com/weavejobs/weave/worker"
)

// TestSubmitSingleJobs: single jobs run and their outcomes reach WaitJob; the same group and key
// submitted again is stored once; a failing single job is retried; a delayed one is canceled
// before it runs; each costs one JOBS message.
func TestSubmitSingleJobs(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.coordinator(coordinator.Config{RetryBase: 10 * time.Millisecond, RetryMax: 20 * time.Millisecond})
	var flaky atomic.Int32
	e.worker(worker.Config{ID: "w", Concurrency: 4}, func(_ context.Context, j *worker.Job) ([]byte, error) {
		if j.Key == "flaky" && flaky.Add(1) == 1 {
			return nil, errors.New("first attempt fails")
		}
		return append([]byte("ran "), j.Payload...), nil
	})
	h, id, err := e.d.Submit(e.ctx, "", dispatcher.Job{Key: "a", Payload: []byte("alone")})
	if err != nil {
		t.Fatal(err)
	}
	out, err := h.WaitJob(e.ctx, id)
	if err != nil || out.State != dispatcher.StateDone || string(out.Result) != "ran alone" || out.Key != "a" {
		t.Fatalf("single job: %+v, %v", out, err)
	}
	if sum, err := h.WaitSummary(e.ctx); err != nil || sum.Jobs != 1 || sum.Done != 1 {
		t.Fatalf("single job's group summary: %+v, %v", sum, err)
	}
	// Its outcome and its summary are one message in RESULTS, which Wait reads too.
	info, err := e.resultsStream().Info(e.ctx, jetstream.WithSubjectFilter(e.ns+".out.>"))
	if err != nil || len(info.State.Subjects) != 1 || info.State.Msgs != 1 {
		t.Fatalf("RESULTS after one single job: %v subjects, %d messages (%v); want one message", info.State.Subjects, info.State.Msgs, err)
	}
	if res, err := h.Wait(e.ctx); err != nil || res.Summary.Done != 1 || len(res.Jobs) != 1 || res.Jobs[0].ID != id || string(res.Jobs[0].Result) != "ran alone" {
		t.Fatalf("Wait on a single job: %+v, %v", res, err)
	}

	// The same group and key again: stored once, the first ID.
	h1, id1, err := e.d.Submit(e.ctx, "dedup", dispatcher.Job{Key: "k", Payload: []byte("1")})
	if err != nil {
		t.Fatal(err)
	}
	h2, id2, err := e.d.Submit(e.ctx, "dedup", dispatcher.Job{Key: "k", Payload: []byte("2")})
	if err != nil || id2 != id1 || h2.Duplicates() != 1 || h1.Accepted() != 1 {
		t.Fatalf("resubmission: ID %d (first %d), duplicates %d, %v", id2, id1, h2.Duplicates(), err)
	}

	// Retried like any job.
	hf, idf, err := e.d.Submit(e.ctx, "", dispatcher.Job{Key: "flaky"})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := hf.WaitJob(e.ctx, idf); err != nil || out.State != dispatcher.StateDone || out.Attempts != 2 {
		t.Fatalf("flaky single job: %+v, %v", out, err)
	}

	// Canceled while it waits for its time.
	hc, idc, err := e.d.Submit(e.ctx, "", dispatcher.Job{Key: "later", Delay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hc.CancelJobs(e.ctx, idc); err != nil {
		t.Fatal(err)
	}
	if out, err := hc.WaitJob(e.ctx, idc); err != nil || out.State != dispatcher.StateCanceled {
		t.Fatalf("canceled single job: %+v, %v", out, err)
	}

	// Bad input gets a clear error and publishes nothing.
	if _, _, err := e.d.Submit(e.ctx, "", dispatcher.Job{MaxAttempts: -1}); !errors.Is(err, dispatcher.ErrInvalidJob) {
		t.Fatalf("invalid single job: %v", err)
	}
	// One JOBS message each (the job IDs are the stream's sequences; a group of one published
	// with Publish takes three): 1, 2 (its duplicate none), 3, 4.
	if id != 1 || id1 != 2 || idf != 3 || idc != 4 {
		t.Fatalf("job IDs %d, %d, %d, %d: want 1, 2, 3, 4, one message per single job", id, id1, idf, idc)
	}

	// A complete single job's message is deleted from JOBS (by its sequence): all four, once
	// the deduplicated one has ended too.
	jobsStream := e.jobsStream()
	if _, err := h1.WaitJob(e.ctx, id1); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "the complete single jobs' messages deleted from JOBS", func() bool {
		for _, seq := range []uint64{id, id1, idf, idc} {
			if _, err := jobsStream.GetMsg(e.ctx, seq); !errors.Is(err, jetstream.ErrMsgNotFound) {
				return false
			}
		}
		return true
	})
	// The cancel's message too: it is the group's, purged with it (it was left behind before).
	testwait.For(t, 10*time.Second, "JOBS empty", func() bool {
		info, err := jobsStream.Info(e.ctx)
		return err == nil && info.State.Msgs == 0
	})
}

// TestSubmitWaitReadsNothing: once the Dispatcher listens for outcomes (after its first wait), a
// job Submit stores is waited for on the subscription alone, without reading RESULTS: a tenth
// of a single job's messages. (A wait that registers after its job's outcome went by reads it,
// rightly; each job here takes 5ms so that the waits come first, and a few late ones are
// allowed: without the fast path all 20 read.) A duplicate submission, whose outcome may be
// stored already, still reads it.
func TestSubmitWaitReadsNothing(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.coordinator(coordinator.Config{})
	e.worker(worker.Config{ID: "w", Concurrency: 4}, func(ctx context.Context, j *worker.Job) ([]byte, error) {
		select {
		case <-time.After(5 * time.Millisecond): // the job's work
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return j.Payload, nil
	})
	submitWait := func(group, key, payload string) dispatcher.JobOutcome {
		t.Helper()
		h, id, err := e.d.Submit(e.ctx, group, dispatcher.Job{Key: key, Payload: []byte(payload)})
		if err != nil {
			t.Fatal(err)
		}
		out, err := h.WaitJob(e.ctx, id)
		if err != nil || out.State != dispatcher.StateDone || string(out.Result) != payload {
			t.Fatalf("job %s: %+v, %v", payload, out, err)
		}
		return out
	}
	submitWait("first", "", "first") // starts the subscription

	var reads atomic.Int64
	sub, err := e.nc.Subscribe("$JS.API.DIRECT.GET."+e.ns+"_RESULTS.>", func(*nats.Msg) { reads.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	sub2, err := e.nc.Subscribe("$JS.API.DIRECT.GET."+e.ns+"_RESULTS", func(*nats.Msg) { reads.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub2.Unsubscribe() }()
	if err := e.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		submitWait("", "", fmt.Sprint("job ", i))
	}
	if err := e.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := reads.Load(); n > 5 {
		t.Fatalf("20 single jobs submitted and waited for read RESULTS %d times, want 0 (at most 5)", n)
	}

	// A duplicate's outcome was stored before: it is read.
	submitWait("dup", "k", "once")
	submitWait("dup", "k", "once")
	testwait.For(t, 10*time.Second, "the duplicate's wait to read RESULTS", func() bool { return reads.Load() > 0 })
}

// TestSubmitMany: many single jobs in one call, each its own group, stored with their IDs in
// order; the same group and key twice is stored once; an invalid job publishes nothing; each job
// is waited on through its Handle.
func TestSubmitMany(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.coordinator(coordinator.Config{})
	e.worker(worker.Config{ID: "w", Concurrency: 8}, func(_ context.Context, j *worker.Job) ([]byte, error) {
		return append([]byte("ran "), j.Payload...), nil
	})

	bad := []dispatcher.Single{{Job: dispatcher.Job{Key: "fine"}}, {Job: dispatcher.Job{MaxAttempts: -1}}}
	if subs, err := e.d.SubmitMany(e.ctx, bad); !errors.Is(err, dispatcher.ErrInvalidJob) || subs != nil {
		t.Fatalf("SubmitMany with an invalid job: %v, %v; want ErrInvalidJob and nothing", subs, err)
	}
	if info, err := e.jobsStream().Info(e.ctx); err != nil || info.State.Msgs != 0 {
		t.Fatalf("JOBS after a refused SubmitMany: %v messages, %v; want none", info.State.Msgs, err)
	}

	const n = 500
	jobs := make([]dispatcher.Single, n)
	for i := range jobs {
		jobs[i].Job.Payload = []byte(fmt.Sprint(i))
		if i%5 == 0 {
			jobs[i].Group = fmt.Sprint("many-", i)
			jobs[i].Job.Key = "k"
		}
	}
	jobs[n-1] = jobs[0] // the same group and key again
	subs, err := e.d.SubmitMany(e.ctx, jobs)
	if err != nil || len(subs) != n {
		t.Fatalf("SubmitMany: %d submitted, %v", len(subs), err)
	}
	ids := map[uint64]bool{}
	for i, s := range subs[:n-1] {
		if ids[s.ID] || s.Handle.Accepted() != 1 {
			t.Fatalf("job %d: ID %d seen before or not accepted (%d)", i, s.ID, s.Handle.Accepted())
		}
		ids[s.ID] = true
		if jobs[i].Group != "" && s.Handle.GroupID() != jobs[i].Group {
			t.Fatalf("job %d: group %q, want %q", i, s.Handle.GroupID(), jobs[i].Group)
		}
	}
	if last := subs[n-1]; last.ID != subs[0].ID || last.Handle.Duplicates() != 1 {
		t.Fatalf("the same group and key again: ID %d (first %d), duplicates %d", last.ID, subs[0].ID, last.Handle.Duplicates())
	}
	for i, s := range subs {
		out, err := s.Handle.WaitJob(e.ctx, s.ID)
		if want := fmt.Sprint("ran ", i%(n-1)); err != nil || out.State != dispatcher.StateDone || string(out.Result) != want {
			t.Fatalf("job %d: %+v, %v; want done with %q", i, out, err, want)
		}
	}
}
