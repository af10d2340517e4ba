package integration_test

import (
	"context"
	"errors"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/internal/testwait"
	"github.com/weavejobs/weave/worker"
)

// runCounter counts the handler runs per group and key.
type runCounter struct {
	mu   sync.Mutex
	runs map[string]map[string]int // group → key → runs
}

func newRunCounter() *runCounter { return &runCounter{runs: map[string]map[string]int{}} }

func (rc *runCounter) handler(_ context.Context, j *worker.Job) ([]byte, error) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.runs[j.Group] == nil {
		rc.runs[j.Group] = map[string]int{}
	}
	rc.runs[j.Group][j.Key]++
	return nil, nil
}

// groups returns the groups with the given prefix that ran, sorted, and whether each of their
// keys ran exactly once.
func (rc *runCounter) groups(prefix string, keys int) (ids []string, once bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	once = true
	for g, byKey := range rc.runs {
		if !strings.HasPrefix(g, prefix+"@") {
			continue
		}
		ids = append(ids, g)
		if len(byKey) > keys {
			once = false
		}
		for _, n := range byKey {
			if n != 1 {
				once = false
			}
		}
	}
	sort.Strings(ids)
	return ids, once
}

// TestScheduleFiresEachTickOnce: a schedule every second publishes one group per tick, named for
// the tick, whose jobs run once each; Schedules lists it with its last tick; removed, it stops.
func TestScheduleFiresEachTickOnce(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rc := newRunCounter()
	e.coordinator(coordinator.Config{})
	e.worker(worker.Config{ID: "w", Concurrency: 4}, rc.handler)
	err := e.d.AddSchedule(e.ctx, dispatcher.Schedule{Name: "tick", Every: time.Second, Jobs: []dispatcher.Job{{Key: "a"}, {Key: "b"}}})
	if err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 30*time.Second, "three ticks' groups to run", func() bool {
		ids, _ := rc.groups("tick", 2)
		return len(ids) >= 3
	})
	ids, once := rc.groups("tick", 2)
	if !once {
		t.Fatalf("a tick's jobs ran more or less than once: %v", rc.runs)
	}
	ticks := make([]time.Time, len(ids))
	for i, id := range ids {
		tick, err := time.Parse("20060102T150405Z", strings.TrimPrefix(id, "tick@"))
		if err != nil {
			t.Fatalf("group %q: %v", id, err)
		}
		ticks[i] = tick
		if i > 0 && ticks[i].Sub(ticks[i-1]) != time.Second {
			t.Errorf("ticks %v and %v are not a second apart", ticks[i-1], ticks[i])
		}
	}
	// A tick's fired record is stored after its group, whose jobs may have run already.
	var infos []dispatcher.ScheduleInfo
	testwait.For(t, 10*time.Second, "the last tick that ran to be recorded as fired", func() bool {
		infos, err = e.d.Schedules(e.ctx)
		return err == nil && len(infos) == 1 && !infos[0].LastFired.Before(ticks[len(ticks)-1])
	})
	if infos[0].Name != "tick" || !infos[0].Next.After(infos[0].LastFired) {
		t.Fatalf("Schedules: %+v", infos)
	}
	if err := e.d.RemoveSchedule(e.ctx, "tick"); err != nil {
		t.Fatal(err)
	}
	if infos, err := e.d.Schedules(e.ctx); err != nil || len(infos) != 0 {
		t.Fatalf("Schedules after the removal: %+v, %v", infos, err)
	}
	// Removing it again, or a name never added, is not taken for a removal.
	for _, name := range []string{"tick", "tock"} {
		if err := e.d.RemoveSchedule(e.ctx, name); !errors.Is(err, dispatcher.ErrScheduleNotFound) {
			t.Errorf("RemoveSchedule(%q) with no such schedule: %v, want ErrScheduleNotFound", name, err)
		}
	}
	// No tick fires after the removal: a witness schedule added after it, on the same interval,
	// fires three ticks meanwhile (one tick of the removed one may have been on its way).
	before, _ := rc.groups("tick", 2)
	if err := e.d.AddSchedule(e.ctx, dispatcher.Schedule{Name: "witness", Every: time.Second, Jobs: []dispatcher.Job{{Key: "w"}}}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 30*time.Second, "three ticks of the witness schedule", func() bool {
		ids, _ := rc.groups("witness", 1)
		return len(ids) >= 3
	})
	if after, _ := rc.groups("tick", 2); len(after) > len(before)+1 {
		t.Errorf("%d ticks fired after the removal", len(after)-len(before))
	}
	if err := e.d.AddSchedule(e.ctx, dispatcher.Schedule{Name: "bad name", Every: time.Second, Jobs: []dispatcher.Job{{}}}); !errors.Is(err, dispatcher.ErrInvalidOption) {
		t.Errorf("a schedule with a bad name: %v, want ErrInvalidOption", err)
	}
}

// TestSchedulePauseAndResume: a paused schedule fires no tick while a witness schedule on the same
// interval fires three (one of the paused one's may have been on its way); Schedules shows it
// paused; adding it again keeps the pause; resumed, it fires from its next tick after the resume,
// and the ticks of the pause are not made up. Resuming it again is ErrNotPaused, pausing or
// resuming a name with no schedule ErrScheduleNotFound.
func TestSchedulePauseAndResume(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rc := newRunCounter()
	e.coordinator(coordinator.Config{})
	e.worker(worker.Config{ID: "w", Concurrency: 4}, rc.handler)
	tick := dispatcher.Schedule{Name: "tick", Every: time.Second, Jobs: []dispatcher.Job{{Key: "a"}}}
	if err := e.d.AddSchedule(e.ctx, tick); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 30*time.Second, "a tick to run", func() bool {
		ids, _ := rc.groups("tick", 1)
		return len(ids) >= 1
	})
	if err := e.d.PauseSchedule(e.ctx, "tick"); err != nil {
		t.Fatal(err)
	}
	if err := e.d.PauseSchedule(e.ctx, "tick"); err != nil {
		t.Fatalf("pausing a paused schedule: %v", err)
	}
	if err := e.d.AddSchedule(e.ctx, tick); err != nil { // replaced: still paused
		t.Fatal(err)
	}
	if infos, err := e.d.Schedules(e.ctx); err != nil || len(infos) != 1 || !infos[0].Paused || !infos[0].Next.IsZero() {
		t.Fatalf("Schedules while paused: %+v, %v", infos, err)
	}
	before, _ := rc.groups("tick", 1)
	if err := e.d.AddSchedule(e.ctx, dispatcher.Schedule{Name: "witness", Every: time.Second, Jobs: []dispatcher.Job{{Key: "w"}}}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 30*time.Second, "three ticks of the witness schedule", func() bool {
		ids, _ := rc.groups("witness", 1)
		return len(ids) >= 3
	})
	if during, _ := rc.groups("tick", 1); len(during) > len(before)+1 {
		t.Fatalf("%d ticks fired while paused", len(during)-len(before))
	}
	resumed := time.Now().UTC().Truncate(time.Second)
	paused, _ := rc.groups("tick", 1)
	if err := e.d.ResumeSchedule(e.ctx, "tick"); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 30*time.Second, "a tick after the resume", func() bool {
		ids, _ := rc.groups("tick", 1)
		return len(ids) > len(paused)
	})
	ids, once := rc.groups("tick", 1)
	if !once {
		t.Fatalf("a tick's job ran more or less than once: %v", rc.runs)
	}
	for _, id := range ids[len(paused):] {
		at, err := time.Parse("20060102T150405Z", strings.TrimPrefix(id, "tick@"))
		if err != nil {
			t.Fatal(err)
		}
		if at.Before(resumed) {
			t.Errorf("tick %v fired after the resume at %v: a tick of the pause made up", at, resumed)
		}
	}
	if err := e.d.ResumeSchedule(e.ctx, "tick"); !errors.Is(err, dispatcher.ErrNotPaused) {
		t.Errorf("resuming a running schedule: %v, want ErrNotPaused", err)
	}
	for _, f := range []func(context.Context, string) error{e.d.PauseSchedule, e.d.ResumeSchedule} {
		if err := f(e.ctx, "nosuch"); !errors.Is(err, dispatcher.ErrScheduleNotFound) {
			t.Errorf("pause or resume of no schedule: %v, want ErrScheduleNotFound", err)
		}
	}
}

// TestScheduleTickFiresOnceAcrossKill: the active coordinator process is SIGKILLed at a tick,
// after it published the tick's group and before it recorded the tick fired (a fault-injection
// hook); the next coordinator fires the tick again, and JetStream's dedup stores it once: the
// tick's jobs run exactly once, and later ticks go on.
func TestScheduleTickFiresOnceAcrossKill(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rc := newRunCounter()
	e.worker(worker.Config{ID: "w", Concurrency: 4}, rc.handler)
	first := e.startChildCoordinator("WEAVE_TEST_KILL_AFTER_FIRE=kill")
	// Every 3s: the next coordinator takes over (lease TTL 1s) before the next tick, so the tick
	// it finds due is the one the first published but did not record: it fires it again.
	if err := e.d.AddSchedule(e.ctx, dispatcher.Schedule{Name: "kill", Every: 3 * time.Second, Jobs: []dispatcher.Job{{Key: "a"}, {Key: "b"}, {Key: "c"}}}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- first.Wait() }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "killed") {
			t.Fatalf("the first coordinator ended with %v, want killed by its hook at the first tick", err)
		}
	case <-e.ctx.Done():
		t.Fatal("the first coordinator never fired a tick")
	}
	e.startChildCoordinator()
	testwait.For(t, 60*time.Second, "the next tick to run after the takeover", func() bool {
		ids, _ := rc.groups("kill", 3)
		return len(ids) >= 2
	})
	ids, once := rc.groups("kill", 3)
	if !once {
		t.Fatalf("a tick's jobs ran more than once across the kill: %v", rc.runs)
	}
	t.Logf("ticks run: %v", ids)
}
