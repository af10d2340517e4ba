package wire

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestTruncate(t *testing.T) {
	cases := []struct {
		s    string
		max  int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{strings.Repeat("a", 30), 20, "aaaaa …(truncated)"},
		{strings.Repeat("é", 20), 20, "éé …(truncated)"}, // never cut inside a rune
		{"abcdefgh", 4, "abcd"},                          // no room for the mark
		{"ééé", 3, "é"},
	}
	for _, c := range cases {
		got := Truncate(c.s, c.max)
		if got != c.want || len(got) > c.max || !utf8.ValidString(got) {
			t.Errorf("Truncate(%q, %d) = %q, want %q", c.s, c.max, got, c.want)
		}
	}
}

// TestFitOutcome: an outcome within the limit is left alone; a larger one keeps its first and
// latest attempts, then cuts their errors, then (not done) its own error, and fits; a done
// job's result is never cut.
func TestFitOutcome(t *testing.T) {
	big := strings.Repeat("x", 60<<10)
	hist := func(n int) []Attempt {
		var h []Attempt
		for i := range n {
			h = append(h, Attempt{At: time.UnixMilli(int64(i)), Worker: "w", Error: big})
		}
		return h
	}
	small := Outcome{ID: 1, State: FinalFailed, Data: []byte("e"), History: []Attempt{{Worker: "w", Error: "e"}}}
	if FitOutcome(&small, 1<<20) {
		t.Fatal("an outcome within the limit was changed")
	}
	for _, limit := range []int{1 << 20, 200 << 10, 64 << 10, 1 << 10} {
		orig := hist(20)
		o := Outcome{ID: 2, Key: "k", State: FinalFailed, Attempts: 20, Data: []byte(big), History: orig}
		if !FitOutcome(&o, limit) || OutcomeSize(&o) > limit {
			t.Fatalf("limit %d: %d bytes", limit, OutcomeSize(&o))
		}
		if len(orig) != 20 || orig[1].Error != big {
			t.Fatalf("limit %d: the original history was changed", limit)
		}
		if len(o.History) > 0 && (!o.History[0].At.Equal(time.UnixMilli(0)) || len(o.History) > 1 && !o.History[len(o.History)-1].At.Equal(time.UnixMilli(19))) {
			t.Fatalf("limit %d: kept attempts %v … %v, want the first and the latest", limit, o.History[0].At, o.History[len(o.History)-1].At)
		}
		if limit >= 200<<10 && len(o.Data) != len(big) {
			t.Fatalf("limit %d: the last error cut to %d bytes while history could give way", limit, len(o.Data))
		}
		if !utf8.Valid(o.Data) {
			t.Fatalf("limit %d: error cut inside a rune", limit)
		}
	}
	done := Outcome{ID: 3, State: FinalDone, Data: []byte(big), History: hist(2)}
	if FitOutcome(&done, 1<<10); len(done.Data) != len(big) {
		t.Fatalf("a done job's result cut to %d bytes", len(done.Data))
	}
}
