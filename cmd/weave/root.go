package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
)

func newRootCmd() *cobra.Command {
	var logLevel string
	g := &globals{}
	root := &cobra.Command{
		Use:   "weave",
		Short: "Run groups of background jobs over NATS JetStream",
		Long: `Weave runs groups of background jobs on a fleet of workers over NATS JetStream.
Jobs of one group are spread apart so they rarely run at the same time.

Try it without any setup:  weave demo`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// Root runs only to reject an unknown command with a usage error (cobra would return a
		// plain error) or to print help.
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageErrorf("unknown command %q%s", args[0], suggestion(cmd, args[0]))
			}
			_ = cmd.Help()
			return usageErrorf("no command given")
		},
	}
	root.SuggestionsMinimumDistance = 2 // "stauts" is two edits from "status"
	root.PersistentFlags().StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn, error or disabled")
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		log, err := newLogger(cmd.ErrOrStderr(), logLevel)
		if err != nil {
			return usageError{err}
		}
		g.log = log
		return nil
	}
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		if args := cmd.Flags().Args(); cmd == root && len(args) > 0 {
			// "weave stauts --nats URL": the command is misspelt, not the flag.
			return usageErrorf("unknown command %q%s", args[0], suggestion(cmd, args[0]))
		}
		if cmd.HasSubCommands() && cmd != root {
			// "weave failed --nats URL": the flags are the subcommand's.
			return usageErrorf("%v: %s takes a subcommand first (%s), then its flags", err, cmd.CommandPath(), subcommandNames(cmd))
		}
		return usageError{err}
	})
	root.AddCommand(
		newDemoCmd(g),
		newBenchCmd(g),
		newInitCmd(g),
		newCoordinatorCmd(g),
		newWorkerCmd(g),
		newSubmitCmd(g),
		newStatusCmd(g),
		newFailedCmd(g),
		newCancelCmd(g),
		newLimitCmd(g),
		newScheduleCmd(g),
		newJobCmd(g),
		newGroupCmd(g),
		newGroupsCmd(g),
		newDashboardCmd(g),
		newAuthCmd(),
		newVersionCmd(),
	)
	return root
}

// withSubcommands adds subs to parent, a command that only groups them: run alone it prints its
// help and fails with a usage error, as it does with an unknown subcommand (cobra would print
// the help and succeed, so a misspelt "weave schedule ad" did nothing with exit code 0).
func withSubcommands(parent *cobra.Command, subs ...*cobra.Command) *cobra.Command {
	parent.AddCommand(subs...)
	parent.Args = cobra.ArbitraryArgs
	parent.SuggestionsMinimumDistance = 2
	parent.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usageErrorf("unknown command %q for %q%s: it takes %s", args[0], cmd.CommandPath(), suggestion(cmd, args[0]), subcommandNames(cmd))
		}
		_ = cmd.Help()
		return usageErrorf("no subcommand given: %s", subcommandNames(cmd))
	}
	return parent
}

// suggestion is " (did you mean "x"?)" for the subcommand of cmd nearest to the unknown name
// typed, or "" if none is near.
func suggestion(cmd *cobra.Command, typed string) string {
	s := cmd.SuggestionsFor(typed)
	if len(s) == 0 {
		return ""
	}
	best := slices.MinFunc(s, func(a, b string) int { return editDistance(typed, a) - editDistance(typed, b) })
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// editDistance is the Levenshtein distance between a and b, for ranking cobra's suggestions.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := range len(a) {
		cur := make([]int, len(b)+1)
		cur[0] = i + 1
		for j := range len(b) {
			cost := 1
			if a[i] == b[j] {
				cost = 0
			}
			cur[j+1] = min(prev[j+1]+1, cur[j]+1, prev[j]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// subcommandNames lists cmd's subcommands: "list or retry", "add, list or remove".
func subcommandNames(cmd *cobra.Command) string {
	var names []string
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() {
			names = append(names, c.Name())
		}
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// globals are set from the root command's flags before any subcommand runs.
type globals struct {
	log zerolog.Logger
}

// usageError reports bad flags or arguments: exit code 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// noArgs refuses arguments to a command that takes none, saying so (cobra's NoArgs calls an
// argument an unknown command) and, for a command with --group, how to name a group.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	name := strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ")
	msg := fmt.Sprintf("%s takes no arguments, got %q", name, args[0])
	if cmd.Flags().Lookup("group") != nil {
		msg += fmt.Sprintf(": a group is given with --group (%s --group %s)", cmd.CommandPath(), args[0])
	}
	return usageErrorf("%s", msg)
}

// argsWanted refuses a count of arguments outside min..max (max < 0: no bound), with the
// command's usage line instead of cobra's "accepts 1 arg(s), received 0".
func argsWanted(min, max int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) >= min && (max < 0 || len(args) <= max) {
			return nil
		}
		name := strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ")
		got := "no arguments"
		if len(args) > 0 {
			got = fmt.Sprintf("%d arguments (%s)", len(args), strings.Join(args, " "))
		}
		return usageErrorf("%s: usage is '%s %s', got %s", name, cmd.Root().Name(), cmd.Use, got)
	}
}

// usageArgs wraps a cobra argument validator so that its errors are usage errors.
func usageArgs(v cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := v(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}

// silentError is a failure the command has already reported on its output: exit code 1
// without another message.
type silentError struct{ err error }

func (e silentError) Error() string { return e.err.Error() }
func (e silentError) Unwrap() error { return e.err }

// pendingError is a request stored but not confirmed (no coordinator answered): exit code 3,
// after the command said so on its output.
type pendingError struct{ err error }

func (e pendingError) Error() string { return e.err.Error() }
func (e pendingError) Unwrap() error { return e.err }

// count says n things, in the singular for one: "1 job", "3 jobs".
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
