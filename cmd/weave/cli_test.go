//go:build unix

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/integration/jstest"
	"github.com/weavejobs/weave/internal/testwait"
)

// TestCLI runs a coordinator and a worker with the CLI against an embedded server, submits a
// group with it, and reads the status.
func TestCLI(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	srv := jstest.New(t)
	conn := []string{"--nats", srv.ClientURL(), "--namespace", "cli", "--log-level", "warn"}

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
	defer func() {
		cancel()
		wg.Wait()
	}()
	initNamespace(t, conn) // workers and producers do not create streams
	background("coordinator")
	// Prints group:attempt:payload; the job with key "bad" fails permanently.
	background("worker", "--id", "w1", "--resources", "eu", "--concurrency", "2", "--heartbeat-interval", "100ms", "--",
		"sh", "-c", `if [ "$WEAVE_JOB_KEY" = bad ]; then echo nope >&2; exit 65; fi; printf '%s:%s:' "$WEAVE_JOB_GROUP" "$WEAVE_JOB_ATTEMPT"; cat`)

	jobs := `{"key":"a","payload":"hello"}
{"key":"b","payload":{"x":1},"require":["eu"]}

{"key":"bad","payload":"x","max_attempts":1}
`
	code, out, errOut := runCLI(t, jobs, append([]string{"submit", "--group", "g1", "--outcomes", "--json", "--wait-timeout", "30s"}, conn...)...)
	if code != exitError { // one job failed
		t.Fatalf("submit: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	results := map[string]jobOutcomeLine{}
	dec := json.NewDecoder(strings.NewReader(out))
	for dec.More() {
		var l jobOutcomeLine
		if err := dec.Decode(&l); err != nil {
			t.Fatalf("%v in %s", err, out)
		}
		if l.State != "" {
			results[l.Key] = l
		}
	}
	if r := results["a"]; r.State != "done" || r.Result != "g1:1:hello" {
		t.Errorf("job a: %+v", r)
	}
	if r := results["b"]; r.State != "done" || r.Result != `g1:1:{"x":1}` {
		t.Errorf("job b: %+v", r)
	}
	if r := results["bad"]; r.State != "failed" || !strings.Contains(r.Error, "nope") || r.Attempts != 1 {
		t.Errorf("job bad: %+v", r)
	}
	if !strings.Contains(out, `"summary":{`) || !strings.Contains(out, `"failed":1`) {
		t.Errorf("no summary in %s", out)
	}

	// Submitting the same keys again adds nothing: they are duplicates, which is an error unless
	// --allow-duplicates says it is expected.
	code, out, errOut = runCLI(t, jobs, append([]string{"submit", "-g", "g1"}, conn...)...)
	if code != exitError || !strings.Contains(out, `group "g1": 0 jobs submitted, 3 duplicates dropped`) ||
		!strings.Contains(errOut, "every job (3) was a duplicate") {
		t.Errorf("resubmit: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	code, out, errOut = runCLI(t, jobs, append([]string{"submit", "-g", "g1", "--allow-duplicates"}, conn...)...)
	if code != exitOK || !strings.Contains(out, "3 duplicates dropped") {
		t.Errorf("resubmit --allow-duplicates: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	// --wait on a terminal redraws the counts until the group has finished.
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	d, err := dispatcher.New(nc, dispatcher.Config{Namespace: "cli"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	h, err := d.Publish(ctx, "g4", slices.Values([]dispatcher.Job{{Key: "p1"}, {Key: "p2"}, {Key: "p3"}}))
	if err != nil {
		t.Fatal(err)
	}
	var progress bytes.Buffer
	s := &submitCmd{group: "g4", showWait: true}
	sum, err := s.waitFor(ctx, h, io.Discard, &progress)
	if err != nil || sum.Done != 3 || !strings.HasSuffix(progress.String(), "\rwaiting: 3 done, 0 failed, 0 canceled, 0 pending  \n") ||
		!strings.HasPrefix(progress.String(), "\rwaiting: ") {
		t.Errorf("progress: %+v, %v; stderr %q", sum, err, progress.String())
	}
	// A job Publish would refuse is refused with its line number and field name.
	code, out, errOut = runCLI(t, "\n\n{\"key\":\"d\",\"max_attempts\":-3}\n", append([]string{"submit", "-g", "g3"}, conn...)...)
	if code != exitError || !strings.Contains(errOut, "line 3: bad job line: max_attempts -3 outside") {
		t.Errorf("max_attempts -3: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	// A bad line stops the submission; the jobs before it are sealed in the group.
	code, out, errOut = runCLI(t, "{\"key\":\"c\"}\n{\"nope\":1}\n", append([]string{"submit", "-g", "g2", "--wait"}, conn...)...)
	if code != exitError || !strings.Contains(errOut, "line 2") || !strings.Contains(errOut, "(the group was sealed with the 1 job submitted before it)") || !strings.Contains(out, "1 job submitted") {
		t.Errorf("bad line: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}

	code, out, errOut = runCLI(t, "", append([]string{"status", "--json"}, conn...)...)
	var st coordinator.Status
	if code != exitOK || json.Unmarshal([]byte(out), &st) != nil {
		t.Fatalf("status --json: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	// Finished groups leave the coordinator's index, so only the totals remember the jobs.
	if len(st.Workers) != 1 || st.Workers[0].ID != "w1" || st.Totals.Admitted != 7 || st.Totals.Released != 7 {
		t.Errorf("status: %+v", st)
	}
	code, out, _ = runCLI(t, "", append([]string{"status"}, conn...)...)
	for _, want := range []string{"namespace cli", "WORKERS (1 live", "w1", "eu"} {
		if code != exitOK || !strings.Contains(out, want) {
			t.Errorf("status: exit %d, output lacks %q:\n%s", code, want, out)
		}
	}
}

// TestStatusFlagsResourcesWithoutHolders checks the human status of a job that waits for a
// resource no worker holds.
func TestStatusFlagsResourcesWithoutHolders(t *testing.T) {
	t.Parallel()
	srv := jstest.New(t)
	conn := []string{"--nats", srv.ClientURL(), "--namespace", "unheld", "--log-level", "warn"}
	initNamespace(t, conn)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append([]string{"coordinator"}, conn...), nil, &bytes.Buffer{}, &bytes.Buffer{})
	}()
	defer func() {
		cancel()
		if code := <-done; code != exitOK {
			t.Errorf("coordinator: exit %d", code)
		}
	}()
	if code, out, errOut := runCLI(t, `{"key":"x","require":["gpu"]}`, append([]string{"submit", "-g", "g"}, conn...)...); code != exitOK {
		t.Fatalf("submit: exit %d\n%s%s", code, out, errOut)
	}
	testwait.For(t, 30*time.Second, "status to flag gpu", func() bool {
		code, out, _ := runCLI(t, "", append([]string{"status"}, conn...)...)
		return code == exitOK && strings.Contains(out, "no live worker holds gpu") &&
			strings.Contains(out, "! jobs wait for resources no live worker holds: gpu")
	})
}

// newCLINamespace starts an embedded server and initialises a namespace on it, and returns the
// connection flags of every command on it.
func newCLINamespace(t *testing.T, namespace string) []string {
	t.Helper()
	srv := jstest.New(t)
	conn := []string{"--nats", srv.ClientURL(), "--namespace", namespace, "--log-level", "warn"}
	initNamespace(t, conn)
	return conn
}

// background runs long-lived weave commands (coordinator, worker), each given as its arguments
// with conn inserted after the command's name and before any "--", until the test ends; it fails
// the test if one exits other than 0.
func background(t *testing.T, conn []string, cmds ...[]string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, len(cmds))
	for _, c := range cmds {
		args := append(append([]string{c[0]}, conn...), c[1:]...)
		go func() { done <- run(ctx, args, nil, &bytes.Buffer{}, &bytes.Buffer{}) }()
	}
	t.Cleanup(func() {
		cancel()
		for range cmds {
			if code := <-done; code != exitOK {
				t.Errorf("a background weave command exited %d", code)
			}
		}
	})
}

// initNamespace runs 'weave init' with the connection flags conn.
func initNamespace(t *testing.T, conn []string) {
	t.Helper()
	if code, out, errOut := runCLI(t, "", append([]string{"init"}, conn...)...); code != exitOK {
		t.Fatalf("init: exit %d\n%s%s", code, out, errOut)
	}
}

// TestCLIInit: init creates the streams once, then finds them; it reports streams that differ
// from its flags and exits 1. Producers and workers do not create streams: on a namespace nobody
// initialised they fail at once, naming it.
func TestCLIInit(t *testing.T) {
	t.Parallel()
	srv := jstest.New(t)
	conn := []string{"--nats", srv.ClientURL(), "--namespace", "acme", "--log-level", "warn"}
	code, out, errOut := runCLI(t, "", append([]string{"init"}, conn...)...)
	if code != exitOK || strings.Count(out, "created acme_") != 7 || !strings.Contains(out, `namespace "acme" is ready`) {
		t.Fatalf("init: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	code, out, errOut = runCLI(t, "", append([]string{"init"}, conn...)...)
	if code != exitOK || strings.Count(out, "found   acme_") != 7 || strings.Contains(out, "created") {
		t.Fatalf("init again: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	code, out, errOut = runCLI(t, "", append([]string{"init", "--dedup-window", "5m"}, conn...)...)
	if code != exitError || !strings.Contains(out, "found   acme_JOBS, different: dedup window 2m0s, want 5m0s") ||
		!strings.Contains(errOut, "1 streams exist with another configuration") {
		t.Fatalf("init with another dedup window: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}

	typo := []string{"--nats", srv.ClientURL(), "--namespace", "acmee", "--log-level", "warn"}
	want := `namespace "acmee" is not initialised (stream acmee_JOBS not found): run 'weave init --namespace acmee' or start 'weave coordinator --namespace acmee'`
	code, out, errOut = runCLI(t, `{"key":"a"}`, append([]string{"submit", "-g", "g"}, typo...)...)
	if code != exitError || !strings.Contains(errOut, want) || out != "" {
		t.Errorf("submit to a misspelt namespace (nothing on stdout): exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	for _, args := range [][]string{{"failed", "list"}, {"cancel", "-g", "g"}, {"status", "--timeout", "200ms"}} {
		code, out, errOut = runCLI(t, "", append(args, typo...)...)
		if code != exitError || !strings.Contains(errOut, want) {
			t.Errorf("%v on a misspelt namespace: exit %d\nstdout: %s\nstderr: %s", args, code, out, errOut)
		}
	}
	// --wait-namespace 0: at once (by default a worker waits a minute for its coordinator).
	code, out, errOut = runCLI(t, "", append(append([]string{"worker", "--wait-namespace", "0"}, typo...), "--", "true")...)
	if code != exitError || !strings.Contains(errOut, `namespace "acmee" is not initialised (stream acmee_WORK not found)`) {
		t.Errorf("worker on a misspelt namespace: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	// A bad flag is said before connecting, which would wait for a server that is not there.
	code, out, errOut = runCLI(t, "", "worker", "--nats", "nats://127.0.0.1:1", "--wait-namespace", "-1s", "--", "true")
	if code != exitUsage || !strings.Contains(errOut, "--wait-namespace -1s is negative") {
		t.Errorf("worker with a negative --wait-namespace and no server: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	code, out, errOut = runCLI(t, "", "coordinator", "--nats", "nats://127.0.0.1:1", "--queue-ahead", "-3")
	if code != exitUsage || !strings.Contains(errOut, "--queue-ahead is -3") {
		t.Errorf("coordinator with --queue-ahead -3 and no server: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	nc := jstest.NewConn(t, srv.ClientURL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	streams := js.StreamNames(t.Context())
	for name := range streams.Name() {
		if strings.HasPrefix(name, "acmee") {
			t.Errorf("stream %s created", name)
		}
	}
	if err := streams.Err(); err != nil {
		t.Fatal(err)
	}
}

// TestSubmitWaitSaysWhy: submit --wait says why the jobs may wait for ever instead of waiting
// in silence: no coordinator serves the namespace; one does but no worker has joined it (a
// newcomer's first run forgets the worker); or, after a while, the jobs require a resource no
// live worker holds.
func TestSubmitWaitSaysWhy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		namespace string
		run       [][]string // long-lived commands the namespace has
		ready     string     // in weave status once they run ("": none expected)
		line      string
		timeout   string // --wait-timeout
		request   string // --timeout: short where no coordinator answers
		want      []string
	}{
		{"lonely", nil, "", `{"key":"a"}`, "1s", "300ms",
			[]string{`no coordinator answers on namespace "lonely"`, "'weave coordinator --namespace lonely'"}},
		{"idle", [][]string{{"coordinator"}}, "WORKERS", `{"key":"a"}`, "1s", "5s",
			[]string{`no worker has joined namespace "idle"`, "'weave worker --namespace idle -- COMMAND'"}},
		{"gpuless", [][]string{{"coordinator"}, {"worker", "--id", "w", "--", "cat"}}, "WORKERS (1 live", `{"key":"a","require":["gpu"]}`, "6s", "5s",
			[]string{`group "g": 1 pending job requires resources no live worker holds`}},
	} {
		t.Run(tc.namespace, func(t *testing.T) {
			t.Parallel()
			conn := newCLINamespace(t, tc.namespace)
			if len(tc.run) > 0 {
				background(t, conn, tc.run...)
			}
			if tc.ready != "" {
				testwait.For(t, 30*time.Second, "the namespace's commands to run", func() bool {
					code, out, _ := runCLI(t, "", append([]string{"status"}, conn...)...)
					return code == exitOK && strings.Contains(out, tc.ready)
				})
			}
			code, out, errOut := runCLI(t, tc.line+"\n", append([]string{"submit", "-g", "g", "--wait", "--wait-timeout", tc.timeout, "--timeout", tc.request}, conn...)...)
			want := append(tc.want, `group "g" did not finish within --wait-timeout `+tc.timeout)
			for _, w := range want {
				if code != exitError || !strings.Contains(errOut, w) {
					t.Errorf("want exit %d and %q; exit %d\nstdout: %s\nstderr: %s", exitError, w, code, out, errOut)
				}
			}
		})
	}
}

// TestSubmitIntoRunningGroup: submitting a group ID whose last incarnation is sealed and still
// running (here no coordinator serves the namespace, so it never finishes) submits nothing and
// says so, without the note that the group was sealed (it said "the group was sealed with the 0
// jobs submitted before", which was not true) nor a count of jobs submitted on stdout.
func TestSubmitIntoRunningGroup(t *testing.T) {
	t.Parallel()
	conn := newCLINamespace(t, "busy")
	if code, out, errOut := runCLI(t, `{"key":"a"}`+"\n", append([]string{"submit", "-g", "g"}, conn...)...); code != 0 {
		t.Fatalf("first submit: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	code, out, errOut := runCLI(t, `{"key":"b"}`+"\n", append([]string{"submit", "-g", "g"}, conn...)...)
	if code != exitError || !strings.Contains(errOut, `group "g" is sealed and still running, so nothing was submitted`) ||
		strings.Contains(errOut, "was sealed with") || strings.Contains(out, "submitted") {
		t.Errorf("second submit: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
}

// TestSubmitSingle: submit --single submits one job as its own group and --wait prints its
// outcome; more than one job is a usage error.
func TestSubmitSingle(t *testing.T) {
	t.Parallel()
	conn := newCLINamespace(t, "one")
	background(t, conn, []string{"coordinator"}, []string{"worker", "--id", "w", "--", "cat"})
	code, out, errOut := runCLI(t, `{"key":"k","payload":"hi"}`, append([]string{"submit", "--single", "--wait", "--wait-timeout", "30s"}, conn...)...)
	if code != exitOK || !strings.Contains(out, "job 1 submitted as group \"job-") || !strings.Contains(out, "job 1 done after 1 attempt") {
		t.Fatalf("submit --single: exit %d\n%s%s", code, out, errOut)
	}
	// --outcomes: the outcome as a JSON line on stdout, the rest on stderr, as for a group.
	code, out, errOut = runCLI(t, `{"key":"o","payload":"out"}`, append([]string{"submit", "--single", "-g", "solo", "--outcomes", "--wait-timeout", "30s"}, conn...)...)
	var line struct {
		ID                 uint64
		Key, State, Result string
	}
	if err := json.Unmarshal([]byte(out), &line); code != exitOK || err != nil || line.Key != "o" || line.State != "done" || line.Result != "out" ||
		!strings.Contains(errOut, `submitted as group "solo"`) || !strings.Contains(errOut, "done after 1 attempt") {
		t.Fatalf("submit --single --outcomes: exit %d, %v\nstdout: %s\nstderr: %s", code, err, out, errOut)
	}
	code, out, errOut = runCLI(t, "{\"key\":\"a\"}\n{\"key\":\"b\"}\n", append([]string{"submit", "--single", "-g", "two"}, conn...)...)
	if code != exitUsage || !strings.Contains(errOut, "more than one job") {
		t.Fatalf("submit --single of two jobs: exit %d\n%s%s", code, out, errOut)
	}
}

// TestSubmitSingles: submit --singles submits every line as a single job of its own group (the
// line's, or a generated one), a duplicate once; --outcomes prints each job's line with its
// outcome; --wait exits 1 when a job did not succeed; --group with it, and a group field without
// it, are refused.
func TestSubmitSingles(t *testing.T) {
	t.Parallel()
	conn := newCLINamespace(t, "many")
	background(t, conn, []string{"coordinator"}, []string{"worker", "--id", "w", "--", "sh", "-c", `read l; [ "$l" = fail ] && exit 1; echo "ran $l"`})
	var in strings.Builder
	for i := range 2500 { // more than one chunk of SubmitMany
		fmt.Fprintf(&in, "{\"payload\":\"%d\"}\n", i)
	}
	in.WriteString(`{"group":"tenant-7","key":"k","payload":"mine"}` + "\n")
	in.WriteString(`{"group":"tenant-7","key":"k","payload":"mine"}` + "\n")
	code, out, errOut := runCLI(t, in.String(), append([]string{"submit", "--singles", "--outcomes", "--wait-timeout", "2m"}, conn...)...)
	if code != exitOK || !strings.Contains(errOut, "2501 jobs submitted as single jobs, 1 duplicates dropped") ||
		!strings.Contains(errOut, "2502 single jobs complete: 2502 done, 0 failed, 0 canceled") {
		t.Fatalf("submit --singles: exit %d\nstderr: %s", code, errOut)
	}
	type line struct {
		Group     string
		ID        uint64
		Duplicate bool
		Outcome   struct{ State, Result string }
	}
	groups := map[string]bool{}
	var last []line
	for _, text := range strings.Split(strings.TrimSpace(out), "\n") {
		var l line
		if err := json.Unmarshal([]byte(text), &l); err != nil || l.Outcome.State != "done" {
			t.Fatalf("outcome line %q: %+v, %v", text, l, err)
		}
		if !l.Duplicate && groups[l.Group] {
			t.Fatalf("group %q given to two jobs", l.Group)
		}
		groups[l.Group] = true
		last = append(last, l)
	}
	if n := len(last); n != 2502 || last[n-2].Group != "tenant-7" || last[n-2].Outcome.Result != "ran mine\n" ||
		!last[n-1].Duplicate || last[n-1].ID != last[n-2].ID || last[0].Outcome.Result != "ran 0\n" {
		t.Fatalf("%d outcome lines; the last two: %+v; the first: %+v", n, last[max(0, n-2):], last[0])
	}
	code, out, errOut = runCLI(t, `{"payload":"fail"}`+"\n", append([]string{"submit", "--singles", "--wait", "--wait-timeout", "2m"}, conn...)...)
	if code != exitError || !strings.Contains(out, "1 single job complete: 0 done, 1 failed, 0 canceled") {
		t.Fatalf("submit --singles --wait of a failing job: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if code, _, errOut := runCLI(t, `{}`, append([]string{"submit", "--singles", "-g", "g"}, conn...)...); code != exitUsage || !strings.Contains(errOut, "not with --single or --group") {
		t.Fatalf("submit --singles --group: exit %d\n%s", code, errOut)
	}
	if code, _, errOut := runCLI(t, `{"group":"g1"}`, append([]string{"submit", "-g", "g2"}, conn...)...); code != exitError || !strings.Contains(errOut, "for submit --singles only") {
		t.Fatalf("a group field without --singles: exit %d\n%s", code, errOut)
	}
}

// TestSubmitAfter: submit --after holds a group until the group it names has completed: 'weave
// group' says what it waits for, dependency_missing is raised while that group is not published,
// and it runs once that group is published and done; a single job takes --after too; bad --when
// and --if-failed values are usage errors.
func TestSubmitAfter(t *testing.T) {
	t.Parallel()
	conn := newCLINamespace(t, "after")
	background(t, conn, []string{"coordinator", "--alarm-missing-after", "1s"}, []string{"worker", "--id", "w", "--", "cat"})
	if code, out, errOut := runCLI(t, `{"key":"i","payload":"index"}`, append([]string{"submit", "-g", "index", "--after", "crawl", "--priority", "3"}, conn...)...); code != exitOK {
		t.Fatalf("submit --after: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := runCLI(t, `{"payload":"mail"}`, append([]string{"submit", "--single", "-g", "mail", "--after", "index"}, conn...)...); code != exitOK {
		t.Fatalf("submit --single --after: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut := runCLI(t, "", append([]string{"group", "index"}, conn...)...)
	if code != exitOK || !strings.Contains(out, `group "index": held until the groups it runs after have completed as it asks: crawl (success; not published yet)`) ||
		!strings.Contains(out, " waiting ") ||
		!strings.Contains(out, `group "index": followed by mail (they run after it)`) ||
		!strings.Contains(out, `group "index": priority 3: its jobs go before those of lower priorities`) {
		t.Fatalf("group index: exit %d\n%s%s", code, out, errOut)
	}
	// A second later, nobody has published crawl: the alarm says so.
	testwait.For(t, 30*time.Second, "dependency_missing to be raised", func() bool {
		_, out, _ := runCLI(t, "", append([]string{"status"}, conn...)...)
		return strings.Contains(out, "dependency_missing") && strings.Contains(out, "index waits for crawl")
	})
	if code, out, errOut := runCLI(t, `{"key":"a","payload":"x"}`, append([]string{"submit", "-g", "crawl", "--wait", "--wait-timeout", "30s"}, conn...)...); code != exitOK {
		t.Fatalf("submit crawl: exit %d\n%s%s", code, out, errOut)
	}
	testwait.For(t, 30*time.Second, "index and mail to finish after crawl", func() bool {
		_, out, _ := runCLI(t, "", append([]string{"groups"}, conn...)...)
		return strings.Count(out, "complete") >= 3
	})
	for _, bad := range [][]string{{"--when", "sometimes"}, {"--if-failed", "retry"}, {"--when", "failure", "--if-failed", "wait"}, {"--priority", "10"}} {
		args := append(append([]string{"submit", "-g", "x", "--after", "y"}, bad...), conn...)
		if code, _, errOut := runCLI(t, "", args...); code != exitUsage {
			t.Errorf("submit %v: exit %d, want %d\n%s", bad, code, exitUsage, errOut)
		}
	}
}
