package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/internal/wire"
)

func newFailedCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "failed",
		Short: "List failed jobs, and publish them again",
		Long: `A job that failed (permanently, or out of attempts) stays inspectable after its group finished:
its outcome, with the history of its attempts, and its payload are kept for the result
retention (24 hours by default). "failed list" shows them; "failed retry" publishes a group's
failed jobs again, as a new run of the group.`,
	}
	return withSubcommands(cmd, newFailedListCmd(g), newFailedRetryCmd(g))
}

func newFailedListCmd(g *globals) *cobra.Command {
	var (
		conn    connFlags
		group   string
		jsonOut bool
		history bool
		full    bool
	)
	cmd := &cobra.Command{
		Use:   "list [--group G]",
		Short: "List the failed jobs still stored, of one group or of all",
		Long: `List shows the jobs still failed whose outcomes are stored, in the order they failed: of the
group given with --group, else of every group. A group still running shows the jobs that
have failed so far. A job that "failed retry" ran again is no longer listed once that run
succeeded; if it failed again, it is listed under its new ID.

The table shows each job's group, ID, key, attempts and last error (its first 120 bytes unless
--full); --history adds one line per failed attempt: its number, when it failed, on which
worker, and its error. Control characters, escape sequences and bidi or zero-width characters
are shown as escapes (\x1b, \u202e), never sent to the terminal. --json prints one JSON object
per line instead, with the whole history (those characters as JSON escapes):
  {"group", "id", "key", "attempts", "error", "history": [{"at", "worker", "error"}]}`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if group != "" {
				if err := wire.ValidateGroupID(group); err != nil {
					return usageErrorf("--group: %v", err)
				}
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			d, s, err := newDispatcher(ctx, &conn, "failed list", g.log)
			if err != nil {
				return err
			}
			defer s.close()
			return s.explain(listFailed(s.ctx, d, group, cmd.OutOrStdout(), cmd.ErrOrStderr(), jsonOut, history, full))
		},
	}
	f := cmd.Flags()
	conn.register(f)
	conn.registerTimeout(f, defaultTimeout)
	f.StringVarP(&group, "group", "g", "", "list only this group's failed jobs")
	f.BoolVar(&jsonOut, "json", false, "print one JSON object per job (with its history)")
	f.BoolVar(&history, "history", false, "show every failed attempt of each job")
	f.BoolVar(&full, "full", false, "show whole errors, not their first 120 bytes")
	return cmd
}

// failedLine is one line of "failed list --json".
type failedLine struct {
	Group    string        `json:"group"`
	ID       uint64        `json:"id"`
	Key      string        `json:"key,omitempty"`
	Attempts int           `json:"attempts"`
	Error    string        `json:"error,omitempty"`
	History  []attemptJSON `json:"history,omitempty"`
}

type attemptJSON struct {
	At     time.Time `json:"at"`
	Worker string    `json:"worker,omitempty"`
	Error  string    `json:"error,omitempty"`
}

// tableFlushRows is how many rows the table holds before it is written: the columns are aligned
// within each block of rows, and memory does not grow with the number of failed jobs.
const tableFlushRows = 100

// listFailed prints the failed jobs as they are read. An outcome message that cannot be read is
// reported on stderr and skipped; the command then fails at the end, since the list is
// incomplete.
func listFailed(ctx context.Context, d *dispatcher.Dispatcher, group string, stdout, stderr io.Writer, jsonOut, history, full bool) error {
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	row := func(cells ...string) { writeRow(tw, cells...) }
	var (
		n, rows int
		skipped error
	)
	for o, err := range d.Failed(ctx, group) {
		if errors.Is(err, dispatcher.ErrMalformedOutcome) {
			fmt.Fprintf(stderr, "weave: skipped: %s\n", shown(err.Error()))
			skipped = err
			continue
		}
		if err != nil {
			tw.Flush()
			return err // it says "list failed jobs" already
		}
		n++
		if jsonOut {
			l := failedLine{Group: o.Group, ID: o.ID, Key: o.Key, Attempts: o.Attempts, Error: o.Err}
			for _, a := range o.History {
				l.History = append(l.History, attemptJSON{At: a.At, Worker: a.Worker, Error: a.Err})
			}
			if err := writeJSON(stdout, l, false); err != nil {
				return err
			}
			continue
		}
		if rows == 0 {
			row("GROUP", "ID", "KEY", "ATTEMPTS", "LAST ERROR")
		}
		row(o.Group, strconv.FormatUint(o.ID, 10), o.Key, strconv.Itoa(o.Attempts), cell(o.Err, full))
		rows++
		if history {
			for i, a := range o.History {
				row("", "", "", "#"+strconv.Itoa(i+1), a.At.Local().Format("2006-01-02 15:04:05.000")+" on "+a.Worker+": "+cell(a.Err, full))
				rows++
			}
		}
		if rows >= tableFlushRows {
			tw.Flush()
			rows = 0
		}
	}
	tw.Flush()
	if !jsonOut {
		if n == 0 {
			fmt.Fprintln(stdout, "no failed jobs stored")
		} else {
			fmt.Fprintln(stdout, count(n, "failed job"))
		}
	}
	if skipped != nil {
		return silentError{fmt.Errorf("some outcomes could not be read: %w", skipped)}
	}
	return nil
}

// failedRetryCmd holds the flags of "failed retry".
type failedRetryCmd struct {
	g           *globals
	conn        connFlags
	group       string
	wait        bool
	jsonOut     bool
	waitTimeout time.Duration
}

func newFailedRetryCmd(g *globals) *cobra.Command {
	r := &failedRetryCmd{g: g}
	cmd := &cobra.Command{
		Use:   "retry --group G [ID...]",
		Short: "Run a group's failed jobs again",
		Long: `Retry asks the coordinator to run the group's failed jobs again, as a new run of the group:
all the jobs "failed list" shows for it (a job stays failed, whichever run it failed in, until
a retry of it succeeds), or only the IDs given (each must be one of them). The coordinator
decides and publishes the new run: each job gets its original payload, key, resources,
attempts and timeout, and a new ID; the count of its attempts starts again.

The coordinator refuses, and nothing runs again, while a run of the group is not complete (it
names that run), when there is no failed job to retry or a job given did not fail, or when the
failed jobs' payloads are no longer stored (after the result retention). With no coordinator
running, the request is stored and carried out when one starts: retry says so and exits with
status 3.

With --wait, retry waits for the new run to finish and prints the counts; it exits with
status 1 if any job failed or was canceled again.`,
		Example: `  weave failed retry --group site-1
  weave failed retry --group site-1 1042 1077 --wait`,
		Args: usageArgs(cobra.ArbitraryArgs),
		RunE: r.run,
	}
	f := cmd.Flags()
	r.conn.register(f)
	r.conn.registerTimeout(f, dispatcher.DefaultRequestTimeout)
	f.StringVarP(&r.group, "group", "g", "", "group ID (required)")
	f.BoolVarP(&r.wait, "wait", "w", false, "wait for the new run to finish and print its counts")
	f.DurationVar(&r.waitTimeout, "wait-timeout", 0, "give up waiting after this long (0: wait until interrupted)")
	f.BoolVar(&r.jsonOut, "json", false, "print the result (and summary) as JSON")
	return cmd
}

func (r *failedRetryCmd) run(cmd *cobra.Command, args []string) error {
	if err := checkGroupFlag(r.group); err != nil {
		return err
	}
	ids, err := parseJobIDs(args)
	if err != nil {
		return err
	}
	ctx, stop := signalContext(cmd.Context())
	defer stop()
	d, s, err := newDispatcher(ctx, &r.conn, "failed retry", r.g.log)
	if err != nil {
		return err
	}
	defer s.close()
	return s.explain(r.retry(s.ctx, cmd.OutOrStdout(), d, ids))
}

func (r *failedRetryCmd) retry(ctx context.Context, stdout io.Writer, d *dispatcher.Dispatcher, ids []uint64) error {
	h, err := d.Redrive(ctx, r.group, ids...)
	switch {
	case errors.Is(err, dispatcher.ErrNoAnswer) && ctx.Err() == nil: // not interrupted, nor refused by the server
		fmt.Fprintf(stdout, "group %q: retry stored; no coordinator answered within %v: it is carried out when a coordinator runs\n", r.group, r.conn.timeout)
		return pendingError{err}
	case h == nil || errors.Is(err, dispatcher.ErrGroupRunning):
		return fmt.Errorf("retry failed jobs of group %q: %w", r.group, err)
	}
	res := submitResult{Group: r.group, Accepted: h.Accepted()}
	if !r.jsonOut {
		fmt.Fprintf(stdout, "group %q: %s run again by the coordinator\n", r.group, count(res.Accepted, "failed job"))
	}
	if err != nil {
		return fmt.Errorf("retry failed jobs of group %q: %w", r.group, err)
	}
	if r.wait {
		ctx, cancel := contextWithTimeout(ctx, r.waitTimeout)
		defer cancel()
		sum, err := h.WaitSummary(ctx)
		if err != nil {
			return fmt.Errorf("wait for group %q: %w", r.group, err)
		}
		res.Summary = &summaryJSON{Jobs: sum.Jobs, Done: sum.Done, Failed: sum.Failed, Canceled: sum.Canceled}
		if !r.jsonOut {
			fmt.Fprintf(stdout, "group %q complete: %s, %d done, %d failed, %d canceled\n", r.group, count(sum.Jobs, "job"), sum.Done, sum.Failed, sum.Canceled)
		}
	}
	if r.jsonOut {
		if err := writeJSON(stdout, res, true); err != nil {
			return err
		}
	}
	if res.Summary != nil {
		if n := res.Summary.Failed + res.Summary.Canceled; n > 0 {
			return silentError{fmt.Errorf("%s did not succeed", count(n, "job"))}
		}
	}
	return nil
}

// parseJobIDs parses job IDs given as arguments: decimal, from 1.
func parseJobIDs(args []string) ([]uint64, error) {
	ids := make([]uint64, 0, len(args))
	for _, a := range args {
		id, err := strconv.ParseUint(a, 10, 64)
		if err != nil || id == 0 {
			return nil, usageErrorf("job ID %q: want a positive decimal number", a)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// withDispatcher runs do with a dispatcher of the namespace conn names, connected as name, until
// SIGINT or SIGTERM, and explains an error the server's refusal caused.
func withDispatcher(cmd *cobra.Command, g *globals, conn *connFlags, name string, do func(context.Context, *dispatcher.Dispatcher) error) error {
	ctx, stop := signalContext(cmd.Context())
	defer stop()
	d, s, err := newDispatcher(ctx, conn, name, g.log)
	if err != nil {
		return err
	}
	defer s.close()
	return s.explain(do(s.ctx, d))
}

// newDispatcher connects and returns a dispatcher of the namespace the flags name, waiting at
// most --timeout for each answer; the caller closes the connection.
func newDispatcher(ctx context.Context, conn *connFlags, name string, log zerolog.Logger, opts ...func(*dispatcher.Config)) (*dispatcher.Dispatcher, *cmdConn, error) {
	s, err := conn.open(ctx, name, log)
	if err != nil {
		return nil, nil, err
	}
	cfg := dispatcher.Config{Namespace: conn.namespace, Logger: log, RequestTimeout: conn.timeout}
	for _, opt := range opts {
		opt(&cfg)
	}
	d, err := dispatcher.New(s.nc, cfg)
	if err != nil {
		s.close()
		if errors.Is(err, dispatcher.ErrInvalidConfig) {
			return nil, nil, usageError{err}
		}
		return nil, nil, err
	}
	return d, s, nil
}
