package main

import (
	"context"
	"os"
	"testing"

	"github.com/weavejobs/weave/internal/leakcheck"
)

// run starts a server, a coordinator and a worker: all of them stop before it returns.
func TestMain(m *testing.M) { leakcheck.Main(m) }

// The quickstart's output is deterministic; go test checks it.
func Example_quickstart() {
	if err := run(context.Background(), os.Stdout); err != nil {
		panic(err)
	}
	// Output:
	// job-0: done after 1 attempt(s): Hello, Ada!
	// job-1: done after 1 attempt(s): Hello, Grace!
	// job-2: done after 2 attempt(s): Hello, Linus!
	// job-3: done after 1 attempt(s): Hello, Margaret!
	// job-4: failed after 1 attempt(s): empty name
	// group greetings: 5 jobs, 4 done, 1 failed, 0 canceled
}
