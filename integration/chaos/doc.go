// Package chaos holds Weave's fault-injection test, TestChaos: Weave run as an operator runs it
// on a NATS cluster, broken on purpose under load, and checked from what its handlers wrote down.
//
// # What runs
//
// The test builds nats-server (the module's version), weave and chaosproc (./internal/chaosproc,
// a worker or producer on the public worker and dispatcher packages) from the working tree, and
// starts, each as a process of its own in its own process group:
//
//   - a 3-node JetStream cluster of nats-server processes on 127.0.0.1, each with its own store;
//   - two `weave coordinator --replicas 3` processes: the first creates the streams and takes the
//     lease, the second stands by;
//   - three workers, whose handler appends a start and an end record per execution (job ID,
//     group, key, attempt, worker, time) to a file, one unbuffered write each, so every record
//     written before a SIGKILL is kept;
//   - a producer that publishes the groups of record.Workload (keys on every job, except every
//     third group, whose jobs go without keys, at once, so the dispatcher stores them in packs;
//     one group in four of the others is a single job, submitted alone with dispatcher.Submit;
//     every fifth group ID a second time once it finished: a new incarnation; one group in three
//     of the rest with a follow-up on completion, which must run once, after it), waits for each with
//     Handle.Wait, and records what it published and what came out. Restarted, it publishes again
//     the group it was in the middle of, with the same keys (a packed group's jobs are then
//     stored again: nothing deduplicates jobs without a key).
//   - a hostile worker (chaosproc hostile): an attacker holding the credentials of a worker of a
//     pool no job is released to, which publishes only what those allow, forged reports on its
//     own report subject, throughout, faults and takeovers included: every 100 ms a message of 8
//     reports about job IDs guessed near the JOBS stream's last sequence, done or failed with the
//     result record.Forged, some with a made-up release proof.
//
// A process that exits by itself with an error is restarted a second later, as a service manager
// would, and counted.
//
// # Faults
//
// Round after round, each fault once the workers have started cfg.progress more executions (so
// it hits a working system): SIGKILL the coordinator holding the lease (restarted once the standby
// has taken over), SIGKILL a worker (restarted at once), SIGKILL the node leading most of the
// namespace's streams (from $JS.API.STREAM.INFO: restarted with its store once every stream has a
// leader again and work went on without it), SIGKILL the producer while it publishes (restarted at
// once), and SIGSTOP the busiest worker for longer than its lease, then SIGCONT.
//
// # Checks
//
// From the workers' records, the producer's records and every outcome record in NS_RESULTS:
//
//   - no job lost: every key of a fully published incarnation, and every job a handler ran, has a
//     terminal outcome;
//   - no job with two different terminal outcomes, every key stored as one job (a packed group's:
//     once per Publish of it), every job done (handlers always succeed);
//   - no outcome carries a forged result (in its result or its history), and forged reports were
//     stored throughout, also between a coordinator's kill and the takeover;
//   - outcomes carry their key (a packed group's jobs have none);
//   - executions beyond one per job at most the bound: the sum over the faults of the executions in
//     flight at the fault on the workers it could interrupt. A worker kill or stop interrupts that
//     worker's; a coordinator or node kill may make any worker's attempt in flight run again (its
//     report or its batch's ack can be lost with the process or the node). While a node is down,
//     "at the fault" lasts a worker lease: a worker that cannot extend its batches' lease may
//     start their jobs until it runs out. Jobs only queued on a worker never started, so they are
//     not in the bound, and running them twice is a failure;
//   - no superseded attempt runs: no execution of an attempt starts after a later attempt of the
//     same job started (a worker waking after its lease ran out must not run what it held). A
//     start record within 100 ms of a stopped worker's SIGCONT is a start from before the stop
//     (the stop landed between the worker's lease check and the handler's first write): it was
//     in flight at the fault, and counts against the bound above;
//   - every incarnation summarised in NS_RESULTS and seen finish by the producer's Handle.Wait;
//   - no stall: after every fault cfg.progress executions start within cfg.stall, and once the
//     faults end the producer finishes within cfg.drain;
//   - no process exited by itself.
//
// The report also gives, per fault, the executions in flight, the takeover time (kill to the first
// status answer of a new coordinator that has released work), the election time (kill to every
// stream led again), and the longest pause between execution starts until the next fault; and the
// warnings and errors in the Weave processes' logs, and the messages the coordinator rejected.
//
// # Running it
//
//	go test -count=1 -run TestChaos -v ./integration/chaos/     # short form, in go test ./... too
//	make chaos                                                   # long form: WEAVE_CHAOS=long
//
// WEAVE_CHAOS_FAULTS picks some faults (a comma-separated subset of coordinator, worker, node,
// producer, stop); WEAVE_CHAOS_DIR keeps the logs and records in a directory of your choice. The
// test is Linux only, skipped with -short and with -race (the processes under test are built
// without the race detector, so it would watch only the harness).
package chaos
