package integration_test

import (
	"context"
	"fmt"
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

// TestStreamsShrinkBack: once groups have finished and their retention has passed, every stream
// holds (almost) nothing again: no unbounded growth. One group has a failed job, so its job
// messages are kept until the retention passes rather than purged at once.
func TestStreamsShrinkBack(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const retention = 500 * time.Millisecond
	e.coordinator(coordinator.Config{
		TrimInterval: 100 * time.Millisecond, MaxAttempts: 2, RetryBase: time.Millisecond,
		Streams: coordinator.StreamOptions{ResultRetention: retention},
	})
	e.worker(worker.Config{Concurrency: 4}, func(ctx context.Context, j *worker.Job) ([]byte, error) {
		if j.Key == "k13" && j.Group == "g2" {
			return nil, fmt.Errorf("poison")
		}
		return []byte("ok"), nil
	})
	var hs []*dispatcher.Handle
	for g := range 5 {
		hs = append(hs, e.publish(fmt.Sprint("g", g), jobs(40, nil)))
	}
	for _, h := range hs {
		sum, err := h.WaitSummary(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if h.GroupID() == "g2" && sum.Failed != 1 {
			t.Fatalf("g2: %+v, want one failed job", sum)
		}
	}
	js, err := jetstream.New(e.nc)
	if err != nil {
		t.Fatal(err)
	}
	// A job for a finished group is refused: recorded in REJECTED, deleted from JOBS.
	late := nats.NewMsg(e.ns + ".jobs.g0")
	late.Header = wire.JobMeta{Group: "g0", Key: "late"}.Header()
	if _, err := js.PublishMsg(e.ctx, late); err != nil {
		t.Fatal(err)
	}
	count := func(stream string) uint64 {
		s, err := js.Stream(e.ctx, e.ns+"_"+stream)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}
	// Right after: the failed group's jobs and every group's outcomes are still there.
	if n := count("RESULTS"); n == 0 {
		t.Fatal("outcomes gone before their retention")
	}
	testwait.For(t, 30*time.Second, "the streams to shrink back", func() bool {
		return count("JOBS") == 0 && count("RESULTS") == 0 && count("WORK") == 0 && count("EVENTS") <= 2 && count("REJECTED") == 1
	})
	t.Logf("after retention: JOBS %d, RESULTS %d, WORK %d, EVENTS %d messages", count("JOBS"), count("RESULTS"), count("WORK"), count("EVENTS"))
}
