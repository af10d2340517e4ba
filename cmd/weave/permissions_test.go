//go:build unix

package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// startAuthServer runs an embedded nats-server with JetStream whose users have the given
// permissions (nil: all), each with its name as password. It returns the client URL.
func startAuthServer(t *testing.T, users map[string]*server.Permissions) string {
	t.Helper()
	o := &server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true}
	for name, p := range users {
		o.Users = append(o.Users, &server.User{Username: name, Password: name, Permissions: p})
	}
	ns, err := server.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	if !ns.ReadyForConnections(30 * time.Second) {
		t.Fatal("server not ready")
	}
	return ns.ClientURL()
}

func allow(subjects ...string) *server.SubjectPermission {
	return &server.SubjectPermission{Allow: subjects}
}

// TestPermissionErrorsFailFast: a command whose user lacks a permission it needs fails at once
// with the server's refusal, naming the subject, instead of waiting for its timeout (cancel waited
// 10s and then said only "context deadline exceeded").
func TestPermissionErrorsFailFast(t *testing.T) {
	t.Parallel()
	url := startAuthServer(t, map[string]*server.Permissions{
		"admin": nil,
		// May not publish control messages (open, seal, cancel).
		"nocancel": {Publish: allow("$JS.API.>", "perm.jobs.>"), Subscribe: allow("_INBOX.>", "perm.reply.>")},
		// May publish a cancel but not receive the coordinator's answer.
		"noreply": {Publish: allow("$JS.API.>", "perm.group.>"), Subscribe: allow("_INBOX.>")},
		// May not ask the coordinator for its status.
		"nostatus": {Publish: allow("$JS.API.>"), Subscribe: allow("_INBOX.>")},
		// May not use the JetStream API.
		"noapi": {Publish: allow("perm.>"), Subscribe: allow("_INBOX.>")},
	})
	conn := func(user string) []string {
		return []string{"--nats", url, "--namespace", "perm", "--log-level", "error", "--user", user, "--password", user}
	}
	initNamespace(t, conn("admin"))

	for _, tc := range []struct {
		user string
		args []string
		want string
	}{
		{"nocancel", []string{"cancel", "-g", "g"}, `Permissions Violation for Publish to "perm.group.g"`},
		{"nocancel", []string{"cancel", "-g", "g", "--job", "7"}, `Permissions Violation for Publish to "perm.group.g"`},
		{"noreply", []string{"cancel", "-g", "g"}, `Permissions Violation for Subscription to "perm.reply.`},
		{"nostatus", []string{"status"}, `Permissions Violation for Publish to "perm.api.status"`},
		{"noapi", []string{"failed", "list"}, `Permissions Violation for Publish to "$JS.API.STREAM.INFO.perm_JOBS"`},
		{"noapi", []string{"submit", "-g", "g"}, `Permissions Violation for Publish to "$JS.API.STREAM.INFO.perm_JOBS"`},
		// Publish seals a group whose open failed, with a fresh context bounded by --timeout
		// (not the command's context): this case checks the message, not the speed.
		{"nocancel", []string{"submit", "-g", "g"}, `Permissions Violation for Publish to "perm.group.g"`},
	} {
		// --timeout is far longer than the test's deadline: only the server's refusal can end
		// the command in time.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var out, errOut strings.Builder
		timeout := "10m"
		if tc.args[0] == "submit" {
			timeout = "1s"
		}
		code := run(ctx, slices.Concat(tc.args, []string{"--timeout", timeout}, conn(tc.user)), strings.NewReader(`{"key":"a"}`), &out, &errOut)
		cancel()
		if code != exitError || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%s: weave %v: exit %d\nstdout: %s\nstderr: %s\nwant exit 1 and %q", tc.user, tc.args, code, out.String(), errOut.String(), tc.want)
		}
	}
}
