package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/weavejobs/weave/internal/wire"
)

// TestAuthCommand: weave auth prints the users asked for, in either format, and refuses bad
// flags with a usage error.
func TestAuthCommand(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args       []string
		code       int
		want, not  []string
		wantStderr string
	}{
		{
			args: []string{"auth", "--namespace", "acme"},
			code: exitOK,
			want: []string{`user: "acme-coordinator"`, `user: "acme-producer"`, `user: "acme-worker-any"`, `user: "acme-observer"`, `"acme.hb.any.*"`},
		},
		{
			args: []string{"auth", "--role", "worker", "--worker", "w1=eu,gpu", "--worker", "w2="},
			code: exitOK,
			want: []string{`user: "weave-worker-w1"`, `"weave.hb.` + wire.PoolKey([]string{"eu", "gpu"}) + `.w1"`, `user: "weave-worker-w2"`, `"weave.ev.report.any.w2"`},
			not:  []string{"weave-coordinator", "weave-observer"},
		},
		{
			args: []string{"auth", "--role", "observer", "--format", "nsc", "--account", "OPS"},
			code: exitOK,
			want: []string{"nsc add user --account 'OPS' --name 'weave-observer'", "--allow-sub 'weave.alarm.*,_INBOX_weave-observer.>'"},
		},
		{args: []string{"auth", "--role", "admin"}, code: exitUsage, wantStderr: `--role "admin"`},
		{args: []string{"auth", "--worker", "w1"}, code: exitUsage, wantStderr: "want ID=resources"},
		{args: []string{"auth", "--worker", "bad.id=a"}, code: exitUsage, wantStderr: "worker ID"},
		{args: []string{"auth", "--format", "yaml"}, code: exitUsage, wantStderr: "--format"},
	} {
		var out, errOut bytes.Buffer
		code := run(context.Background(), tc.args, strings.NewReader(""), &out, &errOut)
		if code != tc.code {
			t.Errorf("weave %q: exit %d, want %d\n%s%s", tc.args, code, tc.code, out.String(), errOut.String())
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("weave %q: output lacks %q", tc.args, w)
			}
		}
		for _, w := range tc.not {
			if strings.Contains(out.String(), w) {
				t.Errorf("weave %q: output has %q", tc.args, w)
			}
		}
		if !strings.Contains(errOut.String(), tc.wantStderr) {
			t.Errorf("weave %q: stderr %q lacks %q", tc.args, errOut.String(), tc.wantStderr)
		}
	}
}
