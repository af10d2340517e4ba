package spreader

import (
	"iter"
	"slices"

	"github.com/weavejobs/weave/feeder"
)

// Spread interleaves groups of jobs so that jobs of one group are spaced apart.
// This order is Weave's reference scheduling order.
//
// There are feeders feeders, and they share one source of groups. Round after
// round, each live feeder in turn yields its next job. When a feeder's group
// runs dry, the feeder takes the next group from the source during its turn. A
// feeder that finds the source empty is finished. Empty groups are skipped, and
// feeders < 1 counts as 1. With feeders = 2, the groups [x1 x2] [y1 y2 y3] [z1]
// give x1 y1 x2 y2 z1 y3. With one feeder the output is the groups
// concatenated.
//
// Spread is lazy, so groups may be endless and arrive from anywhere. A group is
// pulled from groups only when a feeder needs one, including a feeder's first
// group, which it takes on its first turn. A job is pulled only just before it
// is yielded. Nothing is buffered, and memory is O(feeders): one coroutine for
// each feeder that has taken a group. When the range stops early, Spread stops
// pulling and stops every iterator it has pulled, so each can run its cleanup.
//
// Cost: interleaving push iterators needs a stack per iterator, so the
// feeders after the first are pulled with one coroutine (iter.Pull) each. Each
// job they yield costs a coroutine switch there and back, which is tens of
// nanoseconds. The first feeder's groups are ranged over directly and cost no
// more than plain concatenation. So one feeder runs at concatenation speed, two
// at half the switching cost per job, and many at nearly a switch pair per job.
func Spread[T any](groups iter.Seq[iter.Seq[T]], feeders int) iter.Seq[T] {
	if feeders <= 1 {
		// Nothing interleaves, so neither the source nor any group needs a
		// coroutine.
		return concat(groups)
	}
	return func(yield func(T) bool) {
		src := feeder.NewSource(groups)
		defer src.Stop()
		// started holds every feeder started, for the final Stop. live holds
		// the ones not yet finished, in feeder order. Feeders 1..n-1 start at
		// their first turn in round one, so few groups cost few feeders, however
		// large n is.
		var started, live []*feeder.Feeder[T]
		defer func() {
			for _, f := range started {
				f.Stop()
			}
		}()
		unstarted := feeders - 1

		// rest plays the turns of feeders 1..n-1 in one round. It reports false
		// when the consumer has stopped.
		rest := func() bool {
			for i := 0; i < len(live); {
				job, ok := live[i].Next()
				if !ok {
					// Finished: the source is empty. Rare, so the order-keeping
					// delete costs nothing on the hot path.
					live = slices.Delete(live, i, i+1)
					continue
				}
				i++
				if !yield(job) {
					return false
				}
			}
			for ; unstarted > 0; unstarted-- { // round one only
				f := feeder.New(src)
				job, ok := f.Next()
				if !ok {
					unstarted = 0 // the source is empty for every later feeder too
					break
				}
				started = append(started, f)
				live = append(live, f)
				if !yield(job) {
					return false
				}
			}
			return true
		}

		// Feeder 0 drives the rounds. Each of its jobs opens a round, and turn
		// plays the rest of that round. When its group runs dry, the next one is
		// taken at the start of feeder 0's next turn, after the other feeders
		// have played the round before it, just as the reference order requires.
		// (This is feeder.Feed with each group handed turn directly: one call
		// less per job than a range loop.)
		stopped := false
		turn := func(job T) bool {
			// A group that calls on after false must not reach yield again.
			if stopped || !yield(job) || !rest() {
				stopped = true
				return false
			}
			return true
		}
		for !stopped {
			g, ok := src.Next()
			if !ok {
				break
			}
			g(turn)
		}
		if stopped {
			return
		}
		// Feeder 0 has found the source empty. The others play out their
		// groups.
		for len(live) > 0 && rest() {
		}
	}
}

// concat is Spread with one feeder.
func concat[T any](groups iter.Seq[iter.Seq[T]]) iter.Seq[T] {
	return func(yield func(T) bool) {
		for g := range groups {
			for job := range g {
				if !yield(job) {
					return
				}
			}
		}
	}
}
