package main

import (
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/weavejobs/weave/dispatcher"
)

func TestParseJobLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		line string
		want dispatcher.Job
		err  string // substring of the error; "" for none
	}{
		{`{}`, dispatcher.Job{}, ""},
		{`{"key":"a","payload":"hello"}`, dispatcher.Job{Key: "a", Payload: []byte("hello")}, ""},
		{`{"payload":"caf\u00e9 \"q\""}`, dispatcher.Job{Payload: []byte(`café "q"`)}, ""},
		{`{"payload": {"b": [1, 2],  "a": null}}`, dispatcher.Job{Payload: []byte(`{"b":[1,2],"a":null}`)}, ""},
		{`{"payload": 42}`, dispatcher.Job{Payload: []byte(`42`)}, ""},
		{`{"payload": null}`, dispatcher.Job{}, ""},
		{`{"payload_b64":"AAEC/w=="}`, dispatcher.Job{Payload: []byte{0, 1, 2, 255}}, ""},
		{`{"require":["eu"],"prefer":["gpu","ssd"],"max_attempts":3,"timeout":"1m30s"}`,
			dispatcher.Job{Require: []string{"eu"}, Prefer: []string{"gpu", "ssd"}, MaxAttempts: 3, Timeout: 90 * time.Second}, ""},
		{`{"delay":"90s"}`, dispatcher.Job{Delay: 90 * time.Second}, ""},
		{`{"priority":9}`, dispatcher.Job{Priority: 9}, ""},
		{`{"priority":10}`, dispatcher.Job{}, "priority 10 outside 0..9"},
		{`{"run_at":"2026-12-01T09:00:00Z"}`, dispatcher.Job{RunAt: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}, ""},
		{`{"delay":"1s","run_at":"2026-12-01T09:00:00Z"}`, dispatcher.Job{}, "exclusive"},
		{`{"delay":"later"}`, dispatcher.Job{}, "delay"},
		{`{"delay":"9000h"}`, dispatcher.Job{}, "at most"},
		{`{"run_at":"tomorrow"}`, dispatcher.Job{}, "run_at"},
		{`{"payload":"a","payload_b64":"YQ=="}`, dispatcher.Job{}, "exclusive"},
		{`{"payload_b64":"not base64!"}`, dispatcher.Job{}, "payload_b64"},
		{`{"timeout":"soon"}`, dispatcher.Job{}, "timeout"},
		{`{"timeout":"-1s"}`, dispatcher.Job{}, "timeout"},
		{`{"paylaod":"typo"}`, dispatcher.Job{}, "unknown field"},
		{`{"key":1}`, dispatcher.Job{}, "key: a string, not a number"},
		{`{"max_attempts":"3"}`, dispatcher.Job{}, "max_attempts: a number, not a string"},
		{`{"require":"eu"}`, dispatcher.Job{}, "require: a list of strings, not a string"},
		{`{"key":{}}`, dispatcher.Job{}, "key: a string, not an object"},
		{`{"key":"a"} {"key":"b"}`, dispatcher.Job{}, "more than one"},
		// Lines that are not JSON objects, as a newcomer's plain text is, say what a line is.
		{`[1,2]`, dispatcher.Job{}, `not a JSON object: a job is one per line, such as {"payload": "hello"}`},
		{`42`, dispatcher.Job{}, "not a JSON object"},
		{`hello world`, dispatcher.Job{}, "not a JSON object"},
		{`{"key":`, dispatcher.Job{}, "unexpected EOF"},
		// What Publish would refuse, in the file's field names.
		{`{"max_attempts":-3}`, dispatcher.Job{}, "max_attempts -3 outside 0..1000"},
		{`{"timeout":"200h"}`, dispatcher.Job{}, "timeout 200h0m0s above 168h0m0s"},
		{`{"require":["a b"]}`, dispatcher.Job{}, `require resource "a b" must be`},
		{`{"key":"a\u0001"}`, dispatcher.Job{}, "key: "},
	} {
		got, err := parseJobLine([]byte(tc.line))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, errJobLine) {
				t.Errorf("%s: error %v, want one containing %q", tc.line, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %+v, %v; want %+v", tc.line, got, err, tc.want)
		}
	}
}

func TestJobReader(t *testing.T) {
	t.Parallel()
	in := "{\"key\":\"a\"}\n\n   \r\n{\"key\":\"b\"}\r\n{\"key\":\"c\"}" // blank lines, CRLF, no final newline
	jr := newJobReader(strings.NewReader(in))
	var keys []string
	for {
		j, ok := jr.next()
		if !ok {
			break
		}
		keys = append(keys, j.Key)
	}
	if jr.Err() != nil || !reflect.DeepEqual(keys, []string{"a", "b", "c"}) {
		t.Fatalf("keys %q, err %v", keys, jr.Err())
	}
}

func TestJobReaderStopsAtBadLine(t *testing.T) {
	t.Parallel()
	jr := newJobReader(strings.NewReader("{\"key\":\"a\"}\n\n{\"key\":\n{\"key\":\"c\"}\n"))
	if j, ok := jr.next(); !ok || j.Key != "a" {
		t.Fatalf("first job %+v, %v", j, ok)
	}
	if _, ok := jr.next(); ok {
		t.Fatal("read past a bad line")
	}
	if err := jr.Err(); err == nil || !strings.HasPrefix(err.Error(), "line 3:") {
		t.Fatalf("error %v, want one about line 3", err)
	}
	if _, ok := jr.next(); ok {
		t.Fatal("read after an error")
	}
}

// TestJobReaderIsLazy checks that jobs are read one at a time: the reader does not need the
// input's end to yield the first job.
func TestJobReaderIsLazy(t *testing.T) {
	t.Parallel()
	pr, pw := io.Pipe()
	jr := newJobReader(pr)
	go func() { _, _ = pw.Write([]byte("{\"key\":\"first\"}\n")) }()
	j, ok := jr.next()
	if !ok || j.Key != "first" {
		t.Fatalf("got %+v, %v", j, ok)
	}
	pw.Close()
	if _, ok := jr.next(); ok || jr.Err() != nil {
		t.Fatalf("after close: %v", jr.Err())
	}
}

// FuzzParseJobLine: a line of the file or stdin weave submit reads, whatever its bytes, is a job
// or an error wrapping errJobLine (which submit reports with the line's number), never a panic.
func FuzzParseJobLine(f *testing.F) {
	for _, seed := range []string{`{}`, `{"key":"a","payload":"hello"}`, `{"payload":{"b":[1,2]}}`, `{"max_attempts":"3"}`,
		`{"require":"eu"}`, `{"key":{}}`, `hello`, `[1,2]`, `{"priority":1.5}`, `{"key":`, `{"run_at":"2026-12-01T09:00:00Z"}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		if _, err := parseJobLine(line); err != nil && !errors.Is(err, errJobLine) {
			t.Fatalf("%q: error %v does not wrap errJobLine", line, err)
		}
		if _, err := parseSingleLine(line); err != nil && !errors.Is(err, errJobLine) {
			t.Fatalf("%q: error %v does not wrap errJobLine (--singles)", line, err)
		}
	})
}
