package wire

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// FuzzParseInspectRequest: any bytes give a valid request or an error wrapping ErrMalformed or
// ErrVersion, never a panic; a valid request asks exactly one thing and survives a round trip.
func FuzzParseInspectRequest(f *testing.F) {
	for _, s := range []string{
		`{"v":1,"job":7}`, `{"v":1,"job":7,"group":"g"}`, `{"v":1,"group":"g"}`, `{"v":1,"groups":true}`,
		`{"v":1}`, `{"v":2,"job":1}`, `{"v":1,"group":""}`, `{"v":1,"group":"a\u0000b"}`, `{"v":1,"job":-1}`,
		`{"v":1,"job":1} {}`, `{"v":1,"groups":true,"group":"g"}`, `[]`, `null`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseInspectRequest(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrVersion) {
				t.Fatalf("error %v wraps neither ErrMalformed nor ErrVersion", err)
			}
			return
		}
		asks := 0
		if r.Groups {
			asks++
		}
		if r.Job != 0 || r.Group != "" {
			asks++
		}
		if asks != 1 {
			t.Fatalf("valid request %+v asks %d things", r, asks)
		}
		if r.Group != "" && ValidateGroupID(r.Group) != nil {
			t.Fatalf("valid request with invalid group %q", r.Group)
		}
		again, err := ParseInspectRequest(r.Marshal())
		if err != nil || again != r {
			t.Fatalf("round trip of %+v: %+v, %v", r, again, err)
		}
	})
}

func TestParseInspectRequestErrors(t *testing.T) {
	for req, want := range map[string]string{
		`{"v":1,"job":7}x`: "after the JSON object",
		`{"v":1,"group":"` + strings.Repeat("g", 257) + `"}`: "inspect request",
		`{"v":1,"jobs":7}`:              `unknown field "jobs"`,
		`{"v":1,"groups":true,"job":7}`: "takes no job or group",
		`{"v":1}`:                       "name a job, a group, or ask for the groups",
		`{"v":3,"job":7}`:               "version 3",
	} {
		_, err := ParseInspectRequest([]byte(req))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error saying %q", req, err, want)
		}
	}
	if _, err := ParseInspectRequest(bytes.Repeat([]byte(" "), MaxInspectRequest+1)); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("oversized request: %v", err)
	}
}
