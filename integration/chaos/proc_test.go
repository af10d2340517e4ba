//go:build linux

package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// binaries are the programs the test runs, built from this module.
type binaries struct {
	natsServer, weave, chaosproc string
}

// build builds nats-server (the module's version), weave and chaosproc into dir, so the test runs
// whatever the working tree holds. Go's build cache makes it quick after the first time.
func build(ctx context.Context, t *testing.T, dir string) binaries {
	t.Helper()
	b := binaries{
		natsServer: filepath.Join(dir, "nats-server"),
		weave:      filepath.Join(dir, "weave"),
		chaosproc:  filepath.Join(dir, "chaosproc"),
	}
	for out, pkg := range map[string]string{
		b.natsServer: "github.com/nats-io/nats-server/v2",
		b.weave:      "github.com/weavejobs/weave/cmd/weave",
		b.chaosproc:  "github.com/weavejobs/weave/integration/chaos/internal/chaosproc",
	} {
		// `go test` puts its own go first on PATH.
		cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
		if msg, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, msg)
		}
	}
	return b
}

// proc is one child process, restartable with the same command line. Every child runs in its own
// process group, so signals reach whatever it started too, and dies with the test process
// (Pdeathsig). Its output goes to a log file kept across restarts.
type proc struct {
	name string
	args []string // args[0] is the program
	log  string   // stdout and stderr, appended by each run

	mu     sync.Mutex
	cmd    *exec.Cmd     // the current run, nil before the first
	exited chan struct{} // closed when the current run has exited
	exit   error         // the current run's exit status, set before exited closes
	// killed is set when the test sends SIGKILL or SIGTERM, so that an exit the test caused is
	// told apart from one the process chose (a coordinator exiting on an error instead of standing
	// by).
	killed bool
	// unexpected lists the failed exits the test did not cause, for the report.
	unexpected []string
	// supervised: a failed exit the test did not cause is followed by a new run after
	// restartDelay, as a service manager would do. closing stops that at the end of the test.
	supervised bool
	closing    bool
}

// startMarker begins the line a proc writes to its log before each run.
const startMarker = "=== start "

// restartDelay is how long a supervised process stays down after it failed by itself, like a
// service manager's restart delay.
const restartDelay = time.Second

func newProc(name, logDir string, args ...string) *proc {
	return &proc{name: name, args: args, log: filepath.Join(logDir, name+".log")}
}

// start starts a new run of p, unless one is running (a supervised restart came first) or the
// test is ending.
func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closing {
		return nil
	}
	if p.exited != nil {
		select {
		case <-p.exited:
		default:
			return nil
		}
	}
	out, err := os.OpenFile(p.log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%s%s %s\n", startMarker, time.Now().Format(time.RFC3339Nano), p.name)
	cmd := exec.Command(p.args[0], p.args[1:]...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("%s: %w", p.name, err)
	}
	exited := make(chan struct{})
	p.cmd, p.exited, p.exit, p.killed = cmd, exited, nil, false
	go func() {
		err := cmd.Wait()
		out.Close()
		p.mu.Lock()
		p.exit = err
		failed := err != nil && !p.killed
		if failed {
			p.unexpected = append(p.unexpected, fmt.Sprintf("%s exited by itself at %s: %v",
				p.name, time.Now().Format("15:04:05.000"), err))
		}
		restart := failed && p.supervised && !p.closing
		p.mu.Unlock()
		close(exited)
		if restart {
			time.AfterFunc(restartDelay, func() { _ = p.start() })
		}
	}()
	return nil
}

// running reports whether the current run has not exited.
func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// finished reports whether the current run has exited with status 0 by itself: a producer
// that published and saw finish every group.
func (p *proc) finished() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited == nil || p.killed {
		return false
	}
	select {
	case <-p.exited:
		return p.exit == nil
	default:
		return false
	}
}

// signal sends sig to the current run's process group and returns the channel closed when that
// run exits (nil if it never started). SIGKILL and SIGTERM mark the exit as caused by the test.
func (p *proc) signal(sig syscall.Signal) (<-chan struct{}, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return nil, nil
	}
	if sig == syscall.SIGKILL || sig == syscall.SIGTERM {
		p.killed = true
	}
	if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return nil, fmt.Errorf("%s: %v: %w", p.name, sig, err)
	}
	return p.exited, nil
}

// kill kills the current run with SIGKILL and waits until it has exited.
func (p *proc) kill(ctx context.Context) error {
	done, err := p.signal(syscall.SIGKILL)
	if err != nil || done == nil {
		return err
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s: waiting for SIGKILL to end it: %w", p.name, ctx.Err())
	}
}

// exits returns the exits the test did not cause.
func (p *proc) exits() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.unexpected...)
}

// procs is every child process of a run; cleanup kills them all.
type procs struct {
	mu   sync.Mutex
	list []*proc
}

func (ps *procs) add(p *proc) *proc {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.list = append(ps.list, p)
	return p
}

// killAll kills every process still running (a stopped one too: SIGKILL ends it) and waits for
// them, however the test ends.
func (ps *procs) killAll() {
	ps.mu.Lock()
	list := append([]*proc(nil), ps.list...)
	ps.mu.Unlock()
	for _, p := range list {
		p.mu.Lock()
		p.closing = true
		p.mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, p := range list {
		_ = p.kill(ctx)
	}
}
