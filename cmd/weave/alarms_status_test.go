package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/integration/jstest"
)

func TestStatusPrintsAlarms(t *testing.T) {
	now := time.Now()
	st := &coordinator.Status{Time: now, Alarms: []coordinator.Alarm{{
		Name: coordinator.AlarmBacklog, RaisedAt: now.Add(-90 * time.Second), Message: "40 jobs pending, above the 8 live slots for 6m0s",
	}}}
	var out bytes.Buffer
	if err := printStatus(&out, st); err != nil {
		t.Fatal(err)
	}
	if want := "ALARMS (1 raised)\n! backlog, raised 1m30s ago: 40 jobs pending, above the 8 live slots for 6m0s\n"; !strings.Contains(out.String(), want) {
		t.Errorf("status output lacks %q:\n%s", want, out.String())
	}
	st.Alarms = nil
	out.Reset()
	if err := printStatus(&out, st); err != nil || strings.Contains(out.String(), "ALARMS") {
		t.Errorf("status without alarms shows an ALARMS section (%v):\n%s", err, out.String())
	}
}

// TestStatusOldestPending: the oldest pending job's age is said while jobs are pending, not when
// none is (it is of the latest metrics tick, which may be older than the counts).
func TestStatusOldestPending(t *testing.T) {
	now := time.Now()
	st := &coordinator.Status{Time: now, OldestPending: now.Add(-5 * time.Second), Jobs: map[string]uint64{"pending": 3}}
	var out bytes.Buffer
	if err := printStatus(&out, st); err != nil || !strings.Contains(out.String(), "oldest pending job: stored 5s ago") {
		t.Errorf("status with 3 jobs pending (%v):\n%s", err, out.String())
	}
	st.Jobs["pending"] = 0
	out.Reset()
	if err := printStatus(&out, st); err != nil || strings.Contains(out.String(), "oldest pending") {
		t.Errorf("status with nothing pending says how old the oldest pending job is (%v):\n%s", err, out.String())
	}
}

// TestAlarmConfigErrorsInFlagWords: a bad alarm threshold is reported with the flag's name.
func TestAlarmConfigErrorsInFlagWords(t *testing.T) {
	srv := jstest.New(t)
	for args, want := range map[string]string{
		"--alarm-window=-1s":         "--alarm-window is -1s, must not be negative",
		"--alarm-failed-growth=-3":   "--alarm-failed-growth is -3, must not be negative",
		"--alarm-scale-down-below=2": "--alarm-scale-down-below is 2, must be in (0, 1]",
	} {
		code, out, errOut := runCLI(t, "", "coordinator", "--nats", srv.ClientURL(), args)
		if code != exitUsage || !strings.Contains(errOut, want) {
			t.Errorf("weave coordinator %s: exit %d, want %d with %q\nstdout: %s\nstderr: %s", args, code, exitUsage, want, out, errOut)
		}
	}
}
