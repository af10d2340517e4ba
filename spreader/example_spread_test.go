package spreader_test

import (
	"fmt"
	"iter"
	"slices"

	"github.com/weavejobs/weave/spreader"
)

// Two feeders over three groups. The first feeder takes z as soon as x runs
// dry, while the second is still on y.
func ExampleSpread() {
	groups := slices.Values([]iter.Seq[string]{
		slices.Values([]string{"x1", "x2"}),
		slices.Values([]string{"y1", "y2", "y3"}),
		slices.Values([]string{"z1"}),
	})
	for job := range spreader.Spread(groups, 2) {
		fmt.Print(job, " ")
	}
	fmt.Println()
	// Output: x1 y1 x2 y2 z1 y3
}

// Spread is lazy: it works on an endless source, and pulls only what it yields.
func ExampleSpread_endless() {
	tenants := func(yield func(iter.Seq[string]) bool) {
		for t := 0; ; t++ {
			jobs := func(yield func(string) bool) {
				for j := 0; yield(fmt.Sprintf("t%d.%d", t, j)); j++ {
				}
			}
			if !yield(jobs) {
				return
			}
		}
	}
	for job := range spreader.Spread(tenants, 3) {
		fmt.Print(job, " ")
		if job == "t2.1" {
			break
		}
	}
	fmt.Println()
	// Output: t0.0 t1.0 t2.0 t0.1 t1.1 t2.1
}
