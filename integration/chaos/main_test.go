package chaos

import (
	"testing"

	"github.com/weavejobs/weave/internal/leakcheck"
)

// The test reads its processes' output and watches the cluster on goroutines it must stop.
func TestMain(m *testing.M) { leakcheck.Main(m) }
