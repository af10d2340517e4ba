package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/internal/wire"
)

func newLimitCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "limit",
		Short: "Set, list, pause and remove limits per resource and per group",
		Long: `A limit bounds the jobs of one resource (the jobs that require or prefer it) or of one group
ID, across the whole fleet: at most --concurrency of them released at once (running, or in a
worker's hands), and at most --rate starts per --per, from a bucket of --burst tokens (default
1: starts evenly spaced). The coordinator enforces them at release; they are kept in the
namespace's LIMITS stream, so they hold across restarts and failovers. Each command returns
once the running coordinator has applied the change, so jobs published afterwards are released
under it (exit code 3 if the coordinator did not confirm it within --timeout: the change is
stored and applies once a coordinator reads it). Jobs a limit holds back wait without taking a
worker slot or a feeder slot: other groups and the group's other jobs go on.

"limit pause" holds back every job of a resource or group until "limit resume": for an outage
downstream, say. The jobs already released go on; a pause keeps the limit's concurrency and
rate for the resume, "limit set" leaves a pause in place, and "limit remove" ends both.

Setting, pausing and removing limits needs the coordinator's NATS permissions (they are the
operator's); listing them needs only the status API.`,
		Example: `  weave limit set --resource example.com --concurrency 2 --rate 5 --per 1s
  weave limit set --group nightly-export --concurrency 10
  weave limit list
  weave limit pause --resource payments-api
  weave limit resume --resource payments-api
  weave limit remove --resource example.com`,
	}
	return withSubcommands(cmd, newLimitSetCmd(g), newLimitListCmd(g), newLimitRemoveCmd(g), newLimitPauseCmd(g), newLimitResumeCmd(g))
}

// limitTarget is the --resource or --group a limit command names.
type limitTarget struct {
	resource, group string
}

func (t *limitTarget) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&t.resource, "resource", "", "limit the jobs that require or prefer this resource")
	cmd.Flags().StringVarP(&t.group, "group", "g", "", "limit the jobs of this group ID")
}

func (t *limitTarget) limit() (wire.Limit, error) {
	switch {
	case (t.resource == "") == (t.group == ""):
		return wire.Limit{}, usageErrorf("give one of --resource and --group")
	case t.resource != "":
		return wire.Limit{Kind: wire.LimitResource, Name: t.resource}, nil
	}
	return wire.Limit{Kind: wire.LimitGroup, Name: t.group}, nil
}

func newLimitSetCmd(g *globals) *cobra.Command {
	var (
		conn   connFlags
		target limitTarget
		l      wire.Limit
	)
	cmd := &cobra.Command{
		Use:   "set (--resource R | --group G) [--concurrency N] [--rate N --per D [--burst N]]",
		Short: "Set the limit of a resource or group (replacing its limit)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			t, err := target.limit()
			if err != nil {
				return err
			}
			l.Kind, l.Name = t.Kind, t.Name
			if l.Removes() {
				return usageErrorf("give --concurrency, --rate or both (to remove a limit: weave limit remove)")
			}
			if l.Rate > 0 && l.Per == 0 {
				l.Per = time.Second
			}
			if err := l.Validate(); err != nil {
				return usageErrorf("%s", plainReason(err))
			}
			return setLimit(cmd, g, &conn, l)
		},
	}
	conn.register(cmd.Flags())
	conn.registerTimeout(cmd.Flags(), defaultTimeout)
	target.register(cmd)
	f := cmd.Flags()
	f.IntVar(&l.Concurrency, "concurrency", 0, "at most this many of its jobs released at once (0: no concurrency limit)")
	f.IntVar(&l.Rate, "rate", 0, "at most this many starts per --per (0: no rate limit)")
	f.DurationVar(&l.Per, "per", 0, "the rate's interval (default 1s with --rate)")
	f.IntVar(&l.Burst, "burst", 0, "starts allowed at once after a quiet spell (default 1)")
	return cmd
}

func newLimitRemoveCmd(g *globals) *cobra.Command {
	return newLimitTargetCmd(g, "remove", "Remove the limit of a resource or group, a pause included",
		func(ctx context.Context, d *dispatcher.Dispatcher, l wire.Limit, out io.Writer) error {
			if err := d.RemoveLimit(ctx, l.Kind, l.Name); errors.Is(err, dispatcher.ErrLimitNotFound) {
				return fmt.Errorf("%w: nothing removed ('weave limit list' shows the limits)", err)
			} else if err != nil {
				return err
			}
			_, err := fmt.Fprintf(out, "limit of %s %q removed\n", l.Kind, l.Name)
			return err
		})
}

func newLimitPauseCmd(g *globals) *cobra.Command {
	return newLimitTargetCmd(g, "pause", "Hold back every job of a resource or group until it is resumed",
		func(ctx context.Context, d *dispatcher.Dispatcher, l wire.Limit, out io.Writer) error {
			if err := d.Pause(ctx, l.Kind, l.Name); err != nil {
				return err
			}
			_, err := fmt.Fprintf(out, "%s %q paused: none of its jobs is released until 'weave limit resume'; those running go on\n", l.Kind, l.Name)
			return err
		})
}

func newLimitResumeCmd(g *globals) *cobra.Command {
	return newLimitTargetCmd(g, "resume", "Let the jobs of a paused resource or group go again",
		func(ctx context.Context, d *dispatcher.Dispatcher, l wire.Limit, out io.Writer) error {
			if err := d.Resume(ctx, l.Kind, l.Name); errors.Is(err, dispatcher.ErrNotPaused) {
				return fmt.Errorf("%w: nothing resumed ('weave limit list' shows what is paused)", err)
			} else if err != nil {
				return err
			}
			_, err := fmt.Fprintf(out, "%s %q resumed\n", l.Kind, l.Name)
			return err
		})
}

// newLimitTargetCmd is a limit subcommand that names a resource or group and does one thing to
// its limit with a dispatcher: remove, pause, resume.
func newLimitTargetCmd(g *globals, name, short string, do func(context.Context, *dispatcher.Dispatcher, wire.Limit, io.Writer) error) *cobra.Command {
	var (
		conn   connFlags
		target limitTarget
	)
	cmd := &cobra.Command{
		Use:   name + " (--resource R | --group G)",
		Short: short,
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := target.limit()
			if err != nil {
				return err
			}
			if err := l.Validate(); err != nil {
				return usageErrorf("%s", plainReason(err))
			}
			return withDispatcher(cmd, g, &conn, "limit", func(ctx context.Context, d *dispatcher.Dispatcher) error {
				return unconfirmed(cmd.OutOrStdout(), l, do(ctx, d, l, cmd.OutOrStdout()))
			})
		},
	}
	conn.register(cmd.Flags())
	conn.registerTimeout(cmd.Flags(), defaultTimeout)
	target.register(cmd)
	return cmd
}

// unconfirmed turns a change of l stored but not confirmed applied by a coordinator
// (dispatcher.ErrNoAnswer) into exit code 3, after saying so; other errors pass.
func unconfirmed(out io.Writer, l wire.Limit, err error) error {
	if !errors.Is(err, dispatcher.ErrNoAnswer) {
		return err
	}
	fmt.Fprintf(out, "the change to the limit of %s %q is stored, but the coordinator did not confirm it applies it (%v): it applies once a coordinator reads it\n", l.Kind, l.Name, err)
	return pendingError{err}
}

// setLimit stores l's concurrency and rate and says so, and that a pause stays if there is one.
func setLimit(cmd *cobra.Command, g *globals, conn *connFlags, l wire.Limit) error {
	return withDispatcher(cmd, g, conn, "limit", func(ctx context.Context, d *dispatcher.Dispatcher) error {
		if err := d.SetLimit(ctx, l); err != nil {
			return unconfirmed(cmd.OutOrStdout(), l, err)
		}
		fmt.Fprintf(cmd.OutOrStdout(), "limit of %s %q set: %v\n", l.Kind, l.Name, l)
		if cur, err := d.LimitOf(ctx, l.Kind, l.Name); err == nil && cur.Paused {
			fmt.Fprintf(cmd.OutOrStdout(), "%s %q is still paused: 'weave limit resume' lets its jobs go\n", l.Kind, l.Name)
		}
		return nil
	})
}

func newLimitListCmd(g *globals) *cobra.Command {
	var (
		conn    connFlags
		jsonOut bool
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the limits, with the jobs each has running and holds back",
		Long: `List asks the running coordinator for the limits it enforces and their use: the jobs under
each released and not reported (running), and those it holds back (waiting).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			s, err := conn.open(ctx, "limit", g.log)
			if err != nil {
				return err
			}
			defer s.close()
			qctx, cancel := contextWithTimeout(s.ctx, conn.timeout)
			defer cancel()
			st, err := coordinator.QueryStatus(qctx, s.nc, conn.namespace)
			if err != nil {
				return s.explain(err)
			}
			if len(st.Limits) < st.LimitCount {
				fmt.Fprintf(cmd.ErrOrStderr(), "weave: the first %d of %d limits listed: the coordinator's status answer was cut to fit the server's max payload\n", len(st.Limits), st.LimitCount)
			}
			if jsonOut {
				return writeJSON(cmd.OutOrStdout(), st.Limits, true)
			}
			return printLimits(cmd.OutOrStdout(), st.Limits)
		},
	}
	conn.register(cmd.Flags())
	conn.registerTimeout(cmd.Flags(), defaultTimeout)
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the limits as JSON")
	return cmd
}

func printLimits(w io.Writer, ls []coordinator.LimitStatus) error {
	if len(ls) == 0 {
		_, err := fmt.Fprintln(w, "no limits")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	writeRow(tw, "KIND", "NAME", "LIMIT", "RUNNING", "WAITING")
	for _, l := range ls {
		writeRow(tw, string(l.Kind), l.Name, l.Limit.String(), strconv.Itoa(l.Running), strconv.Itoa(l.Waiting))
	}
	return tw.Flush()
}
