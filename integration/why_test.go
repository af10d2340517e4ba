package integration_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/internal/testwait"
	"github.com/weavejobs/weave/worker"
)

// TestWhyDoesItWait: a job that has not started says why in JobInfo.Waiting, and its group's
// GroupInfo says how many wait for what: delayed (with its run time), requiring a resource no
// live worker holds, held back by a paused limit, or only waiting for a free slot.
func TestWhyDoesItWait(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.coordinator(coordinator.Config{Prefetch: -1}) // no prefetch: "queued" stays pending behind "busy"
	release := make(chan struct{})
	defer close(release)
	e.worker(worker.Config{ID: "w1", Concurrency: 2}, func(ctx context.Context, j *worker.Job) ([]byte, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil, nil
	})
	e.waitWorkers(1)
	if err := e.d.Pause(e.ctx, dispatcher.LimitGroup, "paused"); err != nil {
		t.Fatal(err)
	}
	// One slot runs "busy"; the other is free when "gpu" is offered, which no worker can run:
	// it is set aside. Then "busy2" takes that slot, and "queued" waits for one.
	runAt := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	h := e.publish("why", slices.Values([]dispatcher.Job{{Key: "busy"}, {Key: "later", RunAt: runAt}, {Key: "gpu", Require: []string{"gpu"}}}))
	testwait.For(t, 30*time.Second, "the gpu job to be set aside", func() bool {
		g, err := e.d.Group(e.ctx, "why")
		return err == nil && g.Unplaceable == 1
	})
	hm := e.publish("more", slices.Values([]dispatcher.Job{{Key: "busy2"}, {Key: "queued"}}))
	hp := e.publish("paused", slices.Values([]dispatcher.Job{{Key: "p"}}))
	wants := []struct {
		h        *dispatcher.Handle
		key      string
		state    dispatcher.State
		waiting  string
		runAt    time.Time
		missing  []string
		heldName string
	}{
		{hm, "queued", dispatcher.StatePending, "waiting for a free slot", time.Time{}, nil, ""},
		{h, "later", dispatcher.StateDelayed, "delayed: it runs at " + runAt.Local().Format("2006-01-02 15:04:05"), runAt, nil, ""},
		{h, "gpu", dispatcher.StatePending, "requires gpu, which no live worker holds", time.Time{}, []string{"gpu"}, ""},
		{hp, "p", dispatcher.StatePending, `paused: the limit on group "paused" is paused`, time.Time{}, nil, "paused"},
	}
	for _, w := range wants {
		var info *dispatcher.JobInfo
		testwait.For(t, 30*time.Second, "job "+w.key+" to say why it waits", func() bool {
			var err error
			info, err = e.d.JobByKey(e.ctx, w.h.GroupID(), w.key)
			return err == nil && info.State == w.state && strings.HasPrefix(info.Waiting, w.waiting)
		})
		if !info.RunAt.Equal(w.runAt) || !slices.Equal(info.Missing, w.missing) || (w.heldName == "") != (info.HeldBy == nil) ||
			info.HeldBy != nil && (info.HeldBy.Name != w.heldName || !info.HeldBy.Paused) {
			t.Errorf("job %s: %+v", w.key, info)
		}
	}
	g, err := e.d.Group(e.ctx, "why")
	if err != nil {
		t.Fatal(err)
	}
	if g.Unplaceable != 1 || !g.NextRunAt.Equal(runAt) || g.Jobs[dispatcher.StateDelayed] != 1 {
		t.Errorf("group why: %d unplaceable (want 1), next run at %v (want %v)", g.Unplaceable, g.NextRunAt, runAt)
	}
}
