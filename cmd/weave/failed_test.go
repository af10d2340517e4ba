//go:build unix

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/integration/jstest"
)

// startWeave initialises namespace ns of srv and runs a coordinator and a worker with the CLI in
// it until the test ends. The worker runs script with sh. It returns the connection flags.
func startWeave(t *testing.T, srv *jstest.Server, ns, script string) []string {
	t.Helper()
	conn := []string{"--nats", srv.ClientURL(), "--namespace", ns, "--log-level", "warn"}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	background := func(args ...string) {
		wg.Go(func() {
			var out, errOut bytes.Buffer
			full := append(append([]string{args[0]}, conn...), args[1:]...) // flags before "--"
			if code := run(ctx, full, strings.NewReader(""), &out, &errOut); code != exitOK {
				t.Errorf("weave %q: exit %d\n%s%s", args, code, out.String(), errOut.String())
			}
		})
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	initNamespace(t, conn)
	background("coordinator")
	background("worker", "--id", "w1", "--concurrency", "2", "--heartbeat-interval", "100ms", "--", "sh", "-c", script)
	return conn
}

// TestCLIFailedJobs fails a job permanently, lists it, retries it once the handler is fixed,
// and cancels jobs that wait for a resource nobody holds.
func TestCLIFailedJobs(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	srv := jstest.New(t)
	// The jobs with keys "bad" and "worse" fail permanently (exit 65) until the file fixed-<key>
	// exists.
	dir := t.TempDir()
	script := `case "$WEAVE_JOB_KEY" in bad|worse) if [ ! -e '` + dir + `'/fixed-"$WEAVE_JOB_KEY" ]; then echo "nope on attempt $WEAVE_JOB_ATTEMPT" >&2; exit 65; fi;; esac; printf ok`
	conn := startWeave(t, srv, "dlq", script)
	cli := func(stdin string, args ...string) (int, string, string) {
		t.Helper()
		return runCLI(t, stdin, append(args, conn...)...)
	}

	jobs := `{"key":"a","payload":"1"}
{"key":"bad","payload":"payload of bad","max_attempts":3,"timeout":"20s"}
{"key":"worse","payload":"payload of worse"}
`
	if code, out, errOut := cli(jobs, "submit", "-g", "g", "--wait", "--wait-timeout", "30s"); code != exitError || !strings.Contains(out, "1 done, 2 failed") {
		t.Fatalf("submit: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}

	code, out, errOut := cli("", "failed", "list", "--group", "g", "--json")
	failed := map[string]failedLine{}
	for line := range strings.Lines(out) {
		var l failedLine
		if json.Unmarshal([]byte(line), &l) != nil {
			t.Fatalf("failed list --json: %q is not a job", line)
		}
		failed[l.Key] = l
	}
	bad, worse := failed["bad"], failed["worse"]
	if code != exitOK || len(failed) != 2 || worse.ID == 0 {
		t.Fatalf("failed list --json: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if bad.Group != "g" || bad.Key != "bad" || bad.Attempts != 1 || !strings.Contains(bad.Error, "nope on attempt 1") ||
		len(bad.History) != 1 || bad.History[0].Worker != "w1" || bad.History[0].At.IsZero() || !strings.Contains(bad.History[0].Error, "nope") {
		t.Fatalf("failed list --json: %s", out)
	}
	id := strconv.FormatUint(bad.ID, 10)
	code, out, _ = cli("", "failed", "list", "--history")
	for _, want := range []string{"GROUP", "LAST ERROR", id, "bad", "nope on attempt 1", "#1", " on w1: ", "2 failed jobs\n"} {
		if code != exitOK || !strings.Contains(out, want) {
			t.Errorf("failed list --history: exit %d, output lacks %q:\n%s", code, want, out)
		}
	}

	// Only failed jobs of the group's last run can be retried.
	if code, out, errOut := cli("", "failed", "retry", "-g", "g", "99999"); code != exitError || !strings.Contains(errOut, "99999") || !strings.Contains(errOut, "no such failed job") {
		t.Errorf("retry of a job that did not fail: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	fix := func(key string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, "fixed-"+key), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	fix("bad")
	code, out, errOut = cli("", "failed", "retry", "-g", "g", id, "--wait", "--wait-timeout", "30s")
	if code != exitOK || !strings.Contains(out, `group "g": 1 failed job run again by the coordinator`) || !strings.Contains(out, `group "g" complete: 1 job, 1 done, 0 failed, 0 canceled`) {
		t.Fatalf("failed retry --wait: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	// The retry of bad succeeded: only worse is still failed, and it can still be retried though
	// the group's latest run has no failed job. It fails again: listed under its new ID.
	if code, out, _ := cli("", "failed", "list", "-g", "g", "--json"); code != exitOK || strings.Count(out, "\n") != 1 || !strings.Contains(out, `"key":"worse"`) {
		t.Errorf("failed list after the retry of bad: exit %d\n%s", code, out)
	}
	if code, out, errOut := cli("", "failed", "retry", "-g", "g", "--wait", "--wait-timeout", "30s"); code != exitError || !strings.Contains(out, `group "g" complete: 1 job, 0 done, 1 failed, 0 canceled`) {
		t.Fatalf("retry of worse, not fixed: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	code, out, _ = cli("", "failed", "list", "-g", "g", "--json")
	var again failedLine
	if code != exitOK || strings.Count(out, "\n") != 1 || json.Unmarshal([]byte(out), &again) != nil || again.Key != "worse" || again.ID == worse.ID {
		t.Fatalf("failed list after worse failed again: exit %d\n%s", code, out)
	}
	fix("worse")
	if code, out, errOut := cli("", "failed", "retry", "-g", "g", "--wait", "--wait-timeout", "30s"); code != exitOK || !strings.Contains(out, `group "g" complete: 1 job, 1 done, 0 failed, 0 canceled`) {
		t.Fatalf("retry of worse, fixed: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	// Every failed job ran again and succeeded: nothing is listed, nothing is left to retry.
	if code, out, _ := cli("", "failed", "list", "-g", "g"); code != exitOK || out != "no failed jobs stored\n" {
		t.Errorf("failed list once all succeeded: exit %d\n%s", code, out)
	}
	if code, out, errOut := cli("", "failed", "retry", "-g", "g"); code != exitError || !strings.Contains(errOut, "no such failed job") || !strings.Contains(errOut, "no failed job is left") {
		t.Errorf("retry once all succeeded: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}

	// Jobs requiring a resource no worker holds wait: cancel one of them, then the group.
	nc := jstest.NewConn(t, srv.ClientURL())
	d, err := dispatcher.New(nc, dispatcher.Config{Namespace: "dlq"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var sub submitResult
	code, out, errOut = cli(`{"key":"x","require":["gpu"]}`+"\n"+`{"key":"y","require":["gpu"]}`, "submit", "-g", "parked", "--json")
	if code != exitOK || json.Unmarshal([]byte(out), &sub) != nil || sub.Accepted != 2 {
		t.Fatalf("submit: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	// A run that is not complete cannot be retried: the coordinator names it.
	if code, out, errOut := cli("", "failed", "retry", "-g", "parked"); code != exitError || !strings.Contains(errOut, "group is running") || !strings.Contains(errOut, "is not complete") {
		t.Errorf("retry of a running group: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	first := strconv.FormatUint(sub.FirstID, 10)
	if code, out, errOut := cli("", "cancel", "-g", "parked", "--job", first); code != exitOK || !strings.Contains(out, `group "parked": 1 canceled, 0 stopping`+"\n") {
		t.Fatalf("cancel --job: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	o, err := d.Attach("parked").WaitJob(ctx, sub.FirstID)
	if err != nil || o.State != dispatcher.StateCanceled {
		t.Fatalf("job %d after cancel --job: %+v, %v", sub.FirstID, o, err)
	}
	// Nothing to cancel: a job that has ended and one that does not exist are named, and the
	// exit status says that nothing was canceled.
	code, out, errOut = cli("", "cancel", "-g", "parked", "--job", first, "--job", "999999")
	if code != exitError || !strings.Contains(out, "0 canceled, 0 stopping; ended already: "+first+"; not in the group: 999999") || !strings.Contains(errOut, "nothing was canceled") {
		t.Errorf("cancel of an ended job and an unknown one: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if code, out, errOut := cli("", "cancel", "-g", "parked"); code != exitOK || !strings.Contains(out, `group "parked": cancel applied by the coordinator`) {
		t.Fatalf("cancel: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	sum, err := d.Attach("parked").WaitSummary(ctx)
	if err != nil || sum != (dispatcher.Summary{Jobs: 2, Canceled: 2}) {
		t.Fatalf("summary after cancel: %+v, %v", sum, err)
	}

	// A group that is not open (finished, or never published): the coordinator refuses.
	for _, g := range []string{"parked", "no-such-group"} {
		code, out, errOut := cli("", "cancel", "-g", g)
		want := `cancel group "` + g + `" refused by the coordinator: no such group, or it has finished`
		if code != exitError || !strings.Contains(errOut, want) || strings.Count(errOut, "weave:") != 1 {
			t.Errorf("cancel of %s: exit %d\nstdout: %s\nstderr: %s", g, code, out, errOut)
		}
	}
}

// TestCLICancelWithoutCoordinator: with no coordinator running, cancel and failed retry store the
// request, say that nobody answered, and exit with status 3.
func TestCLICancelWithoutCoordinator(t *testing.T) {
	t.Parallel()
	srv := jstest.New(t)
	conn := []string{"--nats", srv.ClientURL(), "--namespace", "alone", "--log-level", "warn"}
	initNamespace(t, conn)
	code, out, errOut := runCLI(t, "", append([]string{"cancel", "-g", "g", "--timeout", "300ms"}, conn...)...)
	if code != exitPending || !strings.Contains(out, `group "g": cancel stored; no coordinator answered within 300ms`) {
		t.Fatalf("cancel: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if errOut != "" {
		t.Fatalf("cancel said it twice; stderr: %s", errOut)
	}
	code, out, errOut = runCLI(t, "", append([]string{"failed", "retry", "-g", "g", "--timeout", "300ms"}, conn...)...)
	if code != exitPending || !strings.Contains(out, `group "g": retry stored; no coordinator answered within 300ms`) || errOut != "" {
		t.Fatalf("failed retry: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
}
