package main

import (
	"strings"
	"testing"

	"github.com/weavejobs/weave/integration/jstest"
)

// TestCLISubmitNamesTheLine: a job of a file that the dispatcher refuses is named by its line
// (blank lines counted, from 1) and its rank among the jobs (from 1), not by an index from 0.
func TestCLISubmitNamesTheLine(t *testing.T) {
	t.Parallel()
	srv := jstest.New(t)
	conn := []string{"--nats", srv.ClientURL(), "--namespace", "lines", "--log-level", "warn"}
	initNamespace(t, conn)
	in := `{"key":"a"}` + "\n\n" + `{"key":"b","run_at":"2999-01-01T00:00:00Z"}` + "\n"
	code, out, errOut := runCLI(t, in, append([]string{"submit", "-g", "g"}, conn...)...)
	if code != exitError || !strings.Contains(errOut, `line 3: invalid job: the 2nd job (key "b") of group "g": delayed more than`) {
		t.Fatalf("submit: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
}
