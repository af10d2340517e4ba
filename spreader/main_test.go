package spreader_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Spread runs feeders on coroutines, which are goroutines: goleak catches any
// left unstopped.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
