// Package bench holds the scenarios of weave bench: end-to-end measurements of Weave, each
// beside a reference measured in the same run where one exists, so that the figures mean
// something on a shared, noisy machine.
//
//   - throughput: no-op jobs end to end, against a raw JetStream work queue (one hop) on the same
//     server; CPU per job and the process's peak RSS.
//   - latency: open-loop submission at a fixed rate; submit → start and submit → outcome
//     percentiles.
//   - fairness: the reference case (6 slots; 10, 5 and 1 ms tasks) under both policies, measured
//     from the handlers' side, beside the policies' theory and a zero-overhead simulation.
//   - spread: groups of skewed sizes; per-group peak concurrency and gaps between a group's
//     starts, against a FIFO queue simulated on the same jobs.
//   - herd: many idle slots in several workers; pulls and CPU while idle, wakeups per job in a
//     trickle, ack and report messages per job at saturation.
//   - fleet: single jobs from many submitters (1 to 3,000, each its own connection and
//     Dispatcher) and no-op throughput with many workers (8 × 8 to 1,000 × 1, each its own
//     connection), each beside raw JetStream with the same fleet; the CPU an idle fleet of 1,000
//     workers costs the coordinator and the server, measured in a child process of their own.
//   - scale: the coordinator's memory per pending job and the cost of scheduling from backlogs
//     of growing size.
//
// Every component runs in this process (a deployment of package inproc), each on its own NATS
// connection (as separate processes would), on an embedded JetStream server per scenario (file
// storage, temporary directory) or on an external server in a fresh namespace that is deleted
// afterwards. Each scenario returns a
// typed result with its numbers and targets (Check); a Report renders them as text, Markdown or
// JSON. Components run under the pprof label component=server|coordinator|worker|dispatcher|
// producer|reference|bench, so a CPU profile of a run can be split by component.
//
// With Env.Replicas above one every stream, Weave's and the references', has that many replicas
// (weave bench --replicas 3 starts a cluster of three nats-server processes for it).
//
// bench_test.go runs the throughput, latency and fleet scenarios (the fleet at small sizes) as
// Go benchmarks:
//
//	go test -run='^$' -bench=. -benchtime=1x ./cmd/weave/internal/bench/
package bench
