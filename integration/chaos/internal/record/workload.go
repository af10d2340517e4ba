package record

import (
	"fmt"
	"math/rand/v2"
)

// Group is one group of the workload: its ID and its jobs' keys, and the keys of a second
// incarnation of the same group ID, published once the first has finished (none if empty), as a
// producer that crawls the same site again would.
//
// A Packed group's jobs are published without their keys (each job's payload names it), so the
// dispatcher stores them in packs; a producer that publishes such a group again after a crash
// stores its jobs again, since nothing deduplicates jobs without a key.
//
// A Single group is one job submitted alone (dispatcher.Submit): one message, its group's open,
// job and seal. A Batched group is one job submitted without a key (its payload names it) with
// the other Batched groups of its batch (BatchOf) in one dispatcher.SubmitMany, which stores them
// in single packs; it is published once.
type Group struct {
	ID      string
	Keys    []string
	Again   []string
	Packed  bool
	Single  bool
	Batched bool
	// FollowUp: the first incarnation is published with a follow-up on completion, group
	// FollowUpID(ID), of one job with key FollowUpKey.
	FollowUp bool
}

// FollowUpEvery is how often a group (neither Packed nor Single) has a follow-up.
const FollowUpEvery = 3

// FollowUpKey is the key of a follow-up's one job.
const FollowUpKey = "f"

// FollowUpID is the ID of group id's follow-up (the dispatcher's name for a first follow-up).
func FollowUpID(id string) string { return id + ".then.1" }

// PackedEvery is how often a group is Packed: every PackedEvery-th group.
const PackedEvery = 3

// SingleEvery is how often a group (not Packed) is a Single job: every SingleEvery-th group.
const SingleEvery = 4

// BatchEvery is how often a group that would be Single is Batched instead.
const BatchEvery = 8

// BatchSize is how many Batched groups, in workload order, one SubmitMany submits.
const BatchSize = 8

// AgainEvery is how often a group is published a second time: every AgainEvery-th group.
const AgainEvery = 5

// Workload returns the groups a producer publishes, in order: n groups of minJobs to maxJobs jobs
// each, drawn from seed. The producer and the test compute it alike, so a restarted producer
// publishes the same keys again and the test knows what should have been published.
func Workload(seed uint64, n, minJobs, maxJobs int) []Group {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	keys := func(prefix string) []string {
		k := make([]string, minJobs+rng.IntN(maxJobs-minJobs+1))
		for j := range k {
			k[j] = fmt.Sprintf("%s%04d", prefix, j)
		}
		return k
	}
	groups := make([]Group, n)
	for i := range groups {
		g := Group{ID: fmt.Sprintf("g%05d", i), Keys: keys("k"), Packed: i%PackedEvery == 1}
		g.Single = !g.Packed && i%SingleEvery == 2
		g.Batched = g.Single && i%BatchEvery == 6
		g.Single = g.Single && !g.Batched
		g.FollowUp = !g.Packed && !g.Single && !g.Batched && i%FollowUpEvery == 0
		if i%AgainEvery == AgainEvery-1 && !g.Batched {
			g.Again = keys("r")
		}
		if g.Single || g.Batched {
			g.Keys = g.Keys[:1]
			if len(g.Again) > 0 {
				g.Again = g.Again[:1]
			}
		}
		groups[i] = g
	}
	return groups
}

// KeyOf is the key of the job whose payload is payload: the key after the group ID and "/", as
// the producer builds payloads.
func KeyOf(payload []byte) string {
	s := string(payload)
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '/' {
			return s[i+1:]
		}
	}
	return s
}

// Incarnations returns the key sets g is published with, in order.
func (g Group) Incarnations() [][]string {
	if len(g.Again) == 0 {
		return [][]string{g.Keys}
	}
	return [][]string{g.Keys, g.Again}
}
