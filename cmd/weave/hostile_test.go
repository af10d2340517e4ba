//go:build unix

package main

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weavejobs/weave/integration/jstest"
	"github.com/weavejobs/weave/internal/testwait"
	"github.com/weavejobs/weave/worker"
)

// hostileText is what a hostile worker writes: terminal escape sequences (colour, window title,
// a hyperlink, clear screen), C1 controls, a bidi override and zero-width characters.
const hostileText = "\x1b[31mRED\x1b[0m \x1b]0;PWNED-TITLE\x07 \x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\ \x1b[2J\x1b[H" +
	" \u0085\u009b31m invoice\u202efdp.exe\u202c zw\u200b\u200d\ufeffend"

// TestCLIHostileWorker: a command run by weave worker writes escape sequences, C1 controls, bidi
// and zero-width characters to its stderr and fails; a library worker fails jobs with such an
// error of 60 KiB. No command prints those characters raw (not the failed list, with or without
// --history and --full, nor the job, groups, group, limit and schedule lists, nor the worker's
// copy of its command's stderr); long errors are cut with a marker unless --full; and a group ID
// or key holding a bidi override or a zero-width character is refused where it is chosen.
func TestCLIHostileWorker(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	srv := jstest.New(t)
	conn := []string{"--nats", srv.ClientURL(), "--namespace", "hostile", "--log-level", "warn"}
	initNamespace(t, conn)
	script := `printf '%s\n' "$WEAVE_JOB_KEY" >/dev/null; printf '` + strings.ReplaceAll(hostileText, "'", "") + `\n' >&2; exit 65`
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	workerErr := &lockedBuffer{}
	for _, args := range [][]string{
		{"coordinator"},
		{"worker", "--id", "w1", "--heartbeat-interval", "100ms", "--resources", "sh", "--", "sh", "-c", script},
	} {
		full := append(append([]string{args[0]}, conn...), args[1:]...)
		wg.Go(func() {
			if code := run(ctx, full, strings.NewReader(""), &bytes.Buffer{}, workerErr); code != exitOK {
				t.Errorf("weave %s: exit %d", args[0], code)
			}
		})
	}
	// The library worker holds resource big, which the big jobs require.
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("\x1b[2J", 60<<10/4)
	w, err := worker.New(nc, worker.Config{Namespace: "hostile", ID: "w-big", Resources: []string{"big"}}, worker.HandlerFunc(func(context.Context, *worker.Job) ([]byte, error) {
		return nil, worker.Permanent(errors.New(big))
	}))
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() {
		if err := w.Run(ctx); err != nil {
			t.Errorf("library worker: %v", err)
		}
	})
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		nc.Close()
	})
	cli := func(args ...string) (int, string, string) {
		t.Helper()
		return runCLI(t, "", append(args, conn...)...)
	}

	// evil-key requires the command worker's resource: the library worker, which could take a
	// job requiring nothing, fails every job with its own error.
	jobs := `{"key":"evil-key","payload":"x","require":["sh"]}
{"key":"big","payload":"x","require":["big"]}
`
	if code, out, errOut := runCLI(t, jobs, append([]string{"submit", "-g", "g", "--wait", "--wait-timeout", "30s"}, conn...)...); code != exitError || !strings.Contains(out, "2 failed") {
		t.Fatalf("submit: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if code, _, _ := cli("limit", "set", "--group", "g", "--concurrency", "2"); code != exitOK {
		t.Fatalf("limit set: exit %d", code)
	}
	if code, _, errOut := runCLI(t, `{"key":"a","payload":"x"}`+"\n", append([]string{"schedule", "add", "--name", "nightly", "--file", "-", "--every", "1h", "--group", "g-nightly"}, conn...)...); code != exitOK {
		t.Fatalf("schedule add: exit %d %s", code, errOut)
	}
	code, out, _ := cli("job", "--group", "g", "--key", "big")
	if code != exitOK {
		t.Fatalf("job: exit %d", code)
	}
	id := strings.Fields(strings.SplitN(out, "\n", 2)[0])[1]

	for _, args := range [][]string{
		{"failed", "list"},
		{"failed", "list", "--history"},
		{"failed", "list", "--history", "--full"},
		{"job", id},
		{"job", id, "--full"},
		{"job", "--group", "g", "--key", "evil-key"},
		{"groups"},
		{"group", "g"},
		{"limit", "list"},
		{"schedule", "list"},
		{"status"},
		{"failed", "list", "--json"},
		{"job", id, "--json"},
		{"job", "--group", "g", "--key", "evil-key", "--json"},
		{"groups", "--json"},
	} {
		code, out, errOut := cli(args...)
		if code != exitOK {
			t.Errorf("weave %s: exit %d\n%s", strings.Join(args, " "), code, errOut)
			continue
		}
		if raw := rawBytes(out + errOut); len(raw) > 0 {
			t.Errorf("weave %s prints raw characters: %v", strings.Join(args, " "), raw)
		}
		if args[len(args)-1] == "--json" {
			want := `\u001b[31mRED\u001b[0m`
			if args[1] == id {
				want = `\u001b[2J`
			}
			if !strings.Contains(out, want) && args[0] != "groups" {
				t.Errorf("weave %s does not carry the hostile error escaped:\n%s", strings.Join(args, " "), out)
			}
			continue
		}
		full := strings.Contains(strings.Join(args, " "), "--full")
		switch args[0] {
		case "failed":
			if !strings.Contains(out, `\x1b[31mRED\x1b[0m`) || full && !strings.Contains(out, `invoice\u202efdp.exe\u202c zw\u200b\u200d\ufeffend`) {
				t.Errorf("weave %s does not show the hostile error visibly:\n%s", strings.Join(args, " "), out)
			}
			fallthrough
		case "job":
			if args[1] != id {
				break
			}
			cut := strings.Contains(out, "more bytes; --full shows all]")
			if whole := strings.Count(out, `\x1b[2J`) >= len(big)/4; cut == full || whole != full {
				t.Errorf("weave %s: cut %v, whole %v (%d bytes)", strings.Join(args, " "), cut, whole, len(out))
			}
		}
	}
	// The worker's copy of its command's stderr.
	testwait.For(t, 30*time.Second, "the worker to copy the command's stderr", func() bool { return strings.Contains(workerErr.String(), "PWNED-TITLE") })
	if raw := rawBytes(workerErr.String()); len(raw) > 0 {
		t.Errorf("the worker copies its command's stderr raw: %v", raw)
	}
	if !strings.Contains(workerErr.String(), `[job `) || !strings.Contains(workerErr.String(), `\x1b]0;PWNED-TITLE\x07`) {
		t.Errorf("the worker's copy of stderr: %q", workerErr.String())
	}

	// Look-alike names are refused where they are chosen.
	for _, args := range [][]string{
		{"submit", "-g", "invoice\u202efdp.exe"},
		{"submit", "-g", "zw\u200bend"},
		{"limit", "set", "--group", "a\u2066b", "--concurrency", "1"},
	} {
		code, out, errOut := runCLI(t, `{"key":"k","payload":"x"}`+"\n", append(args, conn...)...)
		if code == exitOK || !strings.Contains(errOut, "names may not hold control, format, bidi or zero-width characters") {
			t.Errorf("weave %q: exit %d, %s%s", args, code, out, errOut)
		}
		if raw := rawBytes(out + errOut); len(raw) > 0 {
			t.Errorf("weave %q quotes the name raw: %v", args, raw)
		}
	}
	if code, out, errOut := runCLI(t, `{"key":"k\u202e","payload":"x"}`+"\n", append([]string{"submit", "-g", "g2"}, conn...)...); code == exitOK || !strings.Contains(out+errOut, "bidi") {
		t.Errorf("a key with a bidi override: exit %d, %s%s", code, out, errOut)
	}
}
