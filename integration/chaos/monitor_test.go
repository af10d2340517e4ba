//go:build linux

package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/integration/chaos/internal/record"
)

// monitor watches the run while it goes: it follows the workers' record files and asks the
// coordinator for its status every statusEvery. The fault loop waits on what it sees; the checks
// at the end use what it kept.
type monitor struct {
	nc            *nats.Conn
	statusSubject string

	mu     sync.Mutex // guards the fields below
	files  map[string]*tail
	execs  []record.Exec // every worker record so far, in the order read
	starts int           // execution starts among execs
	status []statusSample
}

// statusSample is one status answer of whichever coordinator was active.
type statusSample struct {
	at       time.Time
	epoch    uint64
	released uint64 // releases by this coordinator since it took the lease
	pending  uint64 // jobs waiting for a release
	// unfinished counts the jobs pending, running or waiting for a retry.
	unfinished uint64
}

const (
	recordsEvery = 50 * time.Millisecond
	statusEvery  = 100 * time.Millisecond
)

func newMonitor(nc *nats.Conn, statusSubject string, workerFiles []string) *monitor {
	m := &monitor{nc: nc, statusSubject: statusSubject, files: map[string]*tail{}}
	for _, f := range workerFiles {
		m.files[f] = &tail{path: f}
	}
	return m
}

// run follows the records and the status until ctx ends.
func (m *monitor) run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { every(ctx, recordsEvery, m.readRecords) })
	wg.Go(func() { every(ctx, statusEvery, func() { m.askStatus(ctx) }) })
	wg.Wait()
	m.readRecords() // what was written last
}

// every calls f at once, then every interval until ctx ends.
func every(ctx context.Context, interval time.Duration, f func()) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		f()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (m *monitor) readRecords() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, t := range m.files {
		for _, line := range t.lines() {
			var e record.Exec
			if err := json.Unmarshal(line, &e); err != nil {
				continue // cannot happen: each line is written whole (record.Writer)
			}
			m.execs = append(m.execs, e)
			if e.Event == "start" {
				m.starts++
			}
		}
	}
}

func (m *monitor) askStatus(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	msg, err := m.nc.RequestWithContext(rctx, m.statusSubject, nil)
	if err != nil {
		return // no coordinator answering now: a takeover, an election
	}
	var s coordinator.Status
	if json.Unmarshal(msg.Data, &s) != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.status = append(m.status, statusSample{at: time.Now(), epoch: s.Epoch, released: s.Totals.Released,
		pending: s.Jobs["pending"], unfinished: s.Jobs["pending"] + s.Jobs["running"] + s.Jobs["retrywait"]})
}

// startCount returns how many executions have started so far.
func (m *monitor) startCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.starts
}

// lastEpoch returns the epoch of the latest status answer, 0 if none yet.
func (m *monitor) lastEpoch() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.status) == 0 {
		return 0
	}
	return m.status[len(m.status)-1].epoch
}

// releasedSince returns the first status answer after t from a coordinator of an epoch above
// epoch that has released work (or has none to release), if there is one yet: the moment a new
// coordinator works.
func (m *monitor) releasedSince(t time.Time, epoch uint64) (statusSample, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.status {
		if s.at.After(t) && s.epoch > epoch && (s.released > 0 || s.pending == 0) {
			return s, true
		}
	}
	return statusSample{}, false
}

// idleFor reports whether the coordinator's status answers of the last d, the latest of them
// less than a second old, all had no job unfinished.
func (m *monitor) idleFor(d time.Duration) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	if len(m.status) == 0 || now.Sub(m.status[len(m.status)-1].at) > time.Second {
		return false
	}
	for i := len(m.status) - 1; i >= 0; i-- {
		s := m.status[i]
		if s.unfinished != 0 {
			return false
		}
		if now.Sub(s.at) >= d {
			return true
		}
	}
	return false
}

// inFlight returns, per worker ID, the executions that had started and not ended at t.
func (m *monitor) inFlight(t time.Time) map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return inFlightAt(m.execs, t)
}

// snapshot returns every worker record read so far.
func (m *monitor) snapshot() []record.Exec {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]record.Exec(nil), m.execs...)
}

// tail reads a file's complete new lines each time it is asked.
type tail struct {
	path    string
	offset  int64
	partial []byte // the start of a line whose end is not written yet
}

func (t *tail) lines() [][]byte {
	f, err := os.Open(t.path)
	if err != nil {
		return nil // not created yet
	}
	defer f.Close()
	buf, err := io.ReadAll(io.NewSectionReader(f, t.offset, 1<<40))
	if err != nil || len(buf) == 0 {
		return nil
	}
	t.offset += int64(len(buf))
	buf = append(t.partial, buf...)
	var out [][]byte
	for {
		i := bytes.IndexByte(buf, '\n')
		if i < 0 {
			break
		}
		out = append(out, buf[:i])
		buf = buf[i+1:]
	}
	t.partial = append([]byte(nil), buf...)
	return out
}
