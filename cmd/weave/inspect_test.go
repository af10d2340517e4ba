//go:build unix

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/integration/jstest"
	"github.com/weavejobs/weave/internal/testwait"
)

// TestCLIInspect runs a group with a failing job through the CLI, then looks its jobs and the
// group up with weave job, weave group and weave groups, as tables and as JSON, and watches the
// status.
func TestCLIInspect(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	srv := jstest.New(t)
	conn := startWeave(t, srv, "insp", `if [ "$WEAVE_JOB_KEY" = bad ]; then echo "broken input" >&2; exit 65; fi; printf ok`)
	cli := func(args ...string) (int, string, string) {
		t.Helper()
		return runCLI(t, "", append(args, conn...)...)
	}
	if code, out, errOut := runCLI(t, `{"key":"good"}`+"\n"+`{"key":"bad"}`+"\n", append([]string{"submit", "-g", "g", "--wait", "--wait-timeout", "30s"}, conn...)...); code != exitError {
		t.Fatalf("submit: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}

	code, out, errOut := cli("job", "--group", "g", "--key", "bad", "--json")
	var bad dispatcher.JobInfo
	if code != exitOK || json.Unmarshal([]byte(out), &bad) != nil {
		t.Fatalf("job --json: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if bad.Group != "g" || bad.Key != "bad" || bad.State != dispatcher.StateFailed || !strings.Contains(bad.Err, "broken input") ||
		bad.Attempts != 1 || bad.EndedAt.IsZero() {
		t.Fatalf("job --json: %s", out)
	}
	code, out, _ = cli("job", strconv.FormatUint(bad.ID, 10))
	for _, want := range []string{"STATE", "failed, attempt 1", "GROUP", "g (incarnation ", "KEY", "bad", "ERROR", "broken input", "ENDED"} {
		if code != exitOK || !strings.Contains(out, want) {
			t.Errorf("job %d: exit %d, output lacks %q:\n%s", bad.ID, code, want, out)
		}
	}
	if code, out, _ := cli("job", "-g", "g", "-k", "good"); code != exitOK || !strings.Contains(out, "done, attempt 1") || !strings.Contains(out, "RESULT") || !strings.Contains(out, "ok") {
		t.Errorf("job -g g -k good: exit %d\n%s", code, out)
	}
	if code, _, errOut := cli("job", "99999"); code != exitError || !strings.Contains(errOut, "job not found") {
		t.Errorf("unknown job: exit %d\nstderr: %s", code, errOut)
	}

	testwait.For(t, 30*time.Second, "the group to be retained", func() bool {
		code, out, _ := cli("groups", "--json")
		var gs []dispatcher.GroupInfo
		return code == exitOK && json.Unmarshal([]byte(out), &gs) == nil && len(gs) == 1 && gs[0].Summary != nil
	})
	code, out, _ = cli("group", "g")
	for _, want := range []string{"ID", "STATE", "DONE", "FAILED", "complete", "ended "} {
		if code != exitOK || !strings.Contains(out, want) {
			t.Errorf("group g: exit %d, output lacks %q:\n%s", code, want, out)
		}
	}
	var gi dispatcher.GroupInfo
	if code, out, _ := cli("group", "g", "--json"); code != exitOK || json.Unmarshal([]byte(out), &gi) != nil || gi.Summary == nil || *gi.Summary != (dispatcher.Summary{Jobs: 2, Done: 1, Failed: 1}) {
		t.Errorf("group g --json: exit %d\n%s", code, out)
	}
	if code, _, errOut := cli("group", "nope"); code != exitError || !strings.Contains(errOut, "group not found") {
		t.Errorf("unknown group: exit %d\nstderr: %s", code, errOut)
	}
	if code, out, _ := cli("groups"); code != exitOK || !strings.Contains(out, "INCARNATION") || !strings.Contains(out, "complete") {
		t.Errorf("groups: exit %d\n%s", code, out)
	}

	// status --watch, not on a terminal: one status after the other until interrupted.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var w syncBuffer
	exit := make(chan int, 1)
	go func() {
		exit <- run(ctx, append([]string{"status", "--watch", "--interval", "50ms"}, conn...), strings.NewReader(""), &w, &w)
	}()
	testwait.For(t, 30*time.Second, "three statuses", func() bool { return strings.Count(w.String(), "namespace insp") >= 3 })
	cancel()
	if code := <-exit; code != exitOK {
		t.Fatalf("status --watch: exit %d\n%s", code, w.String())
	}
	if out := w.String(); strings.Contains(out, clearScreen) || !strings.Contains(out, "\n\nnamespace insp") {
		t.Errorf("status --watch off a terminal redraws, or runs statuses together:\n%s", out)
	}
}

func TestCLIInspectUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"job"}, "give a job ID, or --group and --key"},
		{[]string{"job", "0"}, `job ID "0"`},
		{[]string{"job", "1", "-g", "g", "-k", "k"}, "not both"},
		{[]string{"job", "-k", "k"}, "--group is required"},
		{[]string{"job", "1", "2"}, "got 2 arguments (1 2)"},
		{[]string{"group"}, "group: usage is 'weave group ID', got no arguments"},
		{[]string{"group", ""}, "group ID"},
		{[]string{"groups", "x"}, `groups takes no arguments, got "x"`},
		{[]string{"status", "--watch", "--interval", "0s"}, "--interval 0s"},
	} {
		code, out, errOut := runCLI(t, "", tc.args...)
		if code != exitUsage || !strings.Contains(out+errOut, tc.want) {
			t.Errorf("weave %q: exit %d, want %d with %q\nstdout: %s\nstderr: %s", tc.args, code, exitUsage, tc.want, out, errOut)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for one writer and concurrent readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestWatchStatusOnTerminal: on a terminal each status clears the screen and is written whole;
// an error is shown and the status asked for again.
func TestWatchStatusOnTerminal(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var w syncBuffer
	calls := 0
	query := func() (*coordinator.Status, error) {
		calls++
		switch calls {
		case 2:
			return nil, errors.New("no coordinator answered")
		case 3:
			cancel()
		}
		return &coordinator.Status{Namespace: "ns", Jobs: map[string]uint64{"pending": uint64(calls)}}, nil
	}
	if err := watchStatus(ctx, &w, true, false, time.Millisecond, query, nil); err != nil {
		t.Fatal(err)
	}
	out := w.String()
	if strings.Count(out, clearScreen) != 2 || !strings.Contains(out, "no coordinator answered (asking again every 1ms)") ||
		strings.Count(out, "namespace ns") != 1 || !strings.Contains(out, "Ctrl-C to stop") {
		t.Fatalf("watch output:\n%q", out)
	}
}
