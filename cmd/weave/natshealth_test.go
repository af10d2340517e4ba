package main

import (
	"strings"
	"testing"
	"time"

	"github.com/weavejobs/weave/integration/jstest"
	"github.com/weavejobs/weave/internal/testwait"
)

// TestCLIStatusSaysANodeIsDown: on a 3-node cluster with the streams replicated on every node,
// weave status names the node that was stopped, whether or not a coordinator answers; on a
// cluster whose nodes are all up it says nothing about NATS.
func TestCLIStatusSaysANodeIsDown(t *testing.T) {
	t.Parallel()
	c := jstest.NewCluster(t, 3)
	servers := c.Servers()
	conn := []string{"--nats", servers[0].ClientURL(), "--namespace", "ha", "--log-level", "warn", "--timeout", "2s"}
	if code, out, errOut := runCLI(t, "", append([]string{"init", "--replicas", "3"}, conn...)...); code != exitOK {
		t.Fatalf("init: exit %d\n%s%s", code, out, errOut)
	}
	status := func() string {
		_, out, _ := runCLI(t, "", append([]string{"status"}, conn...)...)
		return out
	}
	testwait.For(t, 30*time.Second, "every replica current", func() bool { return !strings.Contains(status(), "NATS:") })
	down := servers[2]
	down.Stop()
	var out string
	testwait.For(t, 60*time.Second, "status to name the node stopped", func() bool {
		out = status()
		return strings.Contains(out, "NATS: node "+down.Name()+" is offline")
	})
	if !strings.Contains(out, "ha_JOBS") {
		t.Fatalf("status names no stream of the node:\n%s", out)
	}
}
