package feeder_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every Feeder and Source runs on a coroutine, which is a goroutine: goleak
// catches one left unstopped.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
