// Command weave runs and operates Weave: a coordinator, workers that run a command per job,
// job submission, status, cancellation, failed jobs (listing and retrying them), and a
// self-contained demo.
//
// Exit codes: 0 success, 1 error, 2 usage error (bad flags or arguments), 3 a request stored but
// not confirmed by a coordinator (weave cancel with no coordinator answering).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/weavejobs/weave/internal/safetext"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
	// exitPending: the request is stored, but no coordinator confirmed it.
	exitPending = 3
)

func main() {
	zerolog.TimeFieldFormat = time.RFC3339Nano // the console writer shows milliseconds
	os.Exit(run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run executes the command line args and returns the process exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRootCmd()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, new(usageError)):
		// The hint names the subcommand that failed: its help lists the flags it takes.
		fmt.Fprintf(stderr, "%s\nRun '%s --help' for usage.\n", message(err), cmd.CommandPath())
		return exitUsage
	case errors.As(err, new(pendingError)):
		return exitPending // the command has said so on its output
	case errors.As(err, new(silentError)):
		return exitError // the command has already said what went wrong
	default:
		fmt.Fprintln(stderr, message(err))
		return exitError
	}
}

// message is err's text for the user, prefixed "weave: " once (the library's errors start so,
// also when the command wrapped one: "worker w1: weave: ..."), shown safely: an error can quote
// what a producer or a worker wrote.
func message(err error) string {
	text := strings.ReplaceAll(strings.TrimPrefix(err.Error(), "weave: "), ": weave: ", ": ")
	return "weave: " + safetext.Block(text)
}
