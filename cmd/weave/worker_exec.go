package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/weavejobs/weave/internal/safetext"
	"github.com/weavejobs/weave/worker"
)

// exitDataErr (EX_DATAERR in BSD's sysexits.h) is the exit status of a command whose input is
// bad: retrying cannot help. Every other non-zero status is retryable.
const exitDataErr = 65

// stderrTail is how much of the end of a failed command's stderr becomes the attempt's error.
const stderrTail = 1 << 10

// execHandler runs a command per job (see the worker command's help for the contract).
type execHandler struct {
	argv      []string // resolved command path and arguments
	maxOutput int      // largest stdout kept as the result
	killGrace time.Duration
	namespace string
	workerID  string
	stderr    io.Writer // the worker's stderr, where the commands' stderr goes; nil: discarded
}

func (h *execHandler) Handle(ctx context.Context, j *worker.Job) ([]byte, error) {
	out, permanent, err := h.run(ctx, j)
	if permanent {
		return nil, worker.Permanent(err)
	}
	return out, err
}

// run runs the command for j and returns its output, or an error and whether retrying cannot
// help.
func (h *execHandler) run(ctx context.Context, j *worker.Job) (out []byte, permanent bool, err error) {
	cmd := exec.CommandContext(ctx, h.argv[0], h.argv[1:]...)
	cmd.Stdin = bytes.NewReader(j.Payload)
	stdout := &limitedBuffer{max: h.maxOutput}
	cmd.Stdout = stdout
	tail := &tailBuffer{max: stderrTail}
	if h.stderr != nil {
		// Jobs run side by side on one stderr: each line says which job (and attempt) wrote it.
		lines := &linePrefixer{out: h.stderr, prefix: fmt.Sprintf("[job %d key %q attempt %d] ", j.ID, safetext.Line(j.Key), j.Attempt)}
		defer lines.flush()
		cmd.Stderr = io.MultiWriter(lines, tail)
	} else {
		cmd.Stderr = tail
	}
	cmd.Env = append(os.Environ(),
		"WEAVE_JOB_ID="+strconv.FormatUint(j.ID, 10),
		"WEAVE_JOB_KEY="+j.Key,
		"WEAVE_JOB_GROUP="+j.Group,
		"WEAVE_JOB_ATTEMPT="+strconv.Itoa(j.Attempt),
		"WEAVE_NAMESPACE="+h.namespace,
		"WEAVE_WORKER_ID="+h.workerID,
	)
	setProcessGroup(cmd)
	// On timeout or cancellation: SIGTERM now, SIGKILL after the grace period if it is still
	// there. Cancel runs on exec's goroutine, which Wait joins, so kill is set before Run returns.
	var kill *time.Timer
	cmd.Cancel = func() error {
		kill = time.AfterFunc(h.killGrace, func() { _ = killProcess(cmd.Process) })
		return terminateProcess(cmd.Process)
	}
	// Pipes held open by the command's own children must not keep Run waiting forever.
	cmd.WaitDelay = h.killGrace + time.Second
	err = cmd.Run()
	if kill != nil {
		kill.Stop()
	}

	var exit *exec.ExitError
	switch {
	case err == nil && stdout.overflow:
		return nil, true, fmt.Errorf("command wrote more than %d bytes to stdout (--max-output)", h.maxOutput)
	case err == nil:
		return stdout.Bytes(), false, nil
	case ctx.Err() != nil:
		return nil, false, fmt.Errorf("command stopped (%w)%s", context.Cause(ctx), tail.suffix())
	case errors.As(err, &exit) && exit.ExitCode() == exitDataErr:
		return nil, true, fmt.Errorf("exit status %d (permanent failure)%s", exitDataErr, tail.suffix())
	case errors.As(err, &exit):
		return nil, false, fmt.Errorf("%v%s", exit, tail.suffix())
	default:
		// The command could not start (or its output not be collected); another attempt, maybe
		// on another worker, may succeed.
		return nil, false, fmt.Errorf("run %s: %w", h.argv[0], err)
	}
}

// limitedBuffer keeps up to max bytes and notes whether more were written. It never fails a
// write, so the command does not die of a broken pipe. (It does not embed bytes.Buffer, whose
// ReadFrom io.Copy would use instead of Write.)
type limitedBuffer struct {
	buf      []byte
	max      int
	overflow bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if room := b.max - len(b.buf); n > room {
		b.overflow = true
		p = p[:max(room, 0)]
	}
	b.buf = append(b.buf, p...)
	return n, nil
}

func (b *limitedBuffer) Bytes() []byte { return b.buf }

// tailBuffer keeps the last max bytes written to it. Writes may come from two goroutines when
// stdout and stderr share it, so it locks.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

// suffix returns ": " and the last line(s) of stderr, or "" if it was empty.
func (b *tailBuffer) suffix() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := strings.TrimSpace(strings.ToValidUTF8(string(b.buf), "\uFFFD"))
	if s == "" {
		return ""
	}
	return ": " + s
}

// stderrMu serialises whole lines onto the worker's stderr, so that lines of jobs running at
// once do not interleave mid-line.
var stderrMu sync.Mutex

// linePrefixer writes each line written to it to out with prefix in front. It holds a line until
// its newline (or flush) arrives. One command's stderr writes to it from one goroutine.
type linePrefixer struct {
	out     io.Writer
	prefix  string
	pending []byte // a line not yet ended
}

func (w *linePrefixer) Write(p []byte) (int, error) {
	w.pending = append(w.pending, p...)
	for {
		i := bytes.IndexByte(w.pending, '\n')
		if i < 0 {
			break
		}
		w.emit(w.pending[:i+1])
		w.pending = w.pending[i+1:]
	}
	return len(p), nil
}

// flush writes a last line that did not end in a newline.
func (w *linePrefixer) flush() {
	if len(w.pending) > 0 {
		w.emit(append(w.pending, '\n'))
		w.pending = nil
	}
}

func (w *linePrefixer) emit(line []byte) {
	stderrMu.Lock()
	defer stderrMu.Unlock()
	// The command's bytes are shown, not sent raw to the operator's terminal.
	text := safetext.Line(strings.TrimSuffix(string(line), "\n"))
	_, _ = io.WriteString(w.out, w.prefix+text+"\n") // the worker's stderr failing must not fail the job
}
