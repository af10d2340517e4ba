package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/internal/topology"
	"github.com/weavejobs/weave/internal/wire"
)

// checkNamespace returns an error wrapping coordinator.ErrNamespaceNotFound if the namespace's
// streams do not exist.
func checkNamespace(ctx context.Context, nc *nats.Conn, namespace string) error {
	names, err := wire.NewNames(namespace)
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	return topology.Check(ctx, js, names, names.JobsStream())
}

func newStatusCmd(g *globals) *cobra.Command {
	var (
		conn     connFlags
		jsonOut  bool
		watch    bool
		interval time.Duration
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show jobs per state, groups, resources, pools and workers of a namespace",
		Long: `Status asks the namespace's running coordinator for its current view: job counts per state,
open groups (the first 100 in arrival order), resources (jobs requiring or preferring each, and
the live slots holding it; pending jobs requiring a resource no live worker holds are flagged),
worker pools, workers busy or sleeping, and the standby coordinators waiting for the lease.
Groups that completed are listed by 'weave groups'. The epoch is the running coordinator's
fencing token, the revision of its lease when it took over: each renewal of the lease makes
one, so it grows with time held, not with failovers. Lines starting "NATS:" say what is wrong
under the namespace's streams: a node of the cluster offline or behind, a stream that does
not answer.

With --watch it asks again every --interval until interrupted: on a terminal it redraws the
screen in place; otherwise it prints each status after the last (with --json, one object per
line). A status that cannot be read is reported and asked for again.`,
		Example: `  weave status
  weave status --watch --interval 1s`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if interval <= 0 {
				return usageErrorf("--interval %v: want a positive duration", interval)
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			s, err := conn.open(ctx, "status", g.log)
			if err != nil {
				return err
			}
			defer s.close()
			query := func() (*coordinator.Status, error) {
				ctx, cancel := contextWithTimeout(s.ctx, conn.timeout)
				defer cancel()
				st, err := coordinator.QueryStatus(ctx, s.nc, conn.namespace)
				if err != nil {
					// No coordinator answered: say so, unless the namespace does not even exist
					// (a typo, say).
					cctx, cancel := contextWithTimeout(s.ctx, conn.timeout)
					defer cancel()
					if nerr := checkNamespace(cctx, s.nc, conn.namespace); errors.Is(nerr, coordinator.ErrNamespaceNotFound) {
						return nil, nerr
					}
					return nil, s.explain(err)
				}
				return st, nil
			}
			health := func() []string {
				ctx, cancel := contextWithTimeout(s.ctx, conn.timeout)
				defer cancel()
				names, _ := wire.NewNames(conn.namespace) // valid: the connection checked it
				return natsHealth(ctx, s.nc, names)
			}
			if jsonOut {
				health = nil
			}
			if !watch {
				st, err := query()
				if health != nil && !errors.Is(err, coordinator.ErrNamespaceNotFound) {
					// Before the status, or instead of it: a node down may be why nobody answers.
					printNATSHealth(cmd.OutOrStdout(), health())
				}
				if err != nil {
					return err
				}
				if jsonOut {
					return writeJSON(cmd.OutOrStdout(), st, true)
				}
				return printStatus(cmd.OutOrStdout(), st)
			}
			return watchStatus(s.ctx, cmd.OutOrStdout(), isTerminal(cmd.OutOrStdout()), jsonOut, interval, query, health)
		},
	}
	f := cmd.Flags()
	conn.register(f)
	f.BoolVar(&jsonOut, "json", false, "print the status as JSON")
	f.BoolVarP(&watch, "watch", "w", false, "ask again every --interval until interrupted (redrawn in place on a terminal)")
	f.DurationVar(&interval, "interval", 2*time.Second, "how often --watch asks")
	conn.registerTimeout(f, defaultTimeout)
	return cmd
}

// clearScreen moves the cursor home and clears the terminal (ANSI).
const clearScreen = "\x1b[H\x1b[2J"

// watchStatus prints the status every interval until ctx ends (then it returns nil), after what
// health (if not nil) finds wrong with NATS. On a terminal each status replaces the previous
// one, drawn at once from a buffer so it does not flicker; elsewhere each follows the last. A
// namespace that does not exist ends it; any other error is shown and the status asked for
// again.
func watchStatus(ctx context.Context, w io.Writer, terminal, jsonOut bool, interval time.Duration, query func() (*coordinator.Status, error), health func() []string) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for first := true; ; first = false {
		var buf bytes.Buffer
		if terminal {
			buf.WriteString(clearScreen)
		} else if !first && !jsonOut {
			buf.WriteString("\n")
		}
		st, err := query()
		if health != nil && !errors.Is(err, coordinator.ErrNamespaceNotFound) {
			printNATSHealth(&buf, health())
		}
		switch {
		case errors.Is(err, coordinator.ErrNamespaceNotFound):
			return err
		case ctx.Err() != nil:
			return nil
		case err != nil:
			fmt.Fprintf(&buf, "%s  weave: %v (asking again every %v)\n", time.Now().Format(time.DateTime), err, interval)
		case jsonOut:
			_ = writeJSON(&buf, st, terminal) // a bytes.Buffer does not fail
		default:
			_ = printStatus(&buf, st)
		}
		if terminal && !jsonOut {
			fmt.Fprintf(&buf, "\nevery %v; Ctrl-C to stop\n", interval)
		}
		if _, err := w.Write(buf.Bytes()); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// stateOrder is the order of job states in tables; states not listed follow, sorted.
var stateOrder = []string{"pending", "delayed", "running", "retrywait", "done", "failed", "canceled"}

func states(counts ...map[string]uint64) []string {
	out := slices.Clone(stateOrder)
	var extra []string
	for _, m := range counts {
		for s := range maps.Keys(m) {
			if !slices.Contains(out, s) && !slices.Contains(extra, s) {
				extra = append(extra, s)
			}
		}
	}
	slices.Sort(extra)
	return append(out, extra...)
}

// printStatus writes st as tables.
func printStatus(w io.Writer, st *coordinator.Status) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(cells ...string) { writeRow(tw, cells...) }
	section := func(title string) {
		tw.Flush()
		fmt.Fprintf(w, "\n%s\n", title)
	}

	fmt.Fprintf(w, "namespace %s  epoch %d  policy %s  feeders %d  at %s\n",
		st.Namespace, st.Epoch, st.Policy, st.Feeders, st.Time.Local().Format(time.DateTime))
	printAlarms(w, st) // metrics.go

	section("JOBS")
	names := states(st.Jobs)
	row(upper(names)...)
	row(countCells(names, st.Jobs)...)
	tw.Flush()
	// OldestPending is of the latest metrics tick: not said when nothing is pending now.
	if !st.OldestPending.IsZero() && st.Jobs["pending"] > 0 {
		fmt.Fprintf(w, "oldest pending job: stored %v ago\n", st.Time.Sub(st.OldestPending).Round(time.Millisecond))
	}
	t := st.Totals
	fmt.Fprintf(w, "since this coordinator took over: %d admitted, %d released, %d retried, %d rejected (%d reports, %d heartbeats), %d requests refused, %d vanished (message gone), %d attempts lapsed with their worker, %d rescued, %d stale reports\n",
		t.Admitted, t.Released, t.Retried, t.Rejected, t.RejectedReports, t.RejectedHeartbeats, t.Refused, t.LostJobs, t.LostAttempts, t.Rescued, t.StaleReports)

	groupsNote := ""
	if len(st.Groups) < st.OpenGroups {
		groupsNote = fmt.Sprintf("; the oldest %d listed", len(st.Groups))
	}
	if st.WaitingGroups > 0 {
		groupsNote = fmt.Sprintf(", %d waiting for groups they run after", st.WaitingGroups) + groupsNote
	}
	section(fmt.Sprintf("GROUPS (%d open, %d not sealed%s)", max(st.OpenGroups, len(st.Groups)), st.Unsealed, groupsNote))
	if len(st.Groups) > 0 {
		row(append([]string{"ID", "AGE", "SEALED", "QUEUED", "IN FLIGHT"}, upper(names)...)...)
		for _, g := range st.Groups {
			sealed := yesNo(g.Sealed)
			switch {
			case g.Abandoned:
				sealed = "abandoned"
			case !g.Sealed && !g.LastHeard.IsZero():
				sealed = "no, heard " + ago(st.Time, g.LastHeard)
			}
			row(append([]string{g.ID, age(st.Time, g.OpenedAt), sealed, strconv.Itoa(g.Queued), strconv.Itoa(g.InFlight)}, countCells(names, g.Jobs)...)...)
		}
	}

	section("RESOURCES" + listed(len(st.Resources), st.ResourceCount))
	var unheld []string
	if len(st.Resources) > 0 {
		row("NAME", "HOLDERS", "REQUIRED: PENDING", "RUNNING", "DONE", "PREFERRED: PENDING", "RUNNING", "DONE", "")
		for _, r := range st.Resources {
			note := ""
			if p := r.Required["pending"]; p > 0 && r.Holders == 0 {
				note = fmt.Sprintf("<- %d jobs wait: no live worker holds %s", p, r.Name)
				unheld = append(unheld, r.Name)
			}
			row(r.Name, strconv.Itoa(r.Holders),
				u(r.Required["pending"]), u(r.Required["running"]), u(r.Required["done"]),
				u(r.Preferred["pending"]), u(r.Preferred["running"]), u(r.Preferred["done"]), note)
		}
	}

	if len(st.Limits) > 0 {
		section("LIMITS" + listed(len(st.Limits), st.LimitCount))
		row("KIND", "NAME", "LIMIT", "RUNNING", "WAITING")
		for _, l := range st.Limits {
			row(string(l.Kind), l.Name, l.Limit.String(), strconv.Itoa(l.Running), strconv.Itoa(l.Waiting))
		}
	}

	section("POOLS" + listed(len(st.Pools), st.PoolCount))
	if len(st.Pools) > 0 {
		row("POOL", "RESOURCES", "WORKERS", "SLOTS", "OUTSTANDING", "LEARNED")
		for _, p := range st.Pools {
			row(p.Key, list(p.Resources), strconv.Itoa(p.Workers), strconv.Itoa(p.Slots), strconv.Itoa(p.Outstanding), list(p.Learned))
		}
	}

	busy, sleeping := 0, 0
	for _, wk := range st.Workers {
		busy += wk.Busy
		sleeping += wk.Sleeping
	}
	if len(st.Workers) < st.WorkerCount {
		section(fmt.Sprintf("WORKERS (%d live; of the %d listed, %d slots busy, %d sleeping)", st.WorkerCount, len(st.Workers), busy, sleeping))
	} else {
		section(fmt.Sprintf("WORKERS (%d live: %d slots busy, %d sleeping)", len(st.Workers), busy, sleeping))
	}
	if len(st.Workers) > 0 {
		row("ID", "POOL", "RESOURCES", "CONCURRENCY", "BUSY", "SLEEPING", "STATE", "LAST SEEN")
		for _, wk := range st.Workers {
			state := "running"
			if wk.Draining {
				state = "draining"
			}
			row(wk.ID, wk.Pool, list(wk.Resources), strconv.Itoa(wk.Concurrency), strconv.Itoa(wk.Busy), strconv.Itoa(wk.Sleeping),
				state, ago(st.Time, wk.LastSeen))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(unheld) > 0 {
		if _, err := fmt.Fprintf(w, "\n! jobs wait for resources no live worker holds: %s\n", strings.Join(unheld, ", ")); err != nil {
			return err
		}
	}
	if len(st.Standbys) > 0 {
		if _, err := fmt.Fprintf(w, "\nSTANDBY COORDINATORS: %s\n", standbyList(st)); err != nil {
			return err
		}
	}
	if st.Unsealed > 0 {
		_, err := fmt.Fprintf(w, "\n! %d groups are not sealed yet: they finish when their producer seals them, or when the\n"+
			"  coordinator seals them after --abandon-after without a job or keep-alive (weave cancel ends one now)\n", st.Unsealed)
		return err
	}
	return nil
}

// standbyList names the standby coordinators and how long each has waited.
func standbyList(st *coordinator.Status) string {
	parts := make([]string, len(st.Standbys))
	for i, sb := range st.Standbys {
		parts[i] = shown(sb.Holder) + " (waiting " + age(st.Time, sb.Since) + ")"
	}
	return strings.Join(parts, ", ")
}

// ago formats how long before now t was, e.g. "3.2s ago".
func ago(now, t time.Time) string { return now.Sub(t).Round(100*time.Millisecond).String() + " ago" }

// age formats how long a thing has existed at now, or "-" if its start is unknown.
func age(now, since time.Time) string {
	if since.IsZero() {
		return "-"
	}
	return now.Sub(since).Round(time.Second).String()
}

func countCells(names []string, m map[string]uint64) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = u(m[n])
	}
	return out
}

func upper(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strings.ToUpper(s)
	}
	return out
}

func u(v uint64) string { return strconv.FormatUint(v, 10) }

func list(ss []string) string {
	if len(ss) == 0 {
		return "-"
	}
	return strings.Join(ss, ",")
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// listed notes a list of which the coordinator's answer holds only the first n of total: cut to
// fit the server's max payload (coordinator.Status.Cut).
func listed(n, total int) string {
	if n < total {
		return fmt.Sprintf(" (the first %d of %d listed)", n, total)
	}
	return ""
}
