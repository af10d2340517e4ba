// Package spreader decides the order in which jobs of many groups run.
//
// Jobs of one group contend for one shared thing, such as a database shard, a
// remote host, or a tenant's quota. Jobs of different groups do not. So jobs of
// one group should be spaced apart, and jobs should start flowing before a
// producer has finished its group. A plain FIFO queue does neither: it runs a
// whole group at once.
//
// # The feeder model
//
// F feeders each hold one group at a time (see package
// [github.com/weavejobs/weave/feeder]). They take groups lazily, in order, from
// a shared source. Round after round, each live feeder yields one job. When a
// feeder's group runs dry, the feeder takes the next group from the source
// during its own turn. A feeder that finds the source empty is finished. Empty
// groups are skipped. F is "workers plus a fudge factor": until fewer than F
// groups remain, a group rarely has more than one job running.
//
// Worked example, F = 2, groups [x1 x2] [y1 y2 y3] [z1]:
//
//	round 1: feeder 0 takes x → x1   feeder 1 takes y → y1
//	round 2: feeder 0        → x2   feeder 1        → y2
//	round 3: feeder 0 takes z → z1   feeder 1        → y3
//	round 4: feeder 0 finds the source empty, and feeder 1 then does too
//
// The output is x1 y1 x2 y2 z1 y3. With F = 1 it is the groups concatenated.
// [Spread] computes this reference order over iterators.
//
// # The live scheduler
//
// The coordinator cannot run Spread, because its groups arrive over time and
// its jobs finish at different speeds. [Scheduler] keeps F feeder slots fed
// from a growing line of groups. It releases a job only when the caller asks,
// when a worker is free, so the decision is made as late as possible. A group
// leaves its slot when it has no more queued jobs, and the slot takes the next
// group in the line at once. A group that is not sealed yet comes back to the
// line when more jobs arrive, so a producer that is slow or gone holds no slot
// while others wait.
//
// Among the active groups with a job ready, a [Policy] orders the offers:
//
//   - [RoundRobin] rotates over the slots, starting after the slot that
//     released last. If every job finishes as soon as it is released, this is
//     exactly Spread's order.
//   - [LeastInFlight], the default, offers first the group with the fewest
//     jobs in flight, with ties in round-robin order.
//
// Round robin is fair in releases, not in worker time. Take 6 workers and three
// groups whose tasks take 10 ms, 5 ms and 1 ms. Round robin leaves them holding
// on average 3.75, 1.875 and 0.375 workers. Least in-flight gives each group
// about 2 (workers / active groups), whatever its task duration, and a finished
// group's workers go to the others at once. The package tests reproduce both
// with a discrete-event simulation.
//
// A caller with free capacity either calls [Scheduler.Next] for the best job,
// or ranges over [Scheduler.Offers] to see the best candidates in order and
// calls [Scheduler.Take] on the one it wants. The coordinator does this to
// match a job's resource needs to a worker pool. Each released job is reported
// back with [Scheduler.Done].
//
// # Cost
//
// Spread costs one coroutine switch pair per job for every feeder but the
// first, whose groups are ranged over directly (see Spread). The scheduler's
// Next, Take and Done cost O(1) plus a search of one two-level bitset over the
// slots, so they do not grow with the number of waiting groups or queued jobs:
// they take well under a microsecond with 1,000 or 100,000 active groups.
// Queues and the line of waiting groups give back memory as they drain.
// BenchmarkSpread and BenchmarkSchedulerNextDone measure both.
package spreader
