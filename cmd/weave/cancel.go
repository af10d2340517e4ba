package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/internal/wire"
)

func newCancelCmd(g *globals) *cobra.Command {
	var (
		conn    connFlags
		group   string
		jobArgs []string
	)
	cmd := &cobra.Command{
		Use:   "cancel --group G [--job ID]...",
		Short: "Cancel a group, or some of its jobs",
		Long: `Cancel asks the coordinator to cancel the group's jobs that have not finished: those not
started never start, and the commands of running ones are stopped as on a timeout. Each ends
canceled, and the group finishes as usual. With --job, only those jobs are canceled: cancel
says how many ended canceled at once and how many running ones were told to stop, and names
the jobs that had ended already and the IDs that are not jobs of the group.

The request is stored in the namespace's JOBS stream; cancel then waits up to --timeout for the
coordinator's answer. Exit status 0: the coordinator applied it. 1: it refused it (the group is
not open: no such group, or it has finished), none of the jobs given was canceled, or the
request failed. 3: the request is stored but no coordinator answered in time (none is running,
or one is starting and did not finish its replay in time): a coordinator applies it when it
reads it.`,
		Example: `  weave cancel --group site-1
  weave cancel --group site-1 --job 1042 --job 1077`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkGroupFlag(group); err != nil {
				return err
			}
			jobs, err := parseJobIDs(jobArgs)
			if err != nil {
				return err
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			d, s, err := newDispatcher(ctx, &conn, "cancel", g.log)
			if err != nil {
				return err
			}
			defer s.close()
			return s.explain(cancelGroup(s.ctx, cmd.OutOrStdout(), d.Attach(group), jobs, conn.timeout))
		},
	}
	f := cmd.Flags()
	conn.register(f)
	conn.registerTimeout(f, defaultTimeout)
	f.StringVarP(&group, "group", "g", "", "group ID (required)")
	f.StringSliceVar(&jobArgs, "job", nil, "cancel only this job (repeat, or separate IDs with commas)")
	return cmd
}

// cancelGroup cancels the group, or the given jobs of it, and says what the coordinator answered.
func cancelGroup(ctx context.Context, stdout io.Writer, h *dispatcher.Handle, jobs []uint64, timeout time.Duration) error {
	group := h.GroupID()
	var (
		err error
		res dispatcher.CancelResult
	)
	if len(jobs) == 0 {
		err = h.Cancel(ctx)
	}
	// One request names at most wire.MaxCancelJobs jobs.
	for rest := jobs; len(rest) > 0 && err == nil; {
		n := min(len(rest), wire.MaxCancelJobs)
		var r dispatcher.CancelResult
		r, err = h.CancelJobs(ctx, rest[:n]...)
		res.Canceled, res.Stopping = res.Canceled+r.Canceled, res.Stopping+r.Stopping
		res.Final, res.Unknown = append(res.Final, r.Final...), append(res.Unknown, r.Unknown...)
		rest = rest[n:]
	}
	what := "cancel"
	if len(jobs) > 0 {
		what = "cancel of " + count(len(jobs), "job")
	}
	switch {
	case errors.Is(err, dispatcher.ErrNoAnswer) && ctx.Err() == nil: // not interrupted, nor refused by the server
		fmt.Fprintf(stdout, "group %q: %s stored; no coordinator answered within %v: it is applied when a coordinator runs\n", group, what, timeout)
		return pendingError{err}
	case errors.Is(err, dispatcher.ErrGroupNotOpen):
		// The coordinator's reason repeats what the sentinel says: one sentence is enough.
		return fmt.Errorf("cancel group %q refused by the coordinator: no such group, or it has finished", group)
	case err != nil:
		return fmt.Errorf("cancel group %q: %w", group, err)
	}
	if len(jobs) == 0 {
		fmt.Fprintf(stdout, "group %q: %s applied by the coordinator\n", group, what)
		return nil
	}
	fmt.Fprintf(stdout, "group %q: %s\n", group, res)
	if res.Canceled+res.Stopping == 0 {
		return fmt.Errorf("cancel of %s of group %q: nothing was canceled", count(len(jobs), "job"), group)
	}
	return nil
}
