package main

import (
	"fmt"

	"github.com/spf13/cobra"

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
canceled, and the group finishes as usual. With --job, only those jobs are canceled; IDs that
are not in the group or have already ended are ignored.

Cancel returns once the request is stored; the coordinator applies it.`,
		Example: `  weave cancel --group site-1
  weave cancel --group site-1 --job 1042 --job 1077`,
		Args: usageArgs(cobra.NoArgs),
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
			d, nc, err := newDispatcher(ctx, &conn, "cancel", g.log)
			if err != nil {
				return err
			}
			defer closeConn(nc)
			h := d.Attach(group)
			if len(jobs) == 0 {
				if err := h.Cancel(ctx); err != nil {
					return fmt.Errorf("cancel group %q: %w", group, err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "group %q: cancel requested\n", group)
				return nil
			}
			// One request names at most wire.MaxCancelJobs jobs.
			for rest := jobs; len(rest) > 0; {
				n := min(len(rest), wire.MaxCancelJobs)
				if err := h.CancelJobs(ctx, rest[:n]...); err != nil {
					return fmt.Errorf("cancel jobs of group %q: %w", group, err)
				}
				rest = rest[n:]
			}
			fmt.Fprintf(cmd.OutOrStdout(), "group %q: cancel of %d jobs requested\n", group, len(jobs))
			return nil
		},
	}
	f := cmd.Flags()
	conn.register(f)
	f.StringVarP(&group, "group", "g", "", "group ID (required)")
	f.StringSliceVar(&jobArgs, "job", nil, "cancel only this job (repeat, or separate IDs with commas)")
	return cmd
}
