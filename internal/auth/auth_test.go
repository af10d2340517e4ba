package auth

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/weavejobs/weave/internal/wire"
)

func mustNames(t *testing.T, ns string) wire.Names {
	t.Helper()
	n, err := wire.NewNames(ns)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestWorkerPermissions: a worker may publish exactly its own heartbeat, join and report
// subjects, create, pull and ack its own pool's consumer, and check the streams; it subscribes to
// cancellations and its own inbox.
func TestWorkerPermissions(t *testing.T) {
	t.Parallel()
	n := mustNames(t, "ns")
	pool := wire.PoolKey([]string{"gpu", "eu"})
	p, err := For(n, User{Role: Worker, WorkerID: "w1", Resources: []string{"gpu", "eu", "gpu"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"$JS.API.STREAM.INFO.ns_JOBS", "$JS.API.STREAM.INFO.ns_WORK", "$JS.API.STREAM.INFO.ns_EVENTS",
		"$JS.API.STREAM.INFO.ns_RESULTS", "$JS.API.STREAM.INFO.ns_REJECTED",
		"ns.hb." + pool + ".w1", "ns.api.join." + pool + ".w1", "ns.ev.report." + pool + ".w1",
		"$JS.API.CONSUMER.CREATE.ns_WORK.work-" + pool + ".ns.work." + pool,
		"$JS.API.CONSUMER.MSG.NEXT.ns_WORK.work-" + pool,
		"$JS.ACK.ns_WORK.work-" + pool + ".>",
	}
	if !slices.Equal(p.Publish, want) {
		t.Errorf("publish\n got %q\nwant %q", p.Publish, want)
	}
	if wantSub := []string{"ns.cancel", "ns.api.held." + pool, "ns.rollcall", "_INBOX_ns-worker-w1.>"}; !slices.Equal(p.Subscribe, wantSub) {
		t.Errorf("subscribe %q, want %q", p.Subscribe, wantSub)
	}
	if !p.AllowResponses || p.InboxPrefix != "_INBOX_ns-worker-w1" {
		t.Errorf("allow responses %v, inbox %q", p.AllowResponses, p.InboxPrefix)
	}

	any, err := For(n, User{Role: Worker, WorkerID: AnyWorker})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(any.Publish, "ns.ev.report.any.*") || any.InboxPrefix != "_INBOX_ns-worker-any" {
		t.Errorf("a pool-wide worker user: publish %q, inbox %q", any.Publish, any.InboxPrefix)
	}
}

// TestRolePermissions checks, per role, subjects it must and must not be allowed: only the
// coordinator creates streams, releases work, writes outcomes or rescue reports; only the
// producer (and the coordinator's own streams access) publishes groups; the observer publishes
// nothing but status and inspection requests, consumer reads and direct gets.
func TestRolePermissions(t *testing.T) {
	t.Parallel()
	n := mustNames(t, "ns")
	for _, tc := range []struct {
		role             Role
		pub, notPub, sub []string
		responses        bool
	}{
		{
			role:      Coordinator,
			pub:       []string{"$JS.API.STREAM.CREATE.ns_JOBS", "$JS.API.STREAM.CREATE.KV_ns_LEASE", "$KV.ns_LEASE.>", "$JS.API.INFO", "ns.work.>", "ns.out.>", "ns.ev.coord", "ns.ev.report.*.~coordinator", "ns.rejected", "ns.cancel", "ns.rollcall", "ns.reply.>", "$JS.API.STREAM.PURGE.ns_EVENTS", "ns.api.standby", "ns.group.>", "ns.jobs.>", "ns.alarm.*"},
			notPub:    []string{"ns.ev.report.>", "ns.hb.*.*", "$JS.API.STREAM.DELETE.ns_JOBS"},
			sub:       []string{"ns.hb.*.*", "ns.api.join.*.*", "ns.api.status", "ns.api.inspect", "ns.api.standby", "_INBOX_ns-coordinator.>"},
			responses: true,
		},
		{
			role:   Producer,
			pub:    []string{"ns.group.>", "ns.jobs.>", "ns.api.status", "ns.api.inspect", "ns.api.held.*", "$JS.API.DIRECT.GET.ns_RESULTS.>", "$JS.API.DIRECT.GET.ns_JOBS", "$JS.API.STREAM.MSG.GET.ns_RESULTS"},
			notPub: []string{"$JS.API.STREAM.CREATE.ns_JOBS", "ns.out.>", "ns.work.>", "ns.ev.>", "ns.cancel", "ns.rollcall", "ns.alarm.*", "$JS.API.CONSUMER.CREATE.ns_REJECTED.>", "$JS.API.CONSUMER.CREATE.ns_RESULTS.*.ns.out.*", "$JS.API.STREAM.MSG.GET.ns_JOBS", "$JS.API.STREAM.MSG.DELETE.ns_RESULTS"},
			sub:    []string{"ns.out.>", "ns.reply.>", "ns.alarm.*", "_INBOX_ns-producer.>"},
		},
		{
			role:   Observer,
			pub:    []string{"ns.api.status", "ns.api.inspect", "ns.api.held.*", "$JS.API.DIRECT.GET.ns_RESULTS.>", "$JS.API.DIRECT.GET.ns_JOBS"},
			notPub: []string{"ns.group.>", "ns.jobs.>", "$JS.API.STREAM.CREATE.ns_RESULTS", "ns.api.standby", "ns.alarm.*", "$JS.API.CONSUMER.CREATE.ns_RESULTS.>"},
			sub:    []string{"ns.alarm.*", "_INBOX_ns-observer.>"},
		},
	} {
		p, err := For(n, User{Role: tc.role})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range tc.pub {
			if !slices.Contains(p.Publish, s) {
				t.Errorf("%s may not publish %q", tc.role, s)
			}
		}
		for _, s := range tc.notPub {
			if slices.Contains(p.Publish, s) {
				t.Errorf("%s may publish %q", tc.role, s)
			}
		}
		if !slices.Equal(p.Subscribe, tc.sub) {
			t.Errorf("%s subscribes %q, want %q", tc.role, p.Subscribe, tc.sub)
		}
		if p.AllowResponses != tc.responses {
			t.Errorf("%s allow_responses %v", tc.role, p.AllowResponses)
		}
		for _, s := range append(p.Publish, p.Subscribe...) {
			if !validSubject(s) {
				t.Errorf("%s: %q is not a valid subject", tc.role, s)
			}
		}
		if strings.Contains(strings.Join(p.Subscribe, " "), "_INBOX.>") {
			t.Errorf("%s subscribes to everyone's inboxes", tc.role)
		}
	}
}

// validSubject: non-empty tokens, wildcards only as whole tokens, > only last.
func validSubject(s string) bool {
	toks := strings.Split(s, ".")
	for i, tok := range toks {
		if tok == "" || strings.ContainsAny(tok, " \t") {
			return false
		}
		if (strings.Contains(tok, "*") && tok != "*") || (strings.Contains(tok, ">") && (tok != ">" || i != len(toks)-1)) {
			return false
		}
	}
	return true
}

func TestResolveRejects(t *testing.T) {
	t.Parallel()
	n := mustNames(t, "ns")
	for _, u := range []User{
		{Role: "admin"},
		{Role: Worker},
		{Role: Worker, WorkerID: "has.dot"},
		{Role: Worker, WorkerID: "cpu-*"},
		{Role: Worker, WorkerID: "w", Resources: []string{"a,b"}},
		{Role: Coordinator, Resources: []string{"a"}},
		{Role: Producer, WorkerID: "w"},
		{Role: Observer, Name: "bad name"},
	} {
		if _, err := For(n, u); !errors.Is(err, ErrBadUser) {
			t.Errorf("For(%+v) = %v, want ErrBadUser", u, err)
		}
	}
}

// TestRender: the server block names every user with its password variable and permissions; the
// nsc commands carry the same lists, quoted for the shell.
func TestRender(t *testing.T) {
	t.Parallel()
	n := mustNames(t, "ns")
	entries, err := Entries(n, []User{{Role: Coordinator}, {Role: Worker, WorkerID: "w1", Resources: []string{"eu"}}})
	if err != nil {
		t.Fatal(err)
	}
	var server, nsc bytes.Buffer
	if err := WriteServerConfig(&server, n, entries); err != nil {
		t.Fatal(err)
	}
	if err := WriteNSC(&nsc, n, "ACC", entries); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`user: "ns-coordinator"`, "password: $NS_COORDINATOR_PASSWORD", "allow_responses: true",
		`user: "ns-worker-w1"`, "password: $NS_WORKER_W1_PASSWORD", `"ns.ev.report.` + wire.PoolKey([]string{"eu"}) + `.w1"`,
		`client inbox prefix "_INBOX_ns-worker-w1"`,
	} {
		if !strings.Contains(server.String(), want) {
			t.Errorf("server block lacks %q:\n%s", want, server.String())
		}
	}
	for _, want := range []string{
		"nsc add user --account 'ACC' --name 'ns-worker-w1'",
		"--allow-sub 'ns.cancel,ns.api.held." + wire.PoolKey([]string{"eu"}) + ",ns.rollcall,_INBOX_ns-worker-w1.>'",
		"--allow-pub-response=1",
		"'$JS.API.STREAM.INFO.ns_JOBS,",
	} {
		if !strings.Contains(nsc.String(), want) {
			t.Errorf("nsc commands lack %q:\n%s", want, nsc.String())
		}
	}
	if strings.Count(nsc.String(), "--allow-pub-response") != 2 {
		t.Errorf("the coordinator and the worker (held-job requests) answer requests:\n%s", nsc.String())
	}
}
