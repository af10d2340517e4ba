package schedule

import (
	"encoding/json"
	"errors"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)

func every(d time.Duration) Def {
	return Def{Name: "s", Every: d, Start: t0, Group: "g", Jobs: []Job{{Key: "k"}}}
}

func TestNextEvery(t *testing.T) {
	t.Parallel()
	d := every(10 * time.Second)
	for _, tc := range []struct{ after, want time.Time }{
		{t0.Add(-time.Hour), t0.Add(10 * time.Second)},
		{t0, t0.Add(10 * time.Second)},
		{t0.Add(9 * time.Second), t0.Add(10 * time.Second)},
		{t0.Add(10 * time.Second), t0.Add(20 * time.Second)},
		{t0.Add(25 * time.Second), t0.Add(30 * time.Second)},
	} {
		if got := d.Next(tc.after); !got.Equal(tc.want) {
			t.Errorf("Next(+%v) = +%v, want +%v", tc.after.Sub(t0), got.Sub(t0), tc.want.Sub(t0))
		}
	}
}

func TestNextCron(t *testing.T) {
	t.Parallel()
	d := Def{Name: "s", Cron: "*/15 * * * * *", Start: t0, Group: "g", Jobs: []Job{{}}}
	if got := d.Next(t0.Add(16 * time.Second)); !got.Equal(t0.Add(30 * time.Second)) {
		t.Errorf("seconds cron: Next = +%v, want +30s", got.Sub(t0))
	}
	d.Cron = "0 3 * * *" // five fields: minutes first
	if got := d.Next(t0); !got.Equal(time.Date(2026, 11, 25, 3, 0, 0, 0, time.UTC)) {
		t.Errorf("daily cron: Next = %v", got)
	}
	d.Cron = "@hourly"
	if got := d.Next(t0); !got.Equal(t0.Add(time.Hour)) {
		t.Errorf("@hourly: Next = %v", got)
	}
}

// TestLatest: the missed-tick policy's arithmetic: the latest tick in (after, now], and how many
// it passed over.
func TestLatest(t *testing.T) {
	t.Parallel()
	d := every(10 * time.Second)
	for _, tc := range []struct {
		after, now time.Time
		want       time.Time
		passed     int
	}{
		{t0, t0.Add(5 * time.Second), time.Time{}, 0},               // none yet
		{t0, t0.Add(10 * time.Second), t0.Add(10 * time.Second), 0}, // exactly one
		{t0, t0.Add(35 * time.Second), t0.Add(30 * time.Second), 2}, // 10s and 20s passed over
		{t0.Add(30 * time.Second), t0.Add(35 * time.Second), time.Time{}, 0},
		{time.Time{}, t0.Add(12 * time.Second), t0.Add(10 * time.Second), 0}, // never fired: from Start
	} {
		got, passed := d.Latest(tc.after, tc.now)
		if !got.Equal(tc.want) || passed != tc.passed {
			t.Errorf("Latest(+%v, +%v) = %v, %d; want %v, %d", tc.after.Sub(t0), tc.now.Sub(t0), got, passed, tc.want, tc.passed)
		}
	}
	c := Def{Name: "s", Cron: "*/10 * * * * *", Start: t0, Group: "g", Jobs: []Job{{}}}
	if got, passed := c.Latest(t0, t0.Add(35*time.Second)); !got.Equal(t0.Add(30*time.Second)) || passed != 2 {
		t.Errorf("cron Latest = +%v, %d; want +30s, 2", got.Sub(t0), passed)
	}
	// Paused: nothing is due. Resumed at +33s: the ticks of the pause are not made up; the
	// next one, +40s, is.
	for _, d := range []Def{every(10 * time.Second), c} {
		d.Paused = true
		if got, _ := d.Latest(t0, t0.Add(35*time.Second)); !got.IsZero() {
			t.Errorf("paused %s: Latest = +%v, want none", d.When(), got.Sub(t0))
		}
		d.Paused, d.Resumed = false, t0.Add(33*time.Second)
		if got, _ := d.Latest(t0, t0.Add(35*time.Second)); !got.IsZero() {
			t.Errorf("resumed %s at +33s: Latest(+35s) = +%v, want none", d.When(), got.Sub(t0))
		}
		if got, passed := d.Latest(t0, t0.Add(41*time.Second)); !got.Equal(t0.Add(40*time.Second)) || passed != 0 {
			t.Errorf("resumed %s at +33s: Latest(+41s) = +%v, %d; want +40s, 0", d.When(), got.Sub(t0), passed)
		}
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	good := every(time.Minute)
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string]func(*Def){
		"bad name":       func(d *Def) { d.Name = "a b" },
		"both":           func(d *Def) { d.Cron = "@hourly" },
		"neither":        func(d *Def) { d.Every = 0 },
		"short interval": func(d *Def) { d.Every = time.Millisecond },
		"bad cron":       func(d *Def) { d.Every, d.Cron = 0, "61 * * * *" },
		"@every":         func(d *Def) { d.Every, d.Cron = 0, "@every 5s" },
		"no jobs":        func(d *Def) { d.Jobs = nil },
		"bad job":        func(d *Def) { d.Jobs = []Job{{MaxAttempts: -1}} },
		"no start":       func(d *Def) { d.Start = time.Time{} },
		"bad weight":     func(d *Def) { d.Weight = 5000 },
	} {
		d := every(time.Minute)
		edit(&d)
		if err := d.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if err := (Def{Name: "s", Removed: true}).Validate(); err != nil {
		t.Errorf("a removal: %v", err)
	}
}

func TestGroupAndMsgID(t *testing.T) {
	t.Parallel()
	d := every(time.Minute)
	if got := GroupID(d, t0.Add(90*time.Second)); got != "g@20261124T100130Z" {
		t.Errorf("GroupID = %q", got)
	}
	if got := MsgID(d, t0); got != "sched:s:1795514400" {
		t.Errorf("MsgID = %q", got)
	}
}

func FuzzDecode(f *testing.F) {
	b, _ := json.Marshal(every(time.Minute))
	f.Add(b)
	f.Add([]byte(`{"name":"s","removed":true}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var d Def
		if Decode(body, &d) != nil || d.Validate() != nil {
			return
		}
		again, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		var back Def
		if err := Decode(again, &back); err != nil || back.Validate() != nil {
			t.Fatalf("re-encode of accepted %+v: %v", d, err)
		}
	})
}
