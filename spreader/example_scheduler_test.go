package spreader_test

import (
	"fmt"

	"github.com/weavejobs/weave/spreader"
)

// The live scheduler with the default least-in-flight policy. Jobs are
// released only when a worker asks, and the group with the fewest jobs running
// goes first.
func ExampleScheduler() {
	s, err := spreader.NewScheduler[string, string](spreader.Config{Feeders: 3})
	if err != nil {
		panic(err)
	}
	for _, g := range []string{"a", "b", "c"} {
		_ = s.AddGroup(g)
		_ = s.Push(g, g+"1", g+"2")
		_ = s.Seal(g)
	}

	// Three workers are free.
	for range 3 {
		g, job, _ := s.Next()
		fmt.Println("run", job, "of group", g)
	}
	// c1 is quick and finishes first. Group c now has nothing in flight, so
	// it goes before a, which round robin would pick next.
	s.Done("c")
	_, job, _ := s.Next()
	fmt.Println("run", job)
	fmt.Println("in flight:", s.InFlight("a"), s.InFlight("b"), s.InFlight("c"))
	// Output:
	// run a1 of group a
	// run b1 of group b
	// run c1 of group c
	// run c2
	// in flight: 1 1 1
}

// A caller that must match jobs to workers looks through the offers in policy
// order and takes the first one that fits.
func ExampleScheduler_Offers() {
	s, _ := spreader.NewScheduler[string, string](spreader.Config{Feeders: 3, Policy: spreader.RoundRobin})
	for _, g := range []string{"cpu", "gpu", "io"} {
		_ = s.AddGroup(g)
		_ = s.Push(g, g+"-job")
	}
	fits := func(job string) bool { return job != "cpu-job" } // say this pool has no CPU slot
	for g, job := range s.Offers() {
		if fits(job) {
			taken, _ := s.Take(g)
			fmt.Println("took", taken)
			break
		}
	}
	fmt.Println("still offered:")
	for _, job := range s.Offers() {
		fmt.Println(" ", job)
	}
	// Output:
	// took gpu-job
	// still offered:
	//   io-job
	//   cpu-job
}
