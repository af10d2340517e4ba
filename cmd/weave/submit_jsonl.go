package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"time"

	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/internal/wire"
)

// jobLine is one line of a jobs file (JSON lines). Every field is optional:
//
//	{"key": "user-42", "payload": "plain text"}        a JSON string: its UTF-8 bytes
//	{"key": "user-43", "payload": {"id": 43}}          any other JSON value: its compact encoding
//	{"payload_b64": "AAEC"}                            raw bytes, base64 (standard encoding)
//	{"require": ["eu"], "prefer": ["gpu"], "max_attempts": 3, "timeout": "30s"}
//	{"delay": "10m"}  or  {"run_at": "2026-12-01T09:00:00Z"}     not released before then
//	{"priority": 5}                                    ahead of the group's jobs of lower priorities
//
// Blank lines are skipped. Unknown fields are errors, to catch typos.
type jobLine struct {
	Key         string          `json:"key"`
	Payload     json.RawMessage `json:"payload"`
	PayloadB64  *string         `json:"payload_b64"`
	Require     []string        `json:"require"`
	Prefer      []string        `json:"prefer"`
	MaxAttempts int             `json:"max_attempts"`
	Timeout     string          `json:"timeout"`
	Delay       string          `json:"delay"`
	RunAt       string          `json:"run_at"`
	Priority    int             `json:"priority"`
	Group       string          `json:"group"` // submit --singles only: the job's own group
}

// errJobLine wraps every error of a malformed line.
var errJobLine = errors.New("bad job line")

// parseJobLine decodes one non-blank line into a job of the group being submitted.
func parseJobLine(line []byte) (dispatcher.Job, error) {
	j, l, err := decodeJobLine(line)
	if err == nil && l.Group != "" {
		err = fmt.Errorf("%w: group %q: a job's own group is for submit --singles only (the group is --group)", errJobLine, l.Group)
	}
	return j, err
}

// parseSingleLine decodes one non-blank line into a single job (submit --singles): the job, and
// its group field (empty for a generated one).
func parseSingleLine(line []byte) (dispatcher.Single, error) {
	j, l, err := decodeJobLine(line)
	if err == nil && l.Group != "" {
		if verr := wire.ValidateGroupID(l.Group); verr != nil {
			err = fmt.Errorf("%w: group: %s", errJobLine, plainReason(verr))
		}
	}
	return dispatcher.Single{Group: l.Group, Job: j}, err
}

// jsonReason says why a line did not decode in the line's terms, not Go's ("max_attempts: a
// number, not a string" rather than "cannot unmarshal string into Go struct field
// jobLine.max_attempts of type int").
func jsonReason(err error) string {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) && typeErr.Field != "" && typeErr.Value != "" {
		want := "a string"
		switch typeErr.Type.Kind() {
		case reflect.Int:
			want = "a number"
		case reflect.Slice:
			want = "a list of strings"
		}
		got := "a " + typeErr.Value // a JSON type's name: string, number, array, object, bool
		if strings.IndexByte("aeiou", typeErr.Value[0]) >= 0 {
			got = "an " + typeErr.Value
		}
		return fmt.Sprintf("%s: %s, not %s", typeErr.Field, want, got)
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

// decodeJobLine decodes one non-blank line into a job, and returns the line's fields too.
func decodeJobLine(line []byte) (dispatcher.Job, jobLine, error) {
	var l jobLine
	if t := bytes.TrimSpace(line); len(t) == 0 || t[0] != '{' {
		// A plain text line (seq 10 | weave submit) is a newcomer's first try: say what a line is
		// rather than what Go's decoder met.
		return dispatcher.Job{}, l, fmt.Errorf(`%w: not a JSON object: a job is one per line, such as {"payload": "hello"} (weave submit --help lists the fields)`, errJobLine)
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return dispatcher.Job{}, l, fmt.Errorf("%w: %s", errJobLine, jsonReason(err))
	}
	if dec.More() {
		return dispatcher.Job{}, l, fmt.Errorf("%w: more than one JSON value on the line", errJobLine)
	}
	j := dispatcher.Job{Key: l.Key, Require: l.Require, Prefer: l.Prefer, MaxAttempts: l.MaxAttempts, Priority: l.Priority}
	switch {
	case l.PayloadB64 != nil && l.Payload != nil:
		return j, l, fmt.Errorf("%w: payload and payload_b64 are exclusive", errJobLine)
	case l.PayloadB64 != nil:
		b, err := base64.StdEncoding.DecodeString(*l.PayloadB64)
		if err != nil {
			return j, l, fmt.Errorf("%w: payload_b64: %v", errJobLine, err)
		}
		j.Payload = b
	case len(l.Payload) > 0 && l.Payload[0] == '"':
		var s string
		if err := json.Unmarshal(l.Payload, &s); err != nil {
			return j, l, fmt.Errorf("%w: payload: %v", errJobLine, err)
		}
		j.Payload = []byte(s)
	case len(l.Payload) > 0 && string(l.Payload) != "null":
		var buf bytes.Buffer
		if err := json.Compact(&buf, l.Payload); err != nil {
			return j, l, fmt.Errorf("%w: payload: %v", errJobLine, err)
		}
		j.Payload = buf.Bytes()
	}
	if l.Timeout != "" {
		d, err := time.ParseDuration(l.Timeout)
		if err != nil || d < 0 {
			return j, l, fmt.Errorf("%w: timeout %q: want a Go duration such as \"30s\" or \"5m\"", errJobLine, l.Timeout)
		}
		j.Timeout = d
	}
	if l.Delay != "" {
		d, err := time.ParseDuration(l.Delay)
		if err != nil || d < 0 || d > wire.MaxDelay {
			return j, l, fmt.Errorf("%w: delay %q: want a Go duration such as \"90s\" or \"2h\", at most %v", errJobLine, l.Delay, wire.MaxDelay)
		}
		j.Delay = d
	}
	if l.RunAt != "" {
		t, err := time.Parse(time.RFC3339Nano, l.RunAt)
		if err != nil {
			return j, l, fmt.Errorf("%w: run_at %q: want an RFC 3339 time such as \"2026-12-01T09:00:00Z\"", errJobLine, l.RunAt)
		}
		if l.Delay != "" {
			return j, l, fmt.Errorf("%w: delay and run_at are exclusive", errJobLine)
		}
		j.RunAt = t
	}
	// The checks Publish makes, here so that the error names the line and the file's field
	// rather than the job's index and the Go field.
	if err := wire.ValidateKey(l.Key); err != nil {
		return j, l, fmt.Errorf("%w: key: %s", errJobLine, plainReason(err))
	}
	for _, f := range []struct {
		name string
		v    []string
	}{{"require", l.Require}, {"prefer", l.Prefer}} {
		if err := wire.ValidateResources(f.name, f.v); err != nil {
			return j, l, fmt.Errorf("%w: %s", errJobLine, plainReason(err))
		}
	}
	if l.MaxAttempts < 0 || l.MaxAttempts > wire.MaxAttemptsLimit {
		return j, l, fmt.Errorf("%w: max_attempts %d outside 0..%d (0: the coordinator's --max-attempts)", errJobLine, l.MaxAttempts, wire.MaxAttemptsLimit)
	}
	if l.Priority < 0 || l.Priority > wire.MaxPriority {
		return j, l, fmt.Errorf("%w: priority %d outside 0..%d", errJobLine, l.Priority, wire.MaxPriority)
	}
	if j.Timeout > wire.MaxTimeout {
		return j, l, fmt.Errorf("%w: timeout %v above %v", errJobLine, j.Timeout, wire.MaxTimeout)
	}
	return j, l, nil
}

// jobReader reads jobs from JSON lines one at a time, so a file of any size streams through
// bounded memory.
type jobReader struct {
	r       *bufio.Reader
	singles bool              // lines may name their own group (submit --singles)
	single  dispatcher.Single // with singles: the last job returned and its group
	line    int               // number of the last line read
	jobLine int               // number of the line of the last job returned
	err     error             // first error, which ends the jobs
}

func newJobReader(r io.Reader) *jobReader {
	return &jobReader{r: bufio.NewReaderSize(r, 64<<10)}
}

// next returns the next job; ok is false at the end of the input or at the first error, which
// Err then returns.
func (jr *jobReader) next() (j dispatcher.Job, ok bool) {
	for jr.err == nil {
		line, err := jr.r.ReadBytes('\n')
		if len(line) > 0 {
			jr.line++
			if line = bytes.TrimSpace(line); len(line) > 0 {
				var perr error
				if jr.singles {
					jr.single, perr = parseSingleLine(line)
					j = jr.single.Job
				} else {
					j, perr = parseJobLine(line)
				}
				if perr != nil {
					jr.err = fmt.Errorf("line %d: %w", jr.line, perr)
					return j, false
				}
				jr.jobLine = jr.line
				return j, true
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				jr.err = fmt.Errorf("read jobs after line %d: %w", jr.line, err)
			}
			return j, false
		}
	}
	return j, false
}

// Err returns the error that ended the jobs, nil at a clean end of input.
func (jr *jobReader) Err() error { return jr.err }

// plainReason is a wire validation error without its sentinel's words ("invalid name: ",
// "invalid job option: "), which the line's own context replaces.
func plainReason(err error) string {
	reason := err.Error()
	for _, sentinel := range []error{wire.ErrBadName, wire.ErrBadOption} {
		reason = strings.TrimPrefix(reason, sentinel.Error()+": ")
	}
	return reason
}
