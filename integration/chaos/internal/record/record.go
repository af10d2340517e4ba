// Package record is what the fault-injection test's processes write down and the test reads back:
// one JSON object per line, appended to a file with a single unbuffered write each, so every line
// written before a SIGKILL is complete and kept.
package record

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Exec is a handler's own record of one execution: a worker writes one with Event "start" as the
// handler begins and one with Event "end" as it returns. An execution cut short by SIGKILL has a
// start and no end.
type Exec struct {
	Event   string    `json:"ev"` // "start" or "end"
	Job     uint64    `json:"job"`
	Group   string    `json:"group"`
	Key     string    `json:"key"`
	Attempt int       `json:"attempt"`
	Worker  string    `json:"worker"` // the worker's ID, the same after a restart
	PID     int       `json:"pid"`    // tells a worker's runs apart
	At      time.Time `json:"at"`
}

// Producer events, in the order a producer writes them for one group.
const (
	Publishing = "publishing" // about to call Publish for the group (again, after a restart)
	Published  = "published"  // Publish returned; Err says whether every job was stored
	Waited     = "waited"     // the group's Handle.Wait returned: its summary and outcomes
	Done       = "done"       // every group published and waited for: the producer exits
)

// Producer is a producer's record of one step.
type Producer struct {
	Event       string    `json:"ev"`
	Group       string    `json:"group,omitempty"`
	Incarnation int       `json:"inc,omitempty"` // 1 for the first publication of the group ID, 2 for the next
	At          time.Time `json:"at"`
	PID         int       `json:"pid"`

	// Published: what Publish returned.
	Jobs       int    `json:"jobs,omitempty"` // jobs of the group (every call publishes them all)
	Accepted   int    `json:"accepted,omitempty"`
	Duplicates int    `json:"duplicates,omitempty"`
	Handle     bool   `json:"handle,omitempty"` // Publish returned a non-nil Handle
	Sealed     bool   `json:"sealed,omitempty"` // ... and no error wrapping dispatcher.ErrNotSealed
	Err        string `json:"err,omitempty"`    // also set on Waited when Wait failed
	// Skipped is set on Waited when the producer cannot wait: a restarted producer has no
	// Handle for a later incarnation published by its previous run (Attach reads the first).
	Skipped bool `json:"skipped,omitempty"`

	// Waited: what Wait returned.
	Summary  *Summary  `json:"summary,omitempty"`
	Outcomes []Outcome `json:"outcomes,omitempty"`
}

// Summary is a group's summary as Wait returned it.
type Summary struct {
	Jobs, Done, Failed, Canceled int
}

// Outcome is one job's terminal outcome.
type Outcome struct {
	Job      uint64 `json:"job"`
	Key      string `json:"key"`
	State    string `json:"state"`
	Attempts int    `json:"attempts"`
}

// Forged is what a forged result reads: no outcome may carry it.
const Forged = "FORGED-BY-ATTACKER"

// Forgery is the hostile worker's record of one forged report message the server stored: how
// many reports it held, the lowest and highest job ID it named.
type Forgery struct {
	At       time.Time `json:"at"`
	Reports  int       `json:"reports"`
	FirstJob uint64    `json:"first"`
	LastJob  uint64    `json:"last"`
}

// Writer appends records to a file. It is safe for concurrent use.
type Writer struct {
	mu sync.Mutex // keeps each line one write
	f  *os.File
}

// Create opens path for appending, creating it if needed.
func Create(path string) (*Writer, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("record: %w", err)
	}
	return &Writer{f: f}, nil
}

// Write appends v as one line, in one write system call: the kernel keeps it once the call
// returns, whatever happens to the process next.
func (w *Writer) Write(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("record: %w", err)
	}
	b = append(b, '\n')
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, err := w.f.Write(b); err != nil {
		return fmt.Errorf("record: %w", err)
	}
	return nil
}

// Close closes the file.
func (w *Writer) Close() error { return w.f.Close() }

// Read returns every record of type T in the file at path, in order. A missing file holds none.
func Read[T any](path string) ([]T, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("record: %w", err)
	}
	defer f.Close()
	var out []T
	r := bufio.NewReader(f)
	for line := 1; ; line++ {
		b, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			// A line without its newline was not written by Write; there is none unless the file
			// is being written right now, and then the line is complete on the next read.
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("record: %s: %w", path, err)
		}
		var v T
		if err := json.Unmarshal(b, &v); err != nil {
			return nil, fmt.Errorf("record: %s line %d: %w", path, line, err)
		}
		out = append(out, v)
	}
}
