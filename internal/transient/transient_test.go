package transient

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// TestOutageLogsOnceAndSummarises: many requests failing many times, concurrently and
// overlapping, log one line when the first fails and one summary when the last goes through,
// both at info; a later outage is logged again.
func TestOutageLogsOnceAndSummarises(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	var mu sync.Mutex
	log := zerolog.New(&lockedWriter{w: &buf, mu: &mu})
	o := New(log, "requests to NATS")
	t0 := time.Unix(1_700_000_000, 0)
	var wg sync.WaitGroup
	for i := range 50 {
		o.Begin("write", errors.New("no responders"), t0)
		wg.Go(func() {
			for range 5 {
				o.Again(errors.New("timeout"))
			}
			if i != 0 {
				o.End(t0.Add(time.Second))
			}
		})
	}
	wg.Wait()
	o.Once("read job", errors.New("timeout"), t0.Add(time.Second)) // while one still fails: counted
	mu.Lock()
	if n := strings.Count(buf.String(), "\n"); n != 1 {
		t.Fatalf("%d lines while requests fail, want 1:\n%s", n, buf.String())
	}
	mu.Unlock()
	o.End(t0.Add(13 * time.Second)) // the last one
	o.End(t0.Add(14 * time.Second)) // more Ends than Begins change nothing
	mu.Lock()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	mu.Unlock()
	if len(lines) != 2 || strings.Contains(buf.String(), `"level":"warn"`) ||
		!strings.Contains(lines[0], `"level":"info"`) || !strings.Contains(lines[0], "requests to NATS failing") ||
		!strings.Contains(lines[1], `"lasted":"13s"`) || !strings.Contains(lines[1], `"requests":51`) || !strings.Contains(lines[1], `"failed_tries":301`) {
		t.Fatalf("log:\n%s", strings.Join(lines, "\n"))
	}
	o.Once("write", errors.New("again"), t0.Add(time.Minute))
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(buf.String(), "\n"); n != 4 {
		t.Fatalf("a second outage logged %d lines in all, want 4:\n%s", n, buf.String())
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
