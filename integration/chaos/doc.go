// Package chaos holds Weave's fault-injection test, TestChaos: real processes on a 3-node
// JetStream cluster, faults injected under load, and checks from the handlers' own records.
// See the test's documentation and README.md ("Fault injection") for how to run it.
package chaos
