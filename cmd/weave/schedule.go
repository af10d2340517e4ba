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

	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/internal/schedule"
)

func newScheduleCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schedule",
		Short: "Add, list, pause and remove recurring groups",
		Long: `A schedule publishes a group of jobs at every tick of a cron expression (seconds optional,
in UTC) or a fixed interval. The group of a tick is named "<group>@<tick>", e.g.
nightly@20261201T030000Z. Schedules are stored in the namespace (its NS_SCHEDULES stream); the
active coordinator fires each tick exactly once, also when it is killed at the tick (the next
coordinator fires it again and JetStream's dedup stores it once, if it takes over within the
dedup window, 2 minutes by default). Ticks missed while no coordinator ran: only the latest
fires, once, when one runs again. A paused schedule fires nothing until it is resumed, and then
from its next tick: the ticks of the pause are not made up. Adding a schedule again replaces
it, a pause staying in place.`,
		Example: `  weave schedule add --name nightly --cron '0 3 * * *' --file nightly.jsonl
  weave schedule add --name poll --every 30s --file poll.jsonl
  weave schedule list
  weave schedule pause --name nightly
  weave schedule resume --name nightly
  weave schedule remove --name poll`,
	}
	return withSubcommands(cmd, newScheduleAddCmd(g), newScheduleListCmd(g), newScheduleRemoveCmd(g), newSchedulePauseCmd(g), newScheduleResumeCmd(g))
}

func newScheduleAddCmd(g *globals) *cobra.Command {
	var (
		conn connFlags
		s    dispatcher.Schedule
		file string
	)
	cmd := &cobra.Command{
		Use:   "add --name N (--cron SPEC | --every D) [--file jobs.jsonl|-] [--group PREFIX]",
		Short: "Add a schedule (replacing one of the same name)",
		Long: `Add stores a schedule. Its jobs are read from JSON lines as 'weave submit' reads them (without
"delay" or "run_at"), at most 1,000. The cron expression has 5 fields (minute hour day-of-month
month day-of-week) or 6 with seconds first, or is a descriptor: @hourly, @daily, @weekly,
@monthly, @yearly. --every is a fixed interval of at least 1s, its ticks counted from now.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if s.Name == "" {
				return usageErrorf("--name is required")
			}
			if every := cmd.Flags().Changed("every"); every && s.Every < time.Second {
				// Checked first: a zero --every would otherwise read as no --every at all.
				return usageErrorf("--every %v: the interval must be at least 1s", s.Every)
			} else if (s.Cron == "") == !every {
				return usageErrorf("give one of --cron and --every")
			}
			in, _, closeIn, err := openJobs(cmd, file)
			if err != nil {
				return err
			}
			defer closeIn()
			jr := newJobReader(in)
			for {
				j, ok := jr.next()
				if !ok {
					break
				}
				s.Jobs = append(s.Jobs, j)
				if len(s.Jobs) > schedule.MaxJobs {
					return usageErrorf("more than %d jobs in %s", schedule.MaxJobs, file)
				}
			}
			if err := jr.Err(); err != nil {
				return usageErrorf("%v", err)
			}
			if len(s.Jobs) == 0 {
				return usageErrorf("the jobs input (%s) holds no job: a tick's group needs at least one", file)
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			d, sess, err := newDispatcher(ctx, &conn, "schedule", g.log)
			if err != nil {
				return err
			}
			defer sess.close()
			if err := d.AddSchedule(sess.ctx, s); err != nil {
				return sess.explain(err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "schedule %q added: %s, %s per tick\n", s.Name, s.When(), count(len(s.Jobs), "job"))
			return nil
		},
	}
	conn.register(cmd.Flags())
	conn.registerTimeout(cmd.Flags(), defaultTimeout)
	f := cmd.Flags()
	f.StringVar(&s.Name, "name", "", "the schedule's name (required): 1-64 of [A-Za-z0-9_-]")
	f.StringVar(&s.Cron, "cron", "", "cron expression, seconds optional, UTC (e.g. '0 3 * * *', '*/10 * * * * *', '@hourly')")
	f.DurationVar(&s.Every, "every", 0, "fixed interval instead of --cron, at least 1s")
	f.StringVarP(&s.Group, "group", "g", "", "prefix of the groups' IDs (default: the name)")
	f.IntVar(&s.Weight, "weight", 0, "the groups' weight (1-1000; default 1)")
	f.StringVarP(&file, "file", "f", "-", "jobs file, JSON lines; - for stdin")
	return cmd
}

func newScheduleRemoveCmd(g *globals) *cobra.Command {
	return newScheduleNameCmd(g, "remove", "Remove a schedule: no tick of it fires any more",
		func(ctx context.Context, d *dispatcher.Dispatcher, name string, out io.Writer) error {
			if err := d.RemoveSchedule(ctx, name); errors.Is(err, dispatcher.ErrScheduleNotFound) {
				return fmt.Errorf("%w: nothing removed ('weave schedule list' shows the schedules)", err)
			} else if err != nil {
				return err
			}
			_, err := fmt.Fprintf(out, "schedule %q removed\n", name)
			return err
		})
}

func newSchedulePauseCmd(g *globals) *cobra.Command {
	return newScheduleNameCmd(g, "pause", "Stop a schedule's ticks until it is resumed",
		func(ctx context.Context, d *dispatcher.Dispatcher, name string, out io.Writer) error {
			if err := d.PauseSchedule(ctx, name); errors.Is(err, dispatcher.ErrScheduleNotFound) {
				return fmt.Errorf("%w: nothing paused ('weave schedule list' shows the schedules)", err)
			} else if err != nil {
				return err
			}
			_, err := fmt.Fprintf(out, "schedule %q paused: no tick fires until 'weave schedule resume'\n", name)
			return err
		})
}

func newScheduleResumeCmd(g *globals) *cobra.Command {
	return newScheduleNameCmd(g, "resume", "Let a paused schedule fire again, from its next tick",
		func(ctx context.Context, d *dispatcher.Dispatcher, name string, out io.Writer) error {
			err := d.ResumeSchedule(ctx, name)
			switch {
			case errors.Is(err, dispatcher.ErrScheduleNotFound), errors.Is(err, dispatcher.ErrNotPaused):
				return fmt.Errorf("%w: nothing resumed ('weave schedule list' shows the schedules)", err)
			case err != nil:
				return err
			}
			_, err = fmt.Fprintf(out, "schedule %q resumed: it fires from its next tick; the ticks of the pause are not made up\n", name)
			return err
		})
}

// newScheduleNameCmd is a schedule subcommand that does one thing to the schedule --name names.
func newScheduleNameCmd(g *globals, use, short string, do func(context.Context, *dispatcher.Dispatcher, string, io.Writer) error) *cobra.Command {
	var (
		conn connFlags
		name string
	)
	cmd := &cobra.Command{
		Use:   use + " --name N",
		Short: short,
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if name == "" {
				return usageErrorf("--name is required")
			}
			return withDispatcher(cmd, g, &conn, "schedule", func(ctx context.Context, d *dispatcher.Dispatcher) error {
				return do(ctx, d, name, cmd.OutOrStdout())
			})
		},
	}
	conn.register(cmd.Flags())
	conn.registerTimeout(cmd.Flags(), defaultTimeout)
	cmd.Flags().StringVar(&name, "name", "", "the schedule's name (required)")
	return cmd
}

func newScheduleListCmd(g *globals) *cobra.Command {
	var (
		conn    connFlags
		jsonOut bool
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the schedules with their last and next ticks",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			d, sess, err := newDispatcher(ctx, &conn, "schedule", g.log)
			if err != nil {
				return err
			}
			defer sess.close()
			infos, err := d.Schedules(sess.ctx)
			if err != nil {
				return sess.explain(err)
			}
			if jsonOut {
				return writeJSON(cmd.OutOrStdout(), infos, true)
			}
			return printSchedules(cmd.OutOrStdout(), infos)
		},
	}
	conn.register(cmd.Flags())
	conn.registerTimeout(cmd.Flags(), defaultTimeout)
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the schedules as JSON")
	return cmd
}

func printSchedules(w io.Writer, infos []dispatcher.ScheduleInfo) error {
	if len(infos) == 0 {
		_, err := fmt.Fprintln(w, "no schedules")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	writeRow(tw, "NAME", "WHEN", "GROUP", "JOBS", "LAST FIRED", "NEXT")
	for _, s := range infos {
		last := "-"
		if !s.LastFired.IsZero() {
			last = s.LastFired.UTC().Format(time.DateTime)
		}
		next := "paused"
		if !s.Paused {
			next = s.Next.UTC().Format(time.DateTime)
		}
		writeRow(tw, s.Name, s.When(), s.Group+"@…", strconv.Itoa(len(s.Jobs)), last, next)
	}
	return tw.Flush()
}
