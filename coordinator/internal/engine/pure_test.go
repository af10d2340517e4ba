package engine

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportsNoNATSClient holds the engine to doing no I/O: nothing it imports, directly or not,
// is a NATS client or a metrics library.
func TestImportsNoNATSClient(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps named %d packages: %q", len(deps), deps)
	}
	for _, p := range deps {
		if strings.HasPrefix(p, "github.com/nats-io/") || strings.HasPrefix(p, "github.com/prometheus/") || p == "net/http" {
			t.Errorf("the engine imports %s", p)
		}
	}
}
