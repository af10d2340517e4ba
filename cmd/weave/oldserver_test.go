//go:build unix

package main

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weavejobs/weave/internal/natsver"
	"github.com/weavejobs/weave/internal/testwait"
)

// oldServerEnv names a nats-server binary older than natsver.Minimum; default: the one Debian
// packages (apt-get install nats-server gives 2.9.10 on Debian 12), which .ci/run installs.
const oldServerEnv = "WEAVE_OLD_NATS_SERVER"

// startOldServer runs an old nats-server process with JetStream for the test and returns its
// URL. It skips the test, saying why, when no such binary is installed.
func startOldServer(t *testing.T) string {
	t.Helper()
	bin := os.Getenv(oldServerEnv)
	if bin == "" {
		bin = "/usr/sbin/nats-server"
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Skipf("no old nats-server to test against (%s: %v): install Debian's (apt-get install nats-server) or set $%s", bin, err, oldServerEnv)
	}
	version := strings.TrimPrefix(strings.TrimSpace(strings.TrimPrefix(string(out), "nats-server:")), "v")
	if natsver.Check(version) == nil {
		t.Skipf("%s is version %s, not older than %s: set $%s to an older one", bin, version, natsver.Minimum, oldServerEnv)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(bin, "-js", "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-sd", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	testwait.Seen(t, 30*time.Second, bin+" to accept connections", func() (bool, string) {
		select {
		case err := <-exited:
			exited <- err // for the cleanup's wait
			t.Fatalf("%s exited: %v", bin, err)
		default:
		}
		nc, err := nats.Connect(url)
		if err != nil {
			return false, err.Error()
		}
		nc.Close()
		return true, ""
	})
	return url
}

// TestOldServerRefused: against a nats-server older than Weave needs, every command that uses
// JetStream stops at once with one sentence naming both versions, instead of failing deep in a
// JetStream call (the lease bucket's "limit marker TTLs not supported by server").
func TestOldServerRefused(t *testing.T) {
	t.Parallel()
	url := startOldServer(t)
	conn := []string{"--nats", url, "--namespace", "old", "--log-level", "error"}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	want := "nats-server " + nc.ConnectedServerVersion() + " is too old: Weave needs " + natsver.Minimum + " or later"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, args := range [][]string{
		{"coordinator"},
		{"init"},
		{"worker", "--", "true"},
		{"submit", "-g", "g"},
		{"failed", "list"},
		{"cancel", "-g", "g"},
	} {
		full := append(slices.Clone(args), conn...)
		if i := slices.Index(args, "--"); i >= 0 { // flags before "--"
			full = slices.Concat(args[:i], conn, args[i:])
		}
		var out, errOut strings.Builder
		code := run(ctx, full, strings.NewReader(`{"key":"a"}`), &out, &errOut)
		if code != exitError || !strings.Contains(errOut.String(), want) {
			t.Errorf("weave %v: exit %d\nstdout: %s\nstderr: %s\nwant exit 1 and %q", args, code, out.String(), errOut.String(), want)
		}
	}
	if err := ctx.Err(); errors.Is(err, context.DeadlineExceeded) {
		t.Fatal("the commands did not fail fast")
	}
}
