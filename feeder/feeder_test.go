package feeder_test

import (
	"iter"
	"slices"
	"testing"

	"github.com/weavejobs/weave/feeder"
)

func TestFeed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		sizes []int
		want  []string
	}{
		{name: "no groups", sizes: nil, want: nil},
		{name: "only empty groups", sizes: []int{0, 0, 0}, want: nil},
		{name: "one group", sizes: []int{2}, want: []string{"a1", "a2"}},
		{name: "concatenates", sizes: []int{2, 1}, want: []string{"a1", "a2", "b1"}},
		{name: "skips empty groups", sizes: []int{0, 1, 0, 0, 2, 0}, want: []string{"b1", "e1", "e2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr := newTracker()
			src := feeder.NewSource(tr.source(names(len(tt.sizes)), tt.sizes))
			got := slices.Collect(feeder.Feed(src))
			src.Stop()
			if !slices.Equal(got, tt.want) {
				t.Errorf("Feed = %v, want %v", got, tt.want)
			}
			if open := tr.openNames(); len(open) > 0 {
				t.Errorf("iterators not released: %v", open)
			}
		})
	}
}

// TestFeedersShareSource checks that groups go to whichever feeder runs dry
// first, in source order, and that a feeder takes a group only when asked for a
// job.
func TestFeedersShareSource(t *testing.T) {
	t.Parallel()
	tr := newTracker()
	src := feeder.NewSource(tr.source([]string{"x", "y", "z"}, []int{2, 3, 1}))
	defer src.Stop()
	f1, f2 := feeder.New(src), feeder.New(src)
	defer f1.Stop()
	defer f2.Stop()

	if len(tr.log) != 0 {
		t.Fatalf("pulled before the first Next: %v", tr.log)
	}
	var got []string
	for range 3 {
		for _, f := range []*feeder.Feeder[string]{f1, f2} {
			if job, ok := f.Next(); ok {
				got = append(got, job)
			}
		}
	}
	if want := []string{"x1", "y1", "x2", "y2", "z1", "y3"}; !slices.Equal(got, want) {
		t.Errorf("jobs = %v, want %v", got, want)
	}
	wantLog := []string{
		"take x", "job x1", "take y", "job y1",
		"job x2", "job y2",
		"take z", "job z1", "job y3",
	}
	if !slices.Equal(tr.log, wantLog) {
		t.Errorf("log = %q,\nwant  %q", tr.log, wantLog)
	}
}

func TestFeederFinished(t *testing.T) {
	t.Parallel()
	tr := newTracker()
	src := feeder.NewSource(tr.source([]string{"a"}, []int{1}))
	defer src.Stop()
	f := feeder.New(src)
	defer f.Stop()
	if job, ok := f.Next(); !ok || job != "a1" {
		t.Fatalf("Next = %q, %v, want a1, true", job, ok)
	}
	for range 2 {
		if job, ok := f.Next(); ok {
			t.Fatalf("Next after the source ran out = %q, true", job)
		}
	}
	// The source is exhausted now, so a new feeder is finished at once and
	// starts no coroutine (goleak would see one left behind otherwise, since
	// this feeder is never stopped).
	if job, ok := feeder.New(src).Next(); ok {
		t.Fatalf("new feeder on an empty source got %q", job)
	}
}

// TestStopReleases breaks off mid-group on an endless source and checks that
// Stop releases the group the feeder holds and then the source, and that
// nothing further is pulled.
func TestStopReleases(t *testing.T) {
	t.Parallel()
	pulled := 0
	groups := func(yield func(iter.Seq[int]) bool) {
		for {
			pulled++
			if !yield(endless()) {
				return
			}
		}
	}
	released := 0
	src := feeder.NewSource(func(yield func(iter.Seq[int]) bool) {
		defer func() { released++ }()
		groups(yield)
	})
	f := feeder.New(src)
	for range 5 {
		if _, ok := f.Next(); !ok {
			t.Fatal("endless feeder ran dry")
		}
	}
	f.Stop()
	src.Stop()
	src.Stop()
	f.Stop()
	if pulled != 1 || released != 1 {
		t.Errorf("pulled %d groups and released the source %d times, want 1 and 1", pulled, released)
	}
	if _, ok := f.Next(); ok {
		t.Error("Next after Stop returned a job")
	}
}

func endless() iter.Seq[int] {
	return func(yield func(int) bool) {
		for i := 0; yield(i); i++ {
		}
	}
}

func names(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = string(rune('a' + i))
	}
	return out
}
