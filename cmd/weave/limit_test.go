package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weavejobs/weave/internal/testwait"
)

// TestLimitCommands: limit set, list, pause, resume and remove against a running coordinator and
// worker (weave group saying what holds a paused group back), and the usage
// errors of set.
func TestLimitCommands(t *testing.T) {
	t.Parallel()
	conn := newCLINamespace(t, "lim")
	background(t, conn, []string{"coordinator"}, []string{"worker", "--id", "w", "--", "true"})
	for _, bad := range [][]string{
		{"limit", "set", "--concurrency", "2"},                                    // no target
		{"limit", "set", "--resource", "r", "--group", "g", "--concurrency", "2"}, // two targets
		{"limit", "set", "--resource", "r"},                                       // nothing to limit
		{"limit", "set", "--resource", "a b", "--concurrency", "2"},               // bad name
		{"limit", "set", "--resource", "r", "--concurrency", "1", "--burst", "3"}, // burst without rate
	} {
		if code, out, errOut := runCLI(t, "", append(bad, conn...)...); code != exitUsage {
			t.Errorf("weave %q: exit %d, want a usage error\n%s%s", bad, code, out, errOut)
		}
	}
	code, out, errOut := runCLI(t, "", append([]string{"limit", "set", "--resource", "example.com", "--concurrency", "2", "--rate", "5"}, conn...)...)
	if code != exitOK || !strings.Contains(out, `limit of resource "example.com" set: 2 at once, 5 per 1s (burst 1)`) {
		t.Fatalf("limit set: exit %d\n%s%s", code, out, errOut)
	}
	testwait.For(t, 30*time.Second, "limit list to show the limit", func() bool {
		code, out, _ := runCLI(t, "", append([]string{"limit", "list"}, conn...)...)
		return code == exitOK && strings.Contains(out, "resource  example.com  2 at once, 5 per 1s (burst 1)  0        0")
	})
	if code, out, errOut := runCLI(t, "", append([]string{"limit", "remove", "--resource", "example.com"}, conn...)...); code != exitOK {
		t.Fatalf("limit remove: exit %d\n%s%s", code, out, errOut)
	}
	testwait.For(t, 30*time.Second, "limit list to show no limit", func() bool {
		code, out, _ := runCLI(t, "", append([]string{"limit", "list"}, conn...)...)
		return code == exitOK && strings.TrimSpace(out) == "no limits"
	})
	// A pause: listed, kept by a set, ended by resume; resuming twice is an error.
	for _, step := range []struct {
		args    []string
		code    int
		out     string // in stdout, or stderr for an error
		listing string // then in limit list's stdout (spaces collapsed), "" for none
	}{
		{[]string{"pause", "--group", "g1"}, exitOK, `group "g1" paused: none of its jobs is released until 'weave limit resume'`, "group g1 paused 0 0"},
		{[]string{"set", "--group", "g1", "--concurrency", "3"}, exitOK, `group "g1" is still paused: 'weave limit resume' lets its jobs go`, "group g1 paused, 3 at once 0 0"},
		{[]string{"resume", "--group", "g1"}, exitOK, `group "g1" resumed`, "group g1 3 at once 0 0"},
		{[]string{"resume", "--group", "g1"}, exitError, `weave: not paused: group "g1": nothing resumed`, ""},
		{[]string{"remove", "--group", "g1"}, exitOK, `limit of group "g1" removed`, ""},
	} {
		code, out, errOut := runCLI(t, "", append(append([]string{"limit"}, step.args...), conn...)...)
		if code != step.code || !strings.Contains(out+errOut, step.out) {
			t.Fatalf("limit %q: exit %d, want %d with %q\nstdout: %s\nstderr: %s", step.args, code, step.code, step.out, out, errOut)
		}
		if step.listing != "" {
			testwait.For(t, 30*time.Second, "limit list to show "+step.listing, func() bool {
				code, out, _ := runCLI(t, "", append([]string{"limit", "list"}, conn...)...)
				return code == exitOK && strings.Contains(strings.Join(strings.Fields(out), " "), step.listing)
			})
		}
	}
	// weave group says why a paused group's job does not start.
	if code, out, errOut := runCLI(t, "", append([]string{"limit", "pause", "--group", "g2"}, conn...)...); code != exitOK {
		t.Fatalf("limit pause: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := runCLI(t, `{"key":"k"}`+"\n", append([]string{"submit", "--group", "g2"}, conn...)...); code != exitOK {
		t.Fatalf("submit: exit %d\n%s%s", code, out, errOut)
	}
	testwait.For(t, 30*time.Second, "weave group to say the paused group's job is held back", func() bool {
		code, out, _ := runCLI(t, "", append([]string{"group", "g2"}, conn...)...)
		return code == exitOK && strings.Contains(out, `group "g2": 1 pending job held back by group "g2" (paused)`)
	})
	// Removing it again, or a misspelt name, removes nothing and says so.
	for _, name := range []string{"example.com", "exmple.com"} {
		code, out, errOut := runCLI(t, "", append([]string{"limit", "remove", "--resource", name}, conn...)...)
		if code != exitError || out != "" || !strings.Contains(errOut, fmt.Sprintf(`weave: no such limit on resource %q: nothing removed`, name)) {
			t.Fatalf("limit remove of no limit: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
		}
	}
}
