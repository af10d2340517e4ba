package jobindex_test

import (
	"fmt"

	"github.com/weavejobs/weave/internal/jobindex"
)

// A coordinator indexes jobs as they arrive, picks work for a pool holding a GPU, and applies
// the outcome.
func Example() {
	x := jobindex.New()
	_ = x.Add(101, "render", []string{"gpu"}, nil) // must run on a GPU worker
	_ = x.Add(102, "render", nil, nil)             // runs anywhere
	_ = x.Add(103, "thumbs", nil, []string{"gpu"}) // runs best on a GPU worker

	gpuPool := x.Compile([]string{"gpu"})
	id, match, _ := x.Select(gpuPool, []uint64{101, 102, 103})
	fmt.Println("selected", id, match)

	_, _ = x.Move(id, jobindex.Running)
	_, _ = x.Move(id, jobindex.Done)

	_, err := x.Move(id, jobindex.Running)
	fmt.Println(err)

	c, _ := x.GroupCounts("thumbs")
	fmt.Println("thumbs done:", c.Done, "pending:", x.Count(jobindex.Pending))
	fmt.Println("gpu jobs pending:", x.ResourceCounts("gpu").Required.Pending)
	// Output:
	// selected 103 preferred
	// jobindex: job 103: illegal transition done -> running
	// thumbs done: 1 pending: 2
	// gpu jobs pending: 1
}

// Render the transition table from the code, as documentation does.
func ExampleCanTransition() {
	for _, from := range jobindex.AllStates() {
		fmt.Printf("%-9s ->", from)
		for _, to := range jobindex.AllStates() {
			if jobindex.CanTransition(from, to) {
				fmt.Print(" ", to)
			}
		}
		fmt.Println()
	}
	// Output:
	// pending   -> running canceled
	// running   -> pending retrywait done failed canceled
	// retrywait -> pending canceled
	// done      ->
	// failed    -> pending
	// canceled  ->
	// delayed   -> pending canceled
}
