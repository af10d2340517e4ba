//go:build !race

package integration_test

// bigGroup is the size of the large group in TestLargeGroupDoesNotBlockSmall: the million jobs
// the issue names; under the race detector, which slows publishing several times, 100,000.
const bigGroup = 1_000_000
