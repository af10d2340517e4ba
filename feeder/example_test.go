package feeder_test

import (
	"fmt"
	"iter"
	"slices"

	"github.com/weavejobs/weave/feeder"
)

// Two feeders share one source of groups and take one job each in turn. The
// first feeder takes z as soon as x runs dry, while the second is still on y.
func Example() {
	groups := slices.Values([]iter.Seq[string]{
		slices.Values([]string{"x1", "x2"}),
		slices.Values([]string{"y1", "y2", "y3"}),
		slices.Values([]string{"z1"}),
	})
	src := feeder.NewSource(groups)
	defer src.Stop()
	feeders := []*feeder.Feeder[string]{feeder.New(src), feeder.New(src)}
	for live := len(feeders); live > 0; {
		live = 0
		for _, f := range feeders {
			if job, ok := f.Next(); ok {
				fmt.Print(job, " ")
				live++
			}
		}
	}
	fmt.Println()
	// Output: x1 y1 x2 y2 z1 y3
}

// A Queue holds groups that wait for a feeder slot, in arrival order.
func ExampleQueue() {
	var waiting feeder.Queue[string]
	waiting.Push("tenant-a")
	waiting.Push("tenant-b")
	next, _ := waiting.Pop()
	fmt.Println(next, waiting.Len())
	// Output: tenant-a 1
}
