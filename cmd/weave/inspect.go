package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/internal/safetext"
	"github.com/weavejobs/weave/internal/wire"
)

// The inspection commands: weave job, weave group, weave groups. Each asks the running
// coordinator for what has not ended and reads what ended from the streams (see
// dispatcher.Job, Group and Groups).

func newJobCmd(g *globals) *cobra.Command {
	var (
		conn       connFlags
		group, key string
		jsonOut    bool
		full       bool
	)
	cmd := &cobra.Command{
		Use:   "job (ID | --group G --key K)",
		Short: "Show a job: its state, attempts with their errors, result, worker and times",
		Long: `Job looks a job up by ID, or by its group and key (the latest job of the group with the key).
A job that has not ended is described by the running coordinator: its state (pending, running,
retrywait), its attempt, the pool it was released to and that pool's workers, when its attempt
was released, and when it is retried. A job that ended is read from its stored outcome: done,
failed or canceled, with its result or last error, for as long as the coordinator retains
outcomes (--result-retention, 24h by default). Both list the failed attempts: when, on which
worker, and the error. Results and errors are cut to their first 120 bytes unless --full;
control characters, escape sequences and bidi or zero-width characters are shown as escapes.

Exit status 1 when no such job is known (never published, or ended before the retention).`,
		Example: `  weave job 1042
  weave job --group site-1 --key /about --json`,
		Args: argsWanted(0, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var id uint64
			switch {
			case len(args) == 1 && (group != "" || key != ""):
				return usageErrorf("give a job ID or --group and --key, not both")
			case len(args) == 1:
				ids, err := parseJobIDs(args)
				if err != nil {
					return err
				}
				id = ids[0]
			case key == "":
				return usageErrorf("give a job ID, or --group and --key")
			default:
				if err := checkGroupFlag(group); err != nil {
					return err
				}
				if err := wire.ValidateKey(key); err != nil {
					return usageErrorf("--key: %v", err)
				}
			}
			d, s, err := newDispatcher(cmd.Context(), &conn, "job", g.log)
			if err != nil {
				return err
			}
			defer s.close()
			var info *dispatcher.JobInfo
			if id != 0 {
				info, err = d.Job(s.ctx, id)
			} else {
				info, err = d.JobByKey(s.ctx, group, key)
			}
			if err != nil {
				return s.explain(err)
			}
			if jsonOut {
				return writeJSON(cmd.OutOrStdout(), info, true)
			}
			return printJob(cmd.OutOrStdout(), info, time.Now(), full)
		},
	}
	f := cmd.Flags()
	conn.register(f)
	conn.registerTimeout(f, defaultTimeout)
	f.StringVarP(&group, "group", "g", "", "the job's group (with --key)")
	f.StringVarP(&key, "key", "k", "", "the job's key in --group")
	f.BoolVar(&jsonOut, "json", false, "print the job as JSON")
	f.BoolVar(&full, "full", false, "show the whole result and errors, not their first 120 bytes")
	return cmd
}

// printJob writes a job as a list of fields, then its failed attempts.
func printJob(w io.Writer, j *dispatcher.JobInfo, now time.Time, full bool) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	field := func(name, value string) {
		if value != "" {
			writeRow(tw, name, value)
		}
	}
	field("ID", strconv.FormatUint(j.ID, 10))
	group := j.Group
	if j.Incarnation > 0 {
		group += fmt.Sprintf(" (incarnation %d)", j.Incarnation)
	}
	field("GROUP", group)
	field("KEY", j.Key)
	state := string(j.State)
	if j.Attempts > 0 {
		state += fmt.Sprintf(", attempt %d", j.Attempts)
		if j.MaxAttempts > 0 {
			state += fmt.Sprintf(" of %d", j.MaxAttempts)
		}
	}
	field("STATE", state)
	if j.Priority > 0 {
		field("PRIORITY", strconv.Itoa(j.Priority))
	}
	field("WAITING", j.Waiting)
	switch {
	case j.Worker != "":
		field("WORKER", j.Worker+" (pool "+j.Pool+")")
	case j.Pool != "":
		field("WORKER", "one of "+list(j.Workers)+" (pool "+j.Pool+")")
	}
	field("PUBLISHED", when(now, j.PublishedAt))
	if !j.RunAt.IsZero() {
		field("RUN AT", j.RunAt.Local().Format("2006-01-02 15:04:05.000"))
	}
	field("RELEASED", when(now, j.ReleasedAt))
	field("STARTED", when(now, j.StartedAt))
	if !j.RetryAt.IsZero() {
		field("RETRY AT", j.RetryAt.Local().Format("2006-01-02 15:04:05.000")+" (in "+j.RetryAt.Sub(now).Round(time.Second).String()+")")
	}
	field("ENDED", when(now, j.EndedAt))
	if j.State == dispatcher.StateDone {
		field("RESULT", result(j.Result, full))
	}
	field("ERROR", cell(j.Err, full))
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(j.History) == 0 {
		return nil
	}
	fmt.Fprintf(w, "\nFAILED ATTEMPTS (%d)\n", len(j.History))
	row := func(cells ...string) { writeRow(tw, cells...) }
	row("#", "AT", "WORKER", "ERROR")
	for i, a := range j.History {
		row(strconv.Itoa(i+1), a.At.Local().Format("2006-01-02 15:04:05.000"), cmpOr(a.Worker, "-"), cell(a.Err, full))
	}
	return tw.Flush()
}

// result shows a job's result: as text when it is printable UTF-8, else its size.
func result(b []byte, full bool) string {
	switch {
	case len(b) == 0:
		return "(none)"
	case !utf8.Valid(b) || strings.ContainsFunc(string(b), func(r rune) bool { return r < ' ' && r != '\n' && r != '\t' }):
		return fmt.Sprintf("%d bytes (binary; --json has them in base64)", len(b))
	}
	return cell(string(b), full)
}

// when formats a time and how long ago it was, or "" for the zero time.
func when(now, t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.Local().Format("2006-01-02 15:04:05.000") + " (" + ago(now, t) + ")"
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func newGroupCmd(g *globals) *cobra.Command {
	var (
		conn    connFlags
		jsonOut bool
	)
	cmd := &cobra.Command{
		Use:   "group ID",
		Short: "Show a group: its progress while it runs, its summary after",
		Long: `Group shows the latest incarnation of a group. While it runs, the coordinator's view: open
(not sealed yet) or running, its jobs per state, queued and in flight, its age and when its
producer was last heard. Once complete, its summary (jobs done, failed, canceled) for as long
as the coordinator retains outcomes. Without a running coordinator only a complete group is
found.

Exit status 1 when no incarnation of the group is known.`,
		Example: `  weave group site-1
  weave group site-1 --json`,
		Args: argsWanted(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := wire.ValidateGroupID(args[0]); err != nil {
				return usageErrorf("group ID: %v", err)
			}
			d, s, err := newDispatcher(cmd.Context(), &conn, "group", g.log)
			if err != nil {
				return err
			}
			defer s.close()
			gi, err := d.Group(s.ctx, args[0])
			if err != nil {
				return s.explain(err)
			}
			if jsonOut {
				return writeJSON(cmd.OutOrStdout(), gi, true)
			}
			return printGroups(cmd.OutOrStdout(), []dispatcher.GroupInfo{*gi}, time.Now())
		},
	}
	f := cmd.Flags()
	conn.register(f)
	conn.registerTimeout(f, defaultTimeout)
	f.BoolVar(&jsonOut, "json", false, "print the group as JSON")
	return cmd
}

func newGroupsCmd(g *globals) *cobra.Command {
	var (
		conn    connFlags
		jsonOut bool
	)
	cmd := &cobra.Command{
		Use:   "groups",
		Short: "List the active groups and those complete within the result retention",
		Long: `Groups lists, from the running coordinator, the groups it tracks (open, running, waiting
for the groups they run after, or complete and being summarised) in arrival order, then the
groups complete within the result retention, the latest first, each with its jobs per state
(its summary once complete). Each list shows at most 500 groups.`,
		Example: `  weave groups
  weave groups --json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, s, err := newDispatcher(cmd.Context(), &conn, "groups", g.log)
			if err != nil {
				return err
			}
			defer s.close()
			gs, err := d.Groups(s.ctx)
			if err != nil {
				return s.explain(err)
			}
			if jsonOut {
				if gs == nil {
					gs = []dispatcher.GroupInfo{}
				}
				return writeJSON(cmd.OutOrStdout(), gs, true)
			}
			if len(gs) == 0 {
				_, err := fmt.Fprintln(cmd.OutOrStdout(), "no groups running or retained")
				return err
			}
			return printGroups(cmd.OutOrStdout(), gs, time.Now())
		},
	}
	f := cmd.Flags()
	conn.register(f)
	conn.registerTimeout(f, defaultTimeout)
	f.BoolVar(&jsonOut, "json", false, "print the groups as a JSON array")
	return cmd
}

// printGroups writes groups as a table: one row each, with its jobs per state (live) or its
// summary (complete).
func printGroups(w io.Writer, gs []dispatcher.GroupInfo, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(cells ...string) { writeRow(tw, cells...) }
	row(append([]string{"ID", "INCARNATION", "STATE", "AGE", "JOBS", "QUEUED", "IN FLIGHT"}, upper(stateOrder)...)...)
	for _, g := range gs {
		state := string(g.State)
		switch {
		case g.Abandoned:
			state += " (abandoned)"
		case g.State == dispatcher.GroupOpen && !g.LastHeard.IsZero():
			state += ", heard " + ago(now, g.LastHeard)
		}
		at := age(now, g.OpenedAt)
		if !g.CompletedAt.IsZero() {
			at = "ended " + ago(now, g.CompletedAt)
		}
		counts := make(map[string]uint64, len(stateOrder))
		for s, n := range g.Jobs {
			counts[string(s)] = uint64(n)
		}
		if g.Summary != nil {
			counts = map[string]uint64{"done": uint64(g.Summary.Done), "failed": uint64(g.Summary.Failed), "canceled": uint64(g.Summary.Canceled)}
		}
		queued, inFlight := strconv.Itoa(g.Queued), strconv.Itoa(g.InFlight)
		if g.State == dispatcher.GroupComplete {
			queued, inFlight = "-", "-"
		}
		row(append([]string{g.ID, strconv.FormatUint(g.Incarnation, 10), state, at, strconv.Itoa(g.Admitted), queued, inFlight},
			countCells(stateOrder, counts)...)...)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, g := range gs {
		for _, line := range waitLines(g, now) {
			if _, err := fmt.Fprintln(w, line); err != nil {
				return err
			}
		}
	}
	return nil
}

// waitLines say why a group's jobs that have not started wait, beyond a free slot: groups it
// runs after, limits holding them back, resources no live worker holds, a delay.
func waitLines(g dispatcher.GroupInfo, now time.Time) []string {
	var out []string
	if len(g.WaitsFor) > 0 {
		out = append(out, fmt.Sprintf("group %q: held until the groups it runs after have completed as it asks: %s", g.ID, safetext.Line(strings.Join(g.WaitsFor, ", "))))
	}
	if g.Priority > 0 {
		out = append(out, fmt.Sprintf("group %q: priority %d: its jobs go before those of lower priorities", g.ID, g.Priority))
	}
	if len(g.FollowedBy) > 0 {
		out = append(out, fmt.Sprintf("group %q: followed by %s (they run after it)", g.ID, safetext.Line(strings.Join(g.FollowedBy, ", "))))
	}
	if len(g.HeldBack) > 0 {
		out = append(out, heldBackLine(g))
	}
	if g.Unplaceable > 0 {
		out = append(out, unplaceableLine(&g))
	}
	if n := g.Jobs[dispatcher.StateDelayed]; n > 0 && !g.NextRunAt.IsZero() {
		out = append(out, fmt.Sprintf("group %q: %s, the first runs at %s (in %v)", g.ID, count(n, "delayed job"),
			g.NextRunAt.Local().Format("2006-01-02 15:04:05"), max(g.NextRunAt.Sub(now), 0).Round(time.Second)))
	}
	return out
}

// heldBackLine says which limits hold a group's pending jobs back: `group "pg": 3 pending jobs
// held back by group "pg" (paused), 2 by resource "api" (weave limit list)`.
func heldBackLine(g dispatcher.GroupInfo) string {
	var parts []string
	for i, hb := range g.HeldBack {
		what := fmt.Sprintf("%d by %s %q", hb.Jobs, hb.Kind, shown(hb.Name))
		if i == 0 {
			what = fmt.Sprintf("%s held back by %s %q", count(hb.Jobs, "pending job"), hb.Kind, shown(hb.Name))
		}
		if hb.Paused {
			what += " (paused)"
		}
		parts = append(parts, what)
	}
	return fmt.Sprintf("group %q: %s ('weave limit list' shows the limits)", shown(g.ID), strings.Join(parts, ", "))
}

// unplaceableLine says that some of g's pending jobs require resources no live worker holds.
func unplaceableLine(g *dispatcher.GroupInfo) string {
	verb := "require"
	if g.Unplaceable == 1 {
		verb = "requires"
	}
	return fmt.Sprintf("group %q: %s %s resources no live worker holds ('weave status' lists the resources)", g.ID, count(g.Unplaceable, "pending job"), verb)
}
