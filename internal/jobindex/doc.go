// Package jobindex is the coordinator's job index: the state of every job, counts per state,
// group and resource, and the choice of which pending job a worker pool should run next.
//
// Job IDs are unique 64-bit numbers that grow as jobs are published: in Weave, JetStream stream
// sequence numbers, and for jobs stored several to a message (packs) 2^52 + 32·sequence + index,
// a second run of IDs above the first (PackedIDs). Jobs of one group are published together, so
// their IDs are close within each run; most jobs are done, and the jobs still moving sit near the
// newest IDs. The index is built around that shape.
//
// # State machine
//
// Every job is in exactly one [State]. [Index.Move] enforces the transitions of ARCHITECTURE.md
// and refuses anything else with a [*TransitionError]:
//
//	              release                 report ok
//	  pending ───────────────► running ───────────────► done
//	     ▲  │                  │  │  │
//	     │  │ cancel           │  │  │ report failed (permanent, or attempts exhausted)
//	     │  ▼                  │  │  └────────────────────────────────► failed ──┐
//	  canceled ◄───────────────┘  │ report failed / timeout / lost              │ redrive
//	     ▲          cancel        ▼                                              │
//	     │                   retrywait ── delay elapsed ──► pending ◄────────────┘
//	     └──────── cancel ───────┘
//
//	from       to
//	pending    running, canceled
//	running    done, failed, retrywait, canceled, pending (released back without an attempt)
//	retrywait  pending, canceled
//	failed     pending (redrive)
//	done       — (terminal)
//	canceled   — (terminal)
//
// [CanTransition] and [AllStates] expose the table, so documentation and tests render it from
// the code.
//
// # Data structures
//
// States are roaring bitmaps, one per state, as in the bit-vector scheduling idea the design
// starts from: a state change is a removal from one bitmap and an addition to another, a state
// look-up probes a few bitmaps, and long stretches of done jobs cost a few bits each. Counters
// kept beside the bitmaps make [Index.Count] O(1).
//
// Everything else hangs off a catalog that maps each job ID to its group and its profile,
// run-length encoded in blocks of 2^16 IDs: a group of 100 jobs with the same resources is one
// 12-byte span. A profile is an interned pair of resource sets, what the job requires and what
// it prefers; a fleet has few distinct pairs (usually one resource or none) while a backlog has
// millions of jobs, so jobs point at profiles instead of carrying lists.
//
// Groups and resources keep counters per state, updated on every transition through the
// catalog look-up, so [Index.GroupCounts] and [Index.ResourceCounts] are O(1) too. There is no
// roaring bitmap per group: with the typical ~100 jobs per group, a bitmap's fixed cost (150
// to 260 bytes measured, even run-compressed) would be most of the index. A group's members
// are found through the catalog ([Index.GroupJobs], [Index.Forget]). A job that is a group of its
// own (in Weave, a single job) is added alone ([Index.AddAlone]): no group record at all, its
// group's counts being its state, and consecutive such jobs share a span ([Index.ForgetJob]
// drops one).
//
// For selection each profile also keeps the bitmap of its pending jobs and that bitmap's
// minimum. Together the per-profile pending bitmaps are the inverted index of pending jobs by
// resource: "pending jobs that prefer a resource in W" is the union over the profiles that
// prefer one, and its lowest ID is a minimum over those profiles' minimums.
//
// BenchmarkIndexBuild10M and BenchmarkMove measure its memory per job and the cost of a
// transition (figures in BENCHMARKS.md).
//
// Run containers are used at rest, not in memory. Roaring's Add and Remove on a run container
// recompute the container's cardinality, O(runs), and every transition adds and removes, so
// run-optimized state bitmaps would save little memory and make transitions an order of
// magnitude slower. So the index never calls RunOptimize on its live bitmaps.
//
// # Selection
//
// A worker pool holds a set of resources W, compiled once into a [ResourceSet]. A job fits W if
// W holds everything it requires; among fitting jobs, one that prefers a resource in W
// ([MatchPreferred]) beats one that does not ([MatchRequired] if it requires resources,
// [MatchFallback] if it requires none). [Index.Select] applies the rule to the scheduler's
// offers in their priority order; [Index.SelectAny] applies it to every pending job, lowest ID
// first, in time proportional to the number of profiles that fit W, not to the backlog.
//
// # One owner
//
// An [Index] (and the [ResourceSet] values used with it) belongs to one goroutine and has no
// lock: in Weave, the coordinator's loop goroutine, which applies every change and also answers
// status requests, so no other goroutine ever reads it. The iterators ([Index.Groups],
// [Index.Resources], [Index.GroupJobs]) read the index directly as they yield; the loop body
// of Groups and Resources may change the index, that of GroupJobs must not.
package jobindex
