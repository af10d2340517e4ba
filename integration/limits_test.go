package integration_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/internal/testwait"
	"github.com/weavejobs/weave/worker"
)

// TestLimitsHoldAcrossCoordinatorKill: a concurrency limit on a resource and a rate limit on a
// group are never exceeded, as the handlers see them, while the coordinator process is SIGKILLed
// and another takes over; other groups' jobs are not held back by them.
func TestLimitsHoldAcrossCoordinatorKill(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const (
		siteLimit = 3
		rate      = 20 // per second
		burst     = 2
	)
	if err := e.d.SetLimit(e.ctx, dispatcher.Limit{Kind: dispatcher.LimitResource, Name: "site", Concurrency: siteLimit}); err != nil {
		t.Fatal(err)
	}
	if err := e.d.SetLimit(e.ctx, dispatcher.Limit{Kind: dispatcher.LimitGroup, Name: "polite", Rate: rate, Per: time.Second, Burst: burst}); err != nil {
		t.Fatal(err)
	}
	first := e.startChildCoordinator()

	var (
		mu                      sync.Mutex
		site, sitePeak, siteN   int
		politeStarts            []time.Time
		freeDone, siteAtFreeEnd int
	)
	e.worker(worker.Config{ID: "w", Concurrency: 8}, func(ctx context.Context, j *worker.Job) ([]byte, error) {
		mu.Lock()
		switch j.Group {
		case "crawl":
			site++
			sitePeak = max(sitePeak, site)
		case "polite":
			politeStarts = append(politeStarts, time.Now())
		}
		mu.Unlock()
		d := time.Millisecond
		if j.Group == "crawl" {
			d = 30 * time.Millisecond
		}
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		mu.Lock()
		defer mu.Unlock()
		switch j.Group {
		case "crawl":
			site--
			siteN++
		case "free":
			if freeDone++; freeDone == 200 {
				siteAtFreeEnd = siteN
			}
		}
		return nil, nil
	})
	crawl := e.publish("crawl", jobs(60, func(_ int, j *dispatcher.Job) { j.Prefer = []string{"site"} }))
	polite := e.publish("polite", jobs(40, nil))
	free := e.publish("free", jobs(200, nil))

	testwait.For(t, time.Minute, "a quarter of the limited jobs to finish", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return siteN >= 15
	})
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	e.startChildCoordinator()

	for _, h := range []*dispatcher.Handle{crawl, polite, free} {
		if res := e.wait(h); res.Summary.Failed+res.Summary.Canceled != 0 {
			t.Fatalf("group %s: %+v", h.GroupID(), res.Summary)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if sitePeak > siteLimit {
		t.Errorf("%d jobs of the limited resource ran at once, limit %d", sitePeak, siteLimit)
	}
	if siteAtFreeEnd >= 60 {
		t.Errorf("the unlimited group finished only after every limited job (%d)", siteAtFreeEnd)
	}
	// In any window from one start to a later one, the starts stay within the bucket's bound:
	// burst + rate × window, give or take a fraction of one (a late release keeps the schedule),
	// plus one start of slack for the delivery from release to handler.
	for i := range politeStarts {
		for j := i + 1; j < len(politeStarts); j++ {
			window := politeStarts[j].Sub(politeStarts[i])
			if n, bound := j-i+1, burst+rate*window.Seconds()+2; float64(n) >= bound {
				t.Fatalf("%d starts of the rate-limited group within %v: more than %.1f", n, window, bound)
			}
		}
	}
	t.Logf("peak %d of %d at once; %d rate-limited starts over %v", sitePeak, siteLimit, len(politeStarts),
		politeStarts[len(politeStarts)-1].Sub(politeStarts[0]).Round(time.Millisecond))
}

// TestPauseAndResume: a paused group releases none of its jobs while another group, published
// after it, runs to the end; a limit set meanwhile keeps the pause; Resume lets its jobs run,
// under that limit; resuming it again, or what was never paused, is ErrNotPaused; RemoveLimit
// ends a pause too.
func TestPauseAndResume(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.coordinator(coordinator.Config{})
	var (
		mu            sync.Mutex
		running, peak int
		heldStarted   int
	)
	e.worker(worker.Config{ID: "w", Concurrency: 4}, func(ctx context.Context, j *worker.Job) ([]byte, error) {
		mu.Lock()
		if j.Group == "held" {
			heldStarted++
			running++
			peak = max(peak, running)
		}
		mu.Unlock()
		select {
		case <-time.After(5 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		mu.Lock()
		if j.Group == "held" {
			running--
		}
		mu.Unlock()
		return nil, nil
	})
	if err := e.d.Pause(e.ctx, dispatcher.LimitGroup, "held"); err != nil {
		t.Fatal(err)
	}
	if err := e.d.SetLimit(e.ctx, dispatcher.Limit{Kind: dispatcher.LimitGroup, Name: "held", Concurrency: 2}); err != nil {
		t.Fatal(err)
	}
	if l, err := e.d.LimitOf(e.ctx, dispatcher.LimitGroup, "held"); err != nil || !l.Paused || l.Concurrency != 2 {
		t.Fatalf("the limit after SetLimit on a paused group: %+v, %v; want still paused, 2 at once", l, err)
	}
	held := e.publish("held", jobs(12, nil))
	other := e.publish("other", jobs(12, nil))
	if sum := e.wait(other).Summary; sum.Done != 12 {
		t.Fatalf("the other group: %+v", sum)
	}
	mu.Lock()
	n := heldStarted
	mu.Unlock()
	if n != 0 {
		t.Fatalf("%d jobs of the paused group started while it was paused", n)
	}
	// Group says why: the pause holds all 12 back.
	want := []dispatcher.HeldBack{{Kind: dispatcher.LimitGroup, Name: "held", Paused: true, Jobs: 12}}
	if info, err := e.d.Group(e.ctx, "held"); err != nil || info.Jobs[dispatcher.StatePending] != 12 || !slices.Equal(info.HeldBack, want) {
		t.Fatalf("the paused group: %+v, %v; want its 12 jobs pending, held back by %+v", info, err, want)
	}
	if err := e.d.Resume(e.ctx, dispatcher.LimitGroup, "held"); err != nil {
		t.Fatal(err)
	}
	if sum := e.wait(held).Summary; sum.Done != 12 {
		t.Fatalf("the resumed group: %+v", sum)
	}
	if info, err := e.d.Group(e.ctx, "held"); err != nil || len(info.HeldBack) != 0 {
		t.Fatalf("the resumed group, complete: %+v, %v; want nothing held back", info, err)
	}
	mu.Lock()
	if peak > 2 {
		t.Errorf("the resumed group ran %d jobs at once, above its limit of 2", peak)
	}
	mu.Unlock()
	for _, name := range []string{"held", "never"} {
		if err := e.d.Resume(e.ctx, dispatcher.LimitGroup, name); !errors.Is(err, dispatcher.ErrNotPaused) {
			t.Errorf("Resume of %q, not paused: %v, want ErrNotPaused", name, err)
		}
	}
	if err := e.d.Pause(e.ctx, dispatcher.LimitResource, "api"); err != nil {
		t.Fatal(err)
	}
	if err := e.d.RemoveLimit(e.ctx, dispatcher.LimitResource, "api"); err != nil {
		t.Fatal(err)
	}
	if l, err := e.d.LimitOf(e.ctx, dispatcher.LimitResource, "api"); err != nil || !l.Removes() {
		t.Fatalf("a pause after RemoveLimit: %+v, %v", l, err)
	}
}

// TestLimitInForceWhenSetReturns: SetLimit, Pause, Resume and RemoveLimit return once the
// running coordinator applies the change: its status shows it at once, every time.
func TestLimitInForceWhenSetReturns(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.coordinator(coordinator.Config{})
	status := func() map[string]dispatcher.Limit {
		st, err := coordinator.QueryStatus(e.ctx, e.nc, e.ns)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]dispatcher.Limit{}
		for _, l := range st.Limits {
			out[l.Name] = l.Limit
		}
		return out
	}
	testwait.For(t, 10*time.Second, "the coordinator to answer status", func() bool {
		_, err := coordinator.QueryStatus(e.ctx, e.nc, e.ns)
		return err == nil
	})
	for i := range 20 {
		name := fmt.Sprintf("r%d", i%3)
		want := dispatcher.Limit{Kind: dispatcher.LimitResource, Name: name, Concurrency: i + 1}
		if err := e.d.SetLimit(e.ctx, want); err != nil {
			t.Fatal(err)
		}
		if got := status()[name]; got != want {
			t.Fatalf("step %d: status shows %+v right after SetLimit(%+v)", i, got, want)
		}
		switch i % 4 {
		case 1:
			if err := e.d.Pause(e.ctx, dispatcher.LimitResource, name); err != nil {
				t.Fatal(err)
			}
			if got := status()[name]; !got.Paused {
				t.Fatalf("step %d: status shows %+v right after Pause", i, got)
			}
			if err := e.d.Resume(e.ctx, dispatcher.LimitResource, name); err != nil {
				t.Fatal(err)
			}
			if got := status()[name]; got.Paused {
				t.Fatalf("step %d: status shows %+v right after Resume", i, got)
			}
		case 3:
			if err := e.d.RemoveLimit(e.ctx, dispatcher.LimitResource, name); err != nil {
				t.Fatal(err)
			}
			if got, ok := status()[name]; ok {
				t.Fatalf("step %d: status shows %+v right after RemoveLimit", i, got)
			}
		}
	}
}
