package topology_test

import (
	"testing"

	"github.com/weavejobs/weave/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }
