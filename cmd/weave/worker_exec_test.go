//go:build unix

package main

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/weavejobs/weave/worker"
)

func shHandler(t *testing.T, script string) *execHandler {
	t.Helper()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	return &execHandler{argv: []string{sh, "-c", script}, maxOutput: 64, killGrace: 100 * time.Millisecond, namespace: "ns", workerID: "w1"}
}

func TestExecHandler(t *testing.T) {
	t.Parallel()
	job := &worker.Job{ID: 7, Key: "k", Group: "g", Attempt: 2, Payload: []byte("in")}
	for _, tc := range []struct {
		name, script string
		out          string
		permanent    bool
		err          string // substring; "" for success
	}{
		{"stdin to stdout", `printf out; cat`, "outin", false, ""},
		{"environment", `printf '%s %s %s %s %s %s' "$WEAVE_JOB_ID" "$WEAVE_JOB_KEY" "$WEAVE_JOB_GROUP" "$WEAVE_JOB_ATTEMPT" "$WEAVE_NAMESPACE" "$WEAVE_WORKER_ID"`, "7 k g 2 ns w1", false, ""},
		{"exit 65 is permanent", `echo bad input >&2; exit 65`, "", true, "exit status 65 (permanent failure): bad input"},
		{"exit 75 is retryable", `echo busy >&2; exit 75`, "", false, "exit status 75: busy"},
		{"exit 1 is retryable", `exit 1`, "", false, "exit status 1"},
		{"killed by a signal", `kill -9 $$`, "", false, "killed"},
		{"output too large", `head -c 100 /dev/zero`, "", true, "more than 64 bytes"},
		{"output at the limit", `head -c 64 /dev/zero | tr '\0' x`, strings.Repeat("x", 64), false, ""},
		{"long stderr is cut", `head -c 5000 /dev/zero | tr '\0' e >&2; exit 3`, "", false, "exit status 3: eeee"},
	} {
		h := shHandler(t, tc.script)
		out, permanent, err := h.run(context.Background(), job)
		if tc.err == "" {
			if err != nil || string(out) != tc.out {
				t.Errorf("%s: got %q, %v; want %q", tc.name, out, err, tc.out)
			}
			continue
		}
		if err == nil || permanent != tc.permanent || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: error %v (permanent %v), want one containing %q (permanent %v)", tc.name, err, permanent, tc.err, tc.permanent)
		}
		if len(err.Error()) > stderrTail+100 {
			t.Errorf("%s: error of %d bytes", tc.name, len(err.Error()))
		}
	}
}

// TestExecHandlerTimeout checks that a command outliving its context is stopped: with SIGTERM,
// or with SIGKILL after the grace period when it ignores SIGTERM, children included.
func TestExecHandlerTimeout(t *testing.T) {
	t.Parallel()
	for _, script := range []string{`sleep 30`, `trap '' TERM; sleep 30 & wait`} {
		h := shHandler(t, script)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		start := time.Now()
		_, permanent, err := h.run(ctx, &worker.Job{ID: 1})
		cancel()
		if err == nil || permanent || !strings.Contains(err.Error(), "deadline exceeded") {
			t.Errorf("%s: error %v (permanent %v)", script, err, permanent)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s: took %v to stop", script, d)
		}
	}
}

func TestHandleWrapsPermanent(t *testing.T) {
	t.Parallel()
	h := shHandler(t, `exit 65`)
	_, err := h.Handle(context.Background(), &worker.Job{ID: 1})
	if err == nil || !strings.Contains(err.Error(), "permanent failure") {
		t.Fatalf("error %v", err)
	}
}

// TestExecHandlerStderrPrefixed checks that every line a command writes to stderr reaches the
// worker's stderr saying which job and attempt wrote it, the last line too if it has no newline.
func TestExecHandlerStderrPrefixed(t *testing.T) {
	t.Parallel()
	h := shHandler(t, `printf 'one\ntwo\nthree' >&2`)
	var errOut strings.Builder
	h.stderr = &errOut
	if _, _, err := h.run(context.Background(), &worker.Job{ID: 7, Key: "k", Attempt: 2}); err != nil {
		t.Fatal(err)
	}
	want := "[job 7 key \"k\" attempt 2] one\n[job 7 key \"k\" attempt 2] two\n[job 7 key \"k\" attempt 2] three\n"
	if errOut.String() != want {
		t.Errorf("stderr:\n%s\nwant:\n%s", errOut.String(), want)
	}
}
