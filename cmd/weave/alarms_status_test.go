package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/weavejobs/weave/coordinator"
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
