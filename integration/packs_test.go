package integration_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/internal/wire"
	"github.com/weavejobs/weave/worker"
)

// unkeyed yields n jobs without keys, payloads "<prefix><i>": a Publish packs them.
func unkeyed(n int, prefix string, mod func(i int, j *dispatcher.Job)) iter.Seq[dispatcher.Job] {
	return func(yield func(dispatcher.Job) bool) {
		for i := range n {
			j := dispatcher.Job{Payload: []byte(fmt.Sprint(prefix, i))}
			if mod != nil {
				mod(i, &j)
			}
			if !yield(j) {
				return
			}
		}
	}
}

// TestPackedGroups runs groups published in packs through everything a job goes through: a
// backlog published before the coordinator starts, released past a payload cache too small to
// hold it (so releases read packs back), resources, failures, inspection and WaitJob by a packed
// ID, and a redrive of failed packed jobs, which run again in messages of their own.
func TestPackedGroups(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const groups, perGroup = 3, 300
	var hs []*dispatcher.Handle
	for g := range groups {
		hs = append(hs, e.publish(fmt.Sprint("packed-", g), unkeyed(perGroup, "p", func(i int, j *dispatcher.Job) {
			switch {
			case i%97 == 5:
				j.Payload, j.MaxAttempts = []byte(fmt.Sprint("fail", i)), 1
			case i%10 == 3:
				j.Require = []string{"r"}
			}
		})))
	}
	jobsStream := e.jobsStream()
	info, err := jobsStream.Info(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	// 900 jobs and 6 control messages: packs of up to 32 jobs take far fewer messages.
	if info.State.Msgs >= groups*perGroup/4 {
		t.Fatalf("JOBS holds %d messages for %d jobs: not packed", info.State.Msgs, groups*perGroup)
	}

	var failing atomic.Bool
	failing.Store(true)
	handler := func(ctx context.Context, j *worker.Job) ([]byte, error) {
		if failing.Load() && strings.HasPrefix(string(j.Payload), "fail") {
			return nil, worker.Permanent(errors.New("told to fail"))
		}
		return j.Payload, nil
	}
	e.coordinator(coordinator.Config{PayloadCacheBytes: 4 << 10})
	e.worker(worker.Config{ID: "plain", Concurrency: 4}, handler)
	e.worker(worker.Config{ID: "holder", Concurrency: 4, Resources: []string{"r"}}, handler)

	var packedID uint64
	failedIDs := map[string][]uint64{}
	for g, h := range hs {
		res := e.wait(h)
		fails := 0
		for i := range perGroup {
			if i%97 == 5 {
				fails++
			}
		}
		if res.Summary != (dispatcher.Summary{Jobs: perGroup, Done: perGroup - fails, Failed: fails}) {
			t.Fatalf("group %d: %+v", g, res.Summary)
		}
		ids := map[uint64]bool{}
		var payloads []string
		for _, o := range res.Jobs {
			if ids[o.ID] || o.ID < h.FirstID() || o.ID > h.LastID() {
				t.Fatalf("group %d: job %d twice or outside the Handle's %d..%d", g, o.ID, h.FirstID(), h.LastID())
			}
			ids[o.ID] = true
			switch o.State {
			case dispatcher.StateDone:
				payloads = append(payloads, string(o.Result))
			case dispatcher.StateFailed:
				failedIDs[h.GroupID()] = append(failedIDs[h.GroupID()], o.ID)
			}
			if wire.JobIndex(o.ID) > 0 && o.State == dispatcher.StateDone {
				packedID = o.ID
			}
		}
		slices.Sort(payloads)
		if len(slices.Compact(payloads)) != perGroup-fails {
			t.Fatalf("group %d: %d distinct results, want %d", g, len(payloads), perGroup-fails)
		}
	}
	if packedID == 0 {
		t.Fatal("no done job stored in a pack")
	}

	info2, err := e.d.Job(e.ctx, packedID)
	if err != nil || info2.State != dispatcher.StateDone || !strings.HasPrefix(info2.Group, "packed-") {
		t.Fatalf("Job(%d) = %+v, %v", packedID, info2, err)
	}
	o, err := e.d.Attach(info2.Group).WaitJob(e.ctx, packedID)
	if err != nil || o.ID != packedID || o.State != dispatcher.StateDone {
		t.Fatalf("WaitJob(%d) = %+v, %v", packedID, o, err)
	}

	failing.Store(false)
	for group, ids := range failedIDs {
		h, err := e.d.Redrive(e.ctx, group, ids...)
		if err != nil || h.Accepted() != len(ids) {
			t.Fatalf("redrive of %s's %d failed packed jobs: %v, %v", group, len(ids), h, err)
		}
		res := e.waitFor(h)
		if res.Summary.Done != len(ids) {
			t.Fatalf("redrive of %s: %+v", group, res.Summary)
		}
		for _, o := range res.Jobs {
			if !strings.HasPrefix(string(o.Result), "fail") || wire.JobIndex(o.ID) != 0 {
				t.Fatalf("redriven job %+v: want its payload back, in a message of its own", o)
			}
		}
	}
}
