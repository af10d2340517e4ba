package wire

import (
	"errors"
	"testing"
	"time"
)

func TestLimitRoundTrip(t *testing.T) {
	t.Parallel()
	n, _ := NewNames("ns")
	for _, l := range []Limit{
		{Kind: LimitResource, Name: "example.com", Concurrency: 2, Rate: 5, Per: time.Second, Burst: 3},
		{Kind: LimitGroup, Name: "crawl of example.com", Concurrency: 1},
		{Kind: LimitResource, Name: "gpu"}, // a removal
		{Kind: LimitResource, Name: "api", Paused: true},
		{Kind: LimitGroup, Name: "g", Paused: true, Concurrency: 2},
	} {
		subject := n.LimitSubject(l.Kind, l.Name)
		back, err := n.ParseLimit(subject, AppendLimit(nil, l))
		if err != nil || back != l {
			t.Fatalf("round trip of %+v on %s: %+v, %v", l, subject, back, err)
		}
	}
}

func TestParseLimitRejects(t *testing.T) {
	t.Parallel()
	n, _ := NewNames("ns")
	ok := n.LimitSubject(LimitResource, "r")
	for name, tc := range map[string]struct{ subject, body string }{
		"not JSON":           {ok, "limit: 3"},
		"unknown field":      {ok, `{"kind":"resource","name":"r","concurency":3}`},
		"unknown kind":       {n.LimitSubject("pool", "r"), `{"kind":"pool","name":"r","concurrency":3}`},
		"bad resource":       {n.LimitSubject(LimitResource, "a b"), `{"kind":"resource","name":"a b","concurrency":3}`},
		"negative":           {ok, `{"kind":"resource","name":"r","concurrency":-1}`},
		"rate without per":   {ok, `{"kind":"resource","name":"r","rate":5}`},
		"per below 1ms":      {ok, `{"kind":"resource","name":"r","rate":5,"per":1000}`},
		"burst without rate": {ok, `{"kind":"resource","name":"r","concurrency":1,"burst":5}`},
		"another's subject":  {n.LimitSubject(LimitResource, "other"), `{"kind":"resource","name":"r","concurrency":3}`},
		"group as resource":  {n.LimitSubject(LimitGroup, "r"), `{"kind":"resource","name":"r","concurrency":3}`},
		"trailing":           {ok, `{"kind":"resource","name":"r","concurrency":3} {}`},
	} {
		if _, err := n.ParseLimit(tc.subject, []byte(tc.body)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: got %v, want ErrMalformed", name, err)
		}
	}
}

func FuzzParseLimit(f *testing.F) {
	n, _ := NewNames("ns")
	f.Add(n.LimitSubject(LimitResource, "r"), []byte(`{"kind":"resource","name":"r","concurrency":2,"rate":5,"per":1000000000,"burst":2}`))
	f.Add(n.LimitSubject(LimitGroup, "g g"), []byte(`{"kind":"group","name":"g g","concurrency":1}`))
	f.Fuzz(func(t *testing.T, subject string, body []byte) {
		l, err := n.ParseLimit(subject, body)
		if err != nil {
			return
		}
		if back, err := n.ParseLimit(subject, AppendLimit(nil, l)); err != nil || back != l {
			t.Fatalf("re-encode of accepted limit %+v gave %+v, %v", l, back, err)
		}
	})
}

func TestLimitPaused(t *testing.T) {
	t.Parallel()
	paused := Limit{Kind: LimitResource, Name: "api", Paused: true}
	if paused.Removes() || paused.String() != "paused" {
		t.Fatalf("a pause alone: removes %v, %q", paused.Removes(), paused.String())
	}
	paused.Concurrency = 2
	if s := paused.String(); s != "paused, 2 at once" {
		t.Fatalf("a paused concurrency limit reads %q", s)
	}
	if (Limit{Kind: LimitResource, Name: "api"}).String() != "no limit" {
		t.Fatal("a removal does not read as no limit")
	}
}
