package integration_test

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weavejobs/weave/internal/testwait"
)

// The nats-server binary, built from this module's nats-server dependency once per test binary
// run (tests whose point is a real server process with a configuration file: permissions, TLS).
var natsBinary struct {
	once sync.Once
	path string
	err  error
}

// natsServerBinary returns the path of a nats-server binary, building it on first use.
func natsServerBinary(t *testing.T) string {
	t.Helper()
	natsBinary.once.Do(func() {
		dir, err := os.MkdirTemp("", "weave-nats-server-")
		if err != nil {
			natsBinary.err = err
			return
		}
		path := filepath.Join(dir, "nats-server")
		out, err := exec.Command("go", "build", "-o", path, "github.com/nats-io/nats-server/v2").CombinedOutput()
		if err != nil {
			natsBinary.err = fmt.Errorf("build nats-server: %v\n%s", err, out)
			return
		}
		natsBinary.path = path
	})
	if natsBinary.err != nil {
		t.Fatal(natsBinary.err)
	}
	return natsBinary.path
}

// natsProc is a nats-server process started with a configuration file.
type natsProc struct {
	cmd    *exec.Cmd
	port   int
	output *bytes.Buffer // its log (stderr), for failure messages
}

// startNATSProc writes conf (with "listen" and "jetstream" added) to a temporary file and starts
// a nats-server with it and the environment env, and stops it when the test ends. It returns
// once the server accepts TCP connections.
func startNATSProc(t *testing.T, conf string, env ...string) *natsProc {
	t.Helper()
	bin := natsServerBinary(t)
	dir := t.TempDir()
	port := freePort(t)
	full := fmt.Sprintf("listen: \"127.0.0.1:%d\"\njetstream { store_dir: %q }\n%s", port, filepath.Join(dir, "js"), conf)
	path := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(path, []byte(full), 0o600); err != nil {
		t.Fatal(err)
	}
	p := &natsProc{port: port, output: &bytes.Buffer{}}
	p.cmd = exec.Command(bin, "-c", path)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stderr = &lockedWriter{w: p.output}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
		if t.Failed() || os.Getenv("WEAVE_TEST_NATS_LOG") != "" {
			t.Logf("nats-server log:\n%s", p.output)
		}
	})
	testwait.Seen(t, 30*time.Second, "nats-server to listen on "+p.addr(), func() (bool, string) {
		c, err := net.DialTimeout("tcp", p.addr(), time.Second)
		if err != nil {
			return false, err.Error() // the cleanup logs the server's output
		}
		c.Close()
		return true, ""
	})
	return p
}

func (p *natsProc) addr() string { return "127.0.0.1:" + strconv.Itoa(p.port) }

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// asyncErrors collects a connection's asynchronous errors (permission violations among them).
type asyncErrors struct {
	mu   sync.Mutex
	errs []error
	news chan struct{}
}

func newAsyncErrors() *asyncErrors { return &asyncErrors{news: make(chan struct{}, 1)} }

func (a *asyncErrors) handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	a.mu.Lock()
	a.errs = append(a.errs, err)
	a.mu.Unlock()
	select {
	case a.news <- struct{}{}:
	default:
	}
}

// waitFor waits until an error containing text arrived, and fails the test if none does.
func (a *asyncErrors) waitFor(t *testing.T, text string) {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		a.mu.Lock()
		for _, err := range a.errs {
			if bytes.Contains([]byte(err.Error()), []byte(text)) {
				a.mu.Unlock()
				return
			}
		}
		errs := fmt.Sprint(a.errs)
		a.mu.Unlock()
		select {
		case <-a.news:
		case <-deadline.C:
			t.Fatalf("no error containing %q; got %s", text, errs)
		}
	}
}
