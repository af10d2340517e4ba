//go:build race

package integration_test

// bigGroup: see race_off_test.go.
const bigGroup = 100_000
