package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/internal/safetext"
	"github.com/weavejobs/weave/internal/wire"
)

// submitCmd holds the submit command's flags.
type submitCmd struct {
	g           *globals
	conn        connFlags
	group, file string
	wait        bool
	outcomes    bool
	jsonOut     bool
	noProgress  bool
	waitTimeout time.Duration
	maxPack     int
	weight      int
	single      bool
	singles     bool
	after       []string // --after: groups the group runs after
	when        string   // --when: the condition of each
	ifFailed    string   // --if-failed: what a success condition does when one did not succeed
	deps        []dispatcher.Dependency
	priority    int
	nc          *nats.Conn // the command's connection, for asking the coordinator's status
	showWait    bool       // show the progress of --wait on stderr (a terminal)
	// allowDuplicates: a submission whose every job was a duplicate is not an error.
	allowDuplicates bool
	replicas        int // deprecated, ignored
}

func newSubmitCmd(g *globals) *cobra.Command {
	s := &submitCmd{g: g}
	cmd := &cobra.Command{
		Use:   "submit (--group G | --single | --singles) [--file jobs.jsonl|-]",
		Short: "Submit a group of jobs from JSON lines",
		Long: `Submit publishes a group of jobs read from JSON lines, one job per line, and seals the group.
The file is streamed: jobs are published as they are read, whatever the file's size.

A line is a JSON object; every field is optional:
  key           the job's key in the group; jobs with the same key are deduplicated
                (within the streams' dedup window, 2 minutes by default), so submitting a
                file again after a failure adds only the missing jobs
  payload       the job's payload: a JSON string is sent as its text, any other JSON value
                (object, array, number...) as its compact JSON encoding
  payload_b64   the payload as base64 (standard encoding), for binary data
  require       resources a worker must hold to run the job, e.g. ["eu"]
  prefer        resources the job should run near when a holder is free
  max_attempts  attempts before the job fails (default: the coordinator's)
  timeout       timeout of one attempt, a Go duration such as "30s" (default: the worker's)
  delay         hold the job back this long after it is published, e.g. "10m" (up to 366 days)
  run_at        or until this time, RFC 3339, e.g. "2026-12-01T09:00:00Z" (not with delay)
  priority      0-9: the job goes ahead of its group's jobs of lower priorities (with
                --singles, its group's priority, as --priority is for a group)
Blank lines are skipped; an unknown field or a malformed line stops the submission: the
group is then sealed with the jobs before that line.

  {"key": "a", "payload": "hello"}
  {"key": "b", "payload": {"user": 42}, "require": ["eu"], "max_attempts": 3, "timeout": "10s"}
  {"key": "c", "payload_b64": "AAECAw=="}

With --single, the input's one job is submitted as a group of its own in a single message (the
group is --group, or a generated "job-..." ID), --wait prints its outcome, and --outcomes
prints it as a JSON line on stdout (the other lines then go to stderr), as for a group.

With --singles, every line is a single job of its own group, as --single makes one: the line's
"group" field names the group (a generated "job-..." ID without it), and the jobs are submitted
many at a time (Dispatcher.SubmitMany), those without a key up to --max-pack to a message.
--json prints a line per job ({"group", "id", "duplicate"}); --wait waits for every job and
prints the counts; --outcomes prints each job's line with its outcome.

  {"group": "tenant-7", "key": "invoice-1", "payload": {"id": 1}}
  {"payload": "a job of a generated group"}

With --wait, submit waits for every job of the group to end and prints the counts; it exits
with status 1 if any job failed or was canceled. --outcomes also prints each job's outcome as
a JSON line on stdout: {"id", "key", "state", "attempts", "result" (or "result_b64"), "error"}.`,
		Args: noArgs,
		RunE: s.run,
	}
	f := cmd.Flags()
	s.conn.register(f)
	f.StringVarP(&s.group, "group", "g", "", "group ID (required): 1-256 bytes of UTF-8 without control characters")
	f.StringVarP(&s.file, "file", "f", "-", "jobs file, JSON lines; - for stdin")
	f.BoolVarP(&s.wait, "wait", "w", false, "wait for the group to finish and print its counts")
	f.BoolVar(&s.outcomes, "outcomes", false, "print each job's outcome as a JSON line (implies --wait)")
	f.DurationVar(&s.waitTimeout, "wait-timeout", 0, "give up waiting after this long (0: wait until interrupted)")
	f.IntVar(&s.weight, "weight", 1, "the group's weight in the fair share of the slots under least in-flight (1-1000)")
	f.BoolVar(&s.single, "single", false, "submit one job (the input's only line) as a group of its own, in one message; --group is then optional (default: generated)")
	f.BoolVar(&s.singles, "singles", false, "submit every line as a single job of its own group (the line's \"group\", or a generated ID), many in flight at once; not with --group")
	f.IntVar(&s.maxPack, "max-pack", wire.MaxPack, "most jobs without a key stored in one message (a pack); 1 stores each job alone, for a coordinator built before packs")
	f.IntVar(&s.priority, "priority", 0, "the group's priority, 0-9: its jobs go before those of lower priorities whenever a pool has room (for urgent work)")
	f.StringArrayVar(&s.after, "after", nil, "run the group after this group has completed (repeat for several): its jobs are stored now and held until then")
	f.StringVar(&s.when, "when", "success", "what --after waits for in each group: success (every job done), completion (whatever the outcomes) or failure")
	f.StringVar(&s.ifFailed, "if-failed", "cancel", "with --when success, what to do when a group did not succeed: cancel this group, or wait for a redrive of it")
	f.BoolVar(&s.allowDuplicates, "allow-duplicates", false, "exit 0 even if every job was a duplicate (re-submitted within the dedup window)")
	f.BoolVar(&s.jsonOut, "json", false, "print the submission (and summary) as JSON")
	s.conn.registerTimeout(f, dispatcher.DefaultRequestTimeout)
	f.IntVar(&s.replicas, "replicas", 1, "ignored: submit does not create streams")
	_ = f.MarkDeprecated("replicas", "submit no longer creates streams: 'weave init --replicas N' or the coordinator's --replicas does")
	f.BoolVar(&s.noProgress, "no-progress", false, "do not show the progress bar (it shows only on a terminal)")
	return cmd
}

func (s *submitCmd) run(cmd *cobra.Command, _ []string) error {
	switch {
	case s.singles && (s.single || s.group != ""):
		return usageErrorf("--singles takes each job's group from its line (\"group\"), or generates one: not with --single or --group")
	case s.singles && cmd.Flags().Changed("weight"):
		return usageErrorf("--weight is a group's: with --singles, every job is a group of weight 1")
	case s.singles && len(s.after) > 0:
		return usageErrorf("--after is a group's: not with --singles")
	case s.singles && s.priority != 0:
		return usageErrorf("--priority is a group's: not with --singles")
	case s.priority < 0 || s.priority > wire.MaxPriority:
		return usageErrorf("--priority %d outside 0..%d", s.priority, wire.MaxPriority)
	}
	if err := s.dependencies(); err != nil {
		return err
	}
	if s.singles || s.single && s.group == "" {
		// A generated group ID (Dispatcher.Submit).
	} else if err := checkGroupFlag(s.group); err != nil {
		return err
	}
	if s.weight < 1 || s.weight > wire.MaxWeight {
		return usageErrorf("--weight %d outside 1..%d", s.weight, wire.MaxWeight)
	}
	if s.maxPack < 1 || s.maxPack > wire.MaxPack {
		return usageErrorf("--max-pack %d outside 1..%d", s.maxPack, wire.MaxPack)
	}
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	in, size, closeIn, err := openJobs(cmd, s.file)
	if err != nil {
		return err
	}
	defer closeIn()
	var bar *progressbar.ProgressBar
	if !s.noProgress && isTerminal(stderr) {
		bar = newSubmitBar(stderr, size)
		if size > 0 {
			in = io.TeeReader(in, bar)
		}
	}

	ctx, stop := signalContext(cmd.Context())
	defer stop()
	d, sess, err := newDispatcher(ctx, &s.conn, "submit", s.g.log, func(c *dispatcher.Config) { c.MaxPack = s.maxPack })
	if err != nil {
		return err
	}
	defer sess.close()
	s.nc = sess.nc
	s.showWait = !s.noProgress && isTerminal(stderr)
	return sess.explain(s.submit(sess.ctx, d, in, bar, size, stdout, stderr))
}

// submit publishes the jobs of in and, with --wait, waits for the group.
func (s *submitCmd) submit(ctx context.Context, d *dispatcher.Dispatcher, in io.Reader, bar *progressbar.ProgressBar, size int64, stdout, stderr io.Writer) error {
	if s.single {
		return s.submitSingle(ctx, d, in, stdout, stderr)
	}
	if s.singles {
		return s.submitSingles(ctx, d, in, bar, stdout, stderr)
	}

	jr := newJobReader(in)
	h, err := d.Publish(ctx, s.group, readJobs(jr, bar, size > 0), dispatcher.Weight(s.weight), dispatcher.After(s.deps...), dispatcher.Priority(s.priority))
	if errors.Is(err, dispatcher.ErrInvalidJob) {
		// Publish refuses the job it was just given: the last one read.
		err = fmt.Errorf("line %d: %w", jr.jobLine, err)
	}
	if bar != nil {
		_ = bar.Finish()
		fmt.Fprintln(stderr)
	}
	err = errors.Join(jr.Err(), err)
	res := submitResult{Group: s.group}
	if h != nil {
		res.Accepted, res.Duplicates, res.FirstID, res.LastID = h.Accepted(), h.Duplicates(), h.FirstID(), h.LastID()
	}
	// Human-readable lines go to stdout, unless stdout carries outcome lines.
	info := stdout
	if s.outcomes {
		info = stderr
	}
	// The count is said once the group was opened: not when Publish stored nothing (a namespace
	// not initialised, a group still running).
	if !s.jsonOut && h != nil && !errors.Is(err, dispatcher.ErrGroupRunning) {
		fmt.Fprintf(info, "group %q: %s submitted", s.group, count(res.Accepted, "job"))
		if res.Duplicates > 0 {
			fmt.Fprintf(info, ", %d duplicates dropped", res.Duplicates)
		}
		if res.Accepted > 0 {
			fmt.Fprint(info, idRange(res.FirstID, res.LastID))
		}
		fmt.Fprintln(info)
	}
	if err != nil {
		switch {
		case errors.Is(err, dispatcher.ErrGroupRunning):
			// Nothing was published, nor sealed: the group ID's last incarnation has not finished.
			err = fmt.Errorf("group %q is sealed and still running, so nothing was submitted: submit it again once it has finished ('weave status' lists it while it runs)", s.group)
		case h != nil:
			err = fmt.Errorf("%w (the group was sealed with the %s submitted before it)", err, count(res.Accepted, "job"))
		}
		return err
	}
	if res.Accepted == 0 && res.Duplicates > 0 && !s.allowDuplicates {
		// A re-submission within the dedup window: nothing new will run, which is most often a
		// mistake (a group name reused) rather than the intent.
		if s.jsonOut {
			if err := writeJSON(stdout, res, !s.outcomes); err != nil {
				return err
			}
		}
		return fmt.Errorf("group %q: every job (%d) was a duplicate of one submitted within the dedup window, so none will run; pass --allow-duplicates if that is expected", s.group, res.Duplicates)
	}
	if s.wait || s.outcomes {
		ctx, cancel := contextWithTimeout(ctx, s.waitTimeout)
		defer cancel()
		s.checkCoordinator(ctx, stderr)
		defer s.hintUnplaceable(ctx, d, s.group, stderr)()
		sum, err := s.waitFor(ctx, h, stdout, stderr)
		if err != nil {
			return err
		}
		res.Summary = &sum
		if !s.jsonOut {
			fmt.Fprintf(info, "group %q complete: %s, %d done, %d failed, %d canceled\n", s.group, count(sum.Jobs, "job"), sum.Done, sum.Failed, sum.Canceled)
		}
	}
	if s.jsonOut {
		if err := writeJSON(stdout, res, !s.outcomes); err != nil {
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

// waitFor waits for the group to finish, printing each job's outcome on out with --outcomes.
func (s *submitCmd) waitFor(ctx context.Context, h *dispatcher.Handle, out, stderr io.Writer) (summaryJSON, error) {
	if !s.outcomes && s.showWait {
		if err := s.showProgress(ctx, h, stderr); err != nil {
			return summaryJSON{}, s.waitError(s.group, err)
		}
	}
	if s.outcomes {
		enc := jsonEncoder(out)
		for o, err := range h.Outcomes(ctx) {
			if err != nil {
				return summaryJSON{}, s.waitError(s.group, err)
			}
			if err := enc.Encode(outcomeLine(o)); err != nil {
				return summaryJSON{}, err
			}
		}
	}
	sum, err := h.WaitSummary(ctx)
	if err != nil {
		return summaryJSON{}, s.waitError(s.group, err)
	}
	return summaryJSON{Jobs: sum.Jobs, Done: sum.Done, Failed: sum.Failed, Canceled: sum.Canceled}, nil
}

// openJobs opens the jobs input: a file, or stdin for "-". size is the file's size if known
// (a regular file), else 0.
func openJobs(cmd *cobra.Command, file string) (r io.Reader, size int64, closeFn func(), err error) {
	if file == "-" {
		return cmd.InOrStdin(), 0, func() {}, nil
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, 0, nil, err
	}
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
		size = fi.Size()
	}
	return f, size, func() { f.Close() }, nil
}

// newSubmitBar returns a progress bar on w: over the file's bytes when its size is known, else
// a counter of jobs.
func newSubmitBar(w io.Writer, size int64) *progressbar.ProgressBar {
	opts := []progressbar.Option{
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription("submitting"),
		progressbar.OptionThrottle(100 * time.Millisecond),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSetWidth(30),
	}
	if size > 0 {
		return progressbar.NewOptions64(size, append(opts, progressbar.OptionShowBytes(true), progressbar.OptionSetPredictTime(true))...)
	}
	return progressbar.NewOptions64(-1, append(opts, progressbar.OptionShowCount(), progressbar.OptionShowIts(), progressbar.OptionSetItsString("jobs"))...)
}

// readJobs yields the jobs of jr, counting them on bar: in its description when the bar
// follows bytes, else as its progress.
func readJobs(jr *jobReader, bar *progressbar.ProgressBar, bytes bool) iter.Seq[dispatcher.Job] {
	return func(yield func(dispatcher.Job) bool) {
		n, described := 0, time.Time{}
		for {
			j, ok := jr.next()
			if !ok {
				return
			}
			n++
			switch {
			case bar == nil:
			case !bytes:
				_ = bar.Add(1)
			case time.Since(described) > 100*time.Millisecond:
				bar.Describe(fmt.Sprintf("submitting %d jobs", n))
				described = time.Now()
			}
			if !yield(j) {
				return
			}
		}
	}
}

// submitResult is what submit prints with --json.
type submitResult struct {
	Group      string       `json:"group"`
	Accepted   int          `json:"accepted"`
	Duplicates int          `json:"duplicates"`
	FirstID    uint64       `json:"first_id,omitempty"`
	LastID     uint64       `json:"last_id,omitempty"`
	Summary    *summaryJSON `json:"summary,omitempty"`
}

type summaryJSON struct {
	Jobs     int `json:"jobs"`
	Done     int `json:"done"`
	Failed   int `json:"failed"`
	Canceled int `json:"canceled"`
}

// jobOutcomeLine is one line of --outcomes.
type jobOutcomeLine struct {
	ID        uint64 `json:"id"`
	Key       string `json:"key,omitempty"`
	State     string `json:"state"`
	Attempts  int    `json:"attempts"`
	Result    string `json:"result,omitempty"`
	ResultB64 []byte `json:"result_b64,omitempty"`
	Error     string `json:"error,omitempty"`
}

func outcomeLine(o dispatcher.JobOutcome) jobOutcomeLine {
	l := jobOutcomeLine{ID: o.ID, Key: o.Key, State: string(o.State), Attempts: o.Attempts, Error: o.Err}
	if utf8.Valid(o.Result) {
		l.Result = string(o.Result)
	} else {
		l.ResultB64 = o.Result
	}
	return l
}

// writeJSON writes v as JSON, indented or on one line.
// jsonEncoder is every --json output's encoder: job results and errors, IDs and keys are
// untrusted text, written with the characters a terminal may interpret escaped (safetext.JSON).
func jsonEncoder(w io.Writer) *json.Encoder { return json.NewEncoder(safetext.JSON(w)) }

func writeJSON(w io.Writer, v any, indent bool) error {
	enc := jsonEncoder(w)
	if indent {
		enc.SetIndent("", "  ")
	}
	return enc.Encode(v)
}

// checkCoordinator says on stderr when no coordinator answers on the namespace, or no worker has
// joined it: the jobs are stored and wait, and without this the wait would be silent for ever.
func (s *submitCmd) checkCoordinator(ctx context.Context, stderr io.Writer) {
	qctx, cancel := contextWithTimeout(ctx, s.conn.timeout)
	defer cancel()
	st, err := coordinator.QueryStatus(qctx, s.nc, s.conn.namespace)
	switch {
	case ctx.Err() != nil:
	case err != nil:
		fmt.Fprintf(stderr, "weave: no coordinator answers on namespace %q; the jobs are stored and run once one starts ('weave coordinator --namespace %s'). Waiting...\n",
			s.conn.namespace, s.conn.namespace)
	case st.WorkerCount == 0:
		fmt.Fprintf(stderr, "weave: no worker has joined namespace %q; the jobs run once one does ('weave worker --namespace %s -- COMMAND'). Waiting...\n",
			s.conn.namespace, s.conn.namespace)
	}
}

// unplaceableHintAfter is how long a wait goes on before submit checks whether its group's jobs
// can run at all: long enough that a group that runs says nothing.
const unplaceableHintAfter = 3 * time.Second

// hintUnplaceable says on stderr, once, if the group still waits unplaceableHintAfter from now
// with jobs that require resources no live worker holds: without it the wait would be silent
// for ever. The returned func cancels the check, or waits for it to finish writing.
func (s *submitCmd) hintUnplaceable(ctx context.Context, d *dispatcher.Dispatcher, group string, stderr io.Writer) (stop func()) {
	done := make(chan struct{})
	t := time.AfterFunc(unplaceableHintAfter, func() {
		defer close(done)
		qctx, cancel := contextWithTimeout(ctx, s.conn.timeout)
		defer cancel()
		if g, err := d.Group(qctx, group); err == nil && g.Unplaceable > 0 && ctx.Err() == nil {
			if s.showWait {
				fmt.Fprintln(stderr) // past the progress line
			}
			fmt.Fprintf(stderr, "weave: %s: they wait until a worker holding them joins. Waiting...\n", unplaceableLine(g))
		}
	})
	return func() {
		if !t.Stop() {
			<-done
		}
	}
}

// showProgress follows the group's outcomes until it has finished, redrawing one line of counts
// on stderr (a terminal) at most every 200ms.
func (s *submitCmd) showProgress(ctx context.Context, h *dispatcher.Handle, stderr io.Writer) error {
	seen := make(map[uint64]bool) // a job may be recorded twice after a coordinator's crash
	var done, failed, canceled int
	var drawn time.Time
	draw := func() {
		pending := h.Accepted() - done - failed - canceled
		fmt.Fprintf(stderr, "\rwaiting: %d done, %d failed, %d canceled, %d pending  ", done, failed, canceled, pending)
		drawn = time.Now()
	}
	draw()
	for o, err := range h.Outcomes(ctx) {
		if errors.Is(err, dispatcher.ErrMalformedOutcome) {
			continue
		} else if err != nil {
			fmt.Fprintln(stderr)
			return err
		}
		if seen[o.ID] {
			continue
		}
		seen[o.ID] = true
		switch o.State {
		case dispatcher.StateDone:
			done++
		case dispatcher.StateFailed:
			failed++
		case dispatcher.StateCanceled:
			canceled++
		}
		if time.Since(drawn) >= 200*time.Millisecond {
			draw()
		}
	}
	draw()
	fmt.Fprintln(stderr)
	return nil
}

// waitError is err of waiting for the group, saying which limit ended the wait.
func (s *submitCmd) waitError(group string, err error) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded) && s.waitTimeout > 0:
		return fmt.Errorf("group %q did not finish within --wait-timeout %v (its jobs go on; 'weave status' shows them)", group, s.waitTimeout)
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("wait for group %q interrupted (its jobs go on; 'weave status' shows them)", group)
	}
	return fmt.Errorf("wait for group %q: %w", group, err)
}

// idRange is ", ID n" or ", IDs first-last": the IDs a submission was given. Jobs stored in
// packs have IDs from 2^52 on (wire.PackedJobID), so a range reaching them is said to be one
// of IDs, not of consecutive jobs.
func idRange(first, last uint64) string {
	switch {
	case first == last:
		return fmt.Sprintf(", ID %d", first)
	case wire.IsPacked(last):
		return fmt.Sprintf(", IDs from %d to %d (jobs stored in packs have IDs from 2^52 on)", first, last)
	}
	return fmt.Sprintf(", IDs %d-%d", first, last)
}

// submitSingle submits the input's only job as a group of its own (Dispatcher.Submit) and, with
// --wait or --outcomes, waits for its outcome.
func (s *submitCmd) submitSingle(ctx context.Context, d *dispatcher.Dispatcher, in io.Reader, stdout, stderr io.Writer) error {
	jr := newJobReader(in)
	job, ok := jr.next()
	if err := jr.Err(); err != nil {
		return usageErrorf("%v", err)
	}
	if !ok {
		return usageErrorf("--single: the input holds no job")
	}
	if _, more := jr.next(); more || jr.Err() != nil {
		return usageErrorf("--single: the input holds more than one job (line %d)", jr.line)
	}
	h, id, err := d.Submit(ctx, s.group, job, dispatcher.After(s.deps...), dispatcher.Priority(s.priority))
	if err != nil {
		return err
	}
	res := singleResult{Group: h.GroupID(), ID: id, Duplicate: h.Duplicates() > 0}
	// Human-readable lines go to stdout, unless stdout carries the outcome line (as for a group).
	info := stdout
	if s.outcomes {
		info = stderr
	}
	if !s.jsonOut {
		fmt.Fprintf(info, "job %d submitted as group %q", id, res.Group)
		if res.Duplicate {
			fmt.Fprint(info, " (a duplicate of one submitted within the dedup window: not stored again)")
		}
		fmt.Fprintln(info)
	}
	if s.wait || s.outcomes {
		wctx, cancel := contextWithTimeout(ctx, s.waitTimeout)
		defer cancel()
		s.checkCoordinator(wctx, stderr)
		defer s.hintUnplaceable(wctx, d, h.GroupID(), stderr)()
		o, err := h.WaitJob(wctx, id)
		if err != nil {
			return s.waitError(h.GroupID(), err)
		}
		line := outcomeLine(o)
		res.Outcome = &line
		if !s.jsonOut {
			if s.outcomes {
				if err := jsonEncoder(stdout).Encode(line); err != nil {
					return err
				}
			}
			fmt.Fprintf(info, "job %d %s after %s", id, o.State, count(o.Attempts, "attempt"))
			if o.Err != "" {
				fmt.Fprintf(info, ": %s", safetext.Clip(o.Err, maxCell, "weave job --full shows all"))
			}
			fmt.Fprintln(info)
		}
	}
	if s.jsonOut {
		if err := writeJSON(stdout, res, true); err != nil {
			return err
		}
	}
	if res.Outcome != nil && res.Outcome.State != string(dispatcher.StateDone) {
		return silentError{fmt.Errorf("job %d %s", id, res.Outcome.State)}
	}
	return nil
}

// singlesChunk is how many lines submit --singles reads before it submits them
// (Dispatcher.SubmitMany): a bounded memory, and enough publishes to keep MaxPending in flight.
const singlesChunk = 1000

// submitSingles submits every job of in as a single job of its own group (Dispatcher.SubmitMany),
// chunk by chunk, and with --wait or --outcomes waits for each job's outcome.
func (s *submitCmd) submitSingles(ctx context.Context, d *dispatcher.Dispatcher, in io.Reader, bar *progressbar.ProgressBar, stdout, stderr io.Writer) error {
	jr := newJobReader(in)
	jr.singles = true
	info := stdout
	if s.outcomes || s.jsonOut {
		info = stderr // stdout carries JSON lines
	}
	var (
		submitted []dispatcher.Submitted // kept only to wait for them
		accepted  int
		dups      int
		chunk     []dispatcher.Single
		enc       = jsonEncoder(stdout)
	)
	flush := func() error {
		subs, err := d.SubmitMany(ctx, chunk)
		for _, sub := range subs {
			dup := sub.Handle.Duplicates() > 0
			if dup {
				dups++
			} else {
				accepted++
			}
			if s.jsonOut && !s.outcomes {
				if err := enc.Encode(singleResult{Group: sub.Handle.GroupID(), ID: sub.ID, Duplicate: dup}); err != nil {
					return err
				}
			}
			if s.wait || s.outcomes {
				submitted = append(submitted, sub)
			}
		}
		if bar != nil {
			_ = bar.Add(len(subs))
		}
		chunk = chunk[:0]
		return err
	}
	var err error
	for err == nil {
		if _, ok := jr.next(); !ok {
			break
		}
		chunk = append(chunk, jr.single)
		if len(chunk) == singlesChunk {
			err = flush()
		}
	}
	if err == nil && len(chunk) > 0 {
		err = flush()
	}
	if bar != nil {
		_ = bar.Finish()
		fmt.Fprintln(stderr)
	}
	err = errors.Join(jr.Err(), err)
	if err == nil || accepted+dups > 0 {
		fmt.Fprintf(info, "%s submitted as single jobs", count(accepted, "job"))
		if dups > 0 {
			fmt.Fprintf(info, ", %d duplicates dropped", dups)
		}
		fmt.Fprintln(info)
	}
	if err != nil {
		return fmt.Errorf("%w (the %s before it were submitted)", err, count(accepted+dups, "job"))
	}
	if !s.wait && !s.outcomes {
		return nil
	}
	wctx, cancel := contextWithTimeout(ctx, s.waitTimeout)
	defer cancel()
	s.checkCoordinator(wctx, stderr)
	var sum summaryJSON
	for _, sub := range submitted {
		o, err := sub.Handle.WaitJob(wctx, sub.ID)
		if err != nil {
			fmt.Fprintf(info, "%s ended before job %d: %d done, %d failed, %d canceled\n", count(sum.Jobs, "single job"), sub.ID, sum.Done, sum.Failed, sum.Canceled)
			return s.waitError(sub.Handle.GroupID(), err)
		}
		sum.Jobs++
		switch o.State {
		case dispatcher.StateDone:
			sum.Done++
		case dispatcher.StateFailed:
			sum.Failed++
		default:
			sum.Canceled++
		}
		if s.outcomes {
			line := outcomeLine(o)
			if err := enc.Encode(singleResult{Group: sub.Handle.GroupID(), ID: sub.ID, Duplicate: sub.Handle.Duplicates() > 0, Outcome: &line}); err != nil {
				return err
			}
		}
	}
	fmt.Fprintf(info, "%s complete: %d done, %d failed, %d canceled\n", count(sum.Jobs, "single job"), sum.Done, sum.Failed, sum.Canceled)
	if n := sum.Failed + sum.Canceled; n > 0 {
		return silentError{fmt.Errorf("%s did not succeed", count(n, "job"))}
	}
	return nil
}

// singleResult is submit --single --json's output, and each line of submit --singles --json.
type singleResult struct {
	Group     string          `json:"group"`
	ID        uint64          `json:"id"`
	Duplicate bool            `json:"duplicate,omitempty"`
	Outcome   *jobOutcomeLine `json:"outcome,omitempty"`
}

// dependencies reads --after, --when and --if-failed.
func (s *submitCmd) dependencies() error {
	var when dispatcher.Condition
	switch s.when {
	case "success":
		when = dispatcher.OnSuccess
	case "completion", "complete":
		when = dispatcher.OnCompletion
	case "failure":
		when = dispatcher.OnFailure
	default:
		return usageErrorf("--when %q: want success, completion or failure", s.when)
	}
	var ifFailed dispatcher.IfFailed
	switch s.ifFailed {
	case "cancel":
	case "wait":
		ifFailed = dispatcher.WaitIfFailed
	default:
		return usageErrorf("--if-failed %q: want cancel or wait", s.ifFailed)
	}
	if ifFailed == dispatcher.WaitIfFailed && when != dispatcher.OnSuccess {
		return usageErrorf("--if-failed wait goes with --when success")
	}
	for _, g := range s.after {
		if err := checkGroupFlag(g); err != nil {
			return fmt.Errorf("--after: %w", err)
		}
		s.deps = append(s.deps, dispatcher.Dependency{Group: g, When: when, IfFailed: ifFailed})
	}
	return nil
}
