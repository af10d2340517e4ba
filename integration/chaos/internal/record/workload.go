package record

import (
	"fmt"
	"math/rand/v2"
)

// Group is one group of the workload: its ID and its jobs' keys.
type Group struct {
	ID   string
	Keys []string
}

// Workload returns the groups a producer publishes, in order: n groups of minJobs to maxJobs jobs
// each, drawn from seed. The producer and the test compute it alike, so a restarted producer
// publishes the same keys again and the test knows what should have been published.
func Workload(seed uint64, n, minJobs, maxJobs int) []Group {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	groups := make([]Group, n)
	for i := range groups {
		size := minJobs + rng.IntN(maxJobs-minJobs+1)
		g := Group{ID: fmt.Sprintf("g%05d", i), Keys: make([]string, size)}
		for j := range g.Keys {
			g.Keys[j] = fmt.Sprintf("k%04d", j)
		}
		groups[i] = g
	}
	return groups
}
