package coordinator

import (
	"testing"

	"github.com/weavejobs/weave/internal/leakcheck"
)

// The coordinator runs its loop, pipelines and followers on goroutines that Run must stop.
func TestMain(m *testing.M) { leakcheck.Main(m) }
