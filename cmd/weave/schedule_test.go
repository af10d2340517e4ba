package main

import (
	"strings"
	"testing"
	"time"

	"github.com/weavejobs/weave/internal/testwait"
)

// TestScheduleCommands: schedule add, list, pause, resume and remove against a running
// coordinator and worker: the schedule fires (list shows a last tick), and the usage errors of
// add.
func TestScheduleCommands(t *testing.T) {
	t.Parallel()
	conn := newCLINamespace(t, "sch")
	background(t, conn, []string{"coordinator"}, []string{"worker", "--id", "w", "--", "true"})
	for _, bad := range [][]string{
		{"schedule", "add", "--every", "1s"},                                     // no name
		{"schedule", "add", "--name", "s"},                                       // no cron nor interval
		{"schedule", "add", "--name", "s", "--every", "1s", "--cron", "@hourly"}, // both
		{"schedule", "remove"},
		{"schedule", "add", "--name", "s", "--every", "1s", "--file", "/dev/null"}, // no job
	} {
		if code, out, errOut := runCLI(t, `{"key":"a"}`, append(bad, conn...)...); code != exitUsage {
			t.Errorf("weave %q: exit %d, want a usage error\n%s%s", bad, code, out, errOut)
		}
	}
	if code, out, errOut := runCLI(t, `{"key":"a"}`, append([]string{"schedule", "add", "--name", "s", "--cron", "61 * * * *"}, conn...)...); code != exitError || !strings.Contains(errOut, "cron") {
		t.Errorf("a bad cron expression: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut := runCLI(t, "{\"key\":\"a\"}\n{\"key\":\"b\"}\n", append([]string{"schedule", "add", "--name", "poll", "--every", "1s"}, conn...)...)
	if code != exitOK || !strings.Contains(out, `schedule "poll" added: every 1s, 2 jobs per tick`) {
		t.Fatalf("schedule add: exit %d\n%s%s", code, out, errOut)
	}
	testwait.For(t, 30*time.Second, "schedule list to show a tick fired", func() bool {
		code, out, _ := runCLI(t, "", append([]string{"schedule", "list"}, conn...)...)
		return code == exitOK && strings.Contains(out, "poll  every 1s  poll@…  2     20")
	})
	// Paused, it is listed as such; resumed, with its next tick; resuming it twice is an error.
	for _, step := range []struct {
		args []string
		code int
		out  string // in stdout, or stderr for an error
		list string // then in schedule list's stdout (spaces collapsed)
	}{
		{[]string{"pause"}, exitOK, `schedule "poll" paused: no tick fires until 'weave schedule resume'`, "poll every 1s poll@… 2"},
		{[]string{"resume"}, exitOK, `schedule "poll" resumed: it fires from its next tick`, "poll every 1s poll@… 2"},
		{[]string{"resume"}, exitError, `weave: not paused: schedule "poll": nothing resumed`, ""},
	} {
		code, out, errOut := runCLI(t, "", append(append([]string{"schedule"}, append(step.args, "--name", "poll")...), conn...)...)
		if code != step.code || !strings.Contains(out+errOut, step.out) {
			t.Fatalf("schedule %q: exit %d, want %d with %q\nstdout: %s\nstderr: %s", step.args, code, step.code, step.out, out, errOut)
		}
		if step.list == "" {
			continue
		}
		code, out, _ = runCLI(t, "", append([]string{"schedule", "list"}, conn...)...)
		line := strings.Join(strings.Fields(out), " ")
		if code != exitOK || !strings.Contains(line, step.list) || strings.HasSuffix(line, " paused") != (step.args[0] == "pause") {
			t.Fatalf("schedule list after %q: exit %d\n%s", step.args, code, out)
		}
	}
	if code, out, errOut := runCLI(t, "", append([]string{"schedule", "remove", "--name", "poll"}, conn...)...); code != exitOK {
		t.Fatalf("schedule remove: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, _ := runCLI(t, "", append([]string{"schedule", "list"}, conn...)...); code != exitOK || strings.TrimSpace(out) != "no schedules" {
		t.Fatalf("schedule list after remove: exit %d\n%s", code, out)
	}
	// Removing it again (or a misspelt name) removes nothing, and says so.
	code, out, errOut = runCLI(t, "", append([]string{"schedule", "remove", "--name", "poll"}, conn...)...)
	if code != exitError || out != "" || !strings.Contains(errOut, `weave: no such schedule: "poll": nothing removed`) {
		t.Fatalf("schedule remove of no schedule: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
}
