package wire

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestSinglePackRoundTrip(t *testing.T) {
	at := time.UnixMilli(1795000000123)
	in := []SinglePackJob{
		{Group: "tenant-1/invoice", PackJob: PackJob{Payload: []byte("one")}},
		{Group: "b", Priority: 7, PackJob: PackJob{Require: []string{"gpu"}, Prefer: []string{"host:a"}, MaxAttempts: 4, Timeout: 3 * time.Second, RunAt: at}},
		{Group: strings.Repeat("ä", 100), PackJob: PackJob{Payload: []byte(strings.Repeat("x", 1000))}},
	}
	h := Header(SinglePackHeader(len(in), "prod1"))
	h.Set(HdrTraceParent, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	h.Set(HdrPublished, "1795000000000000")
	jobs, err := ParseStoredJobs(900, h, AppendSinglePack(nil, in))
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != len(in) {
		t.Fatalf("%d jobs, want %d", len(jobs), len(in))
	}
	for i, j := range jobs {
		m := j.Meta
		if j.ID != PackedJobID(900, i) || m.Group != in[i].Group || m.Priority != in[i].Priority || string(j.Payload) != string(in[i].Payload) ||
			!m.Single || m.Reply != "prod1" || m.Key != "" || m.MaxAttempts != in[i].MaxAttempts || m.Timeout != in[i].Timeout || !m.RunAt.Equal(in[i].RunAt) {
			t.Errorf("job %d: %+v", i, j)
		}
		if !strings.Contains(j.Trace, "b7ad6b7169203331") {
			t.Errorf("job %d lost the pack's trace: %q", i, j.Trace)
		}
	}
}

func TestSinglePackRefused(t *testing.T) {
	body := AppendSinglePack(nil, []SinglePackJob{{Group: "a"}, {Group: "b"}})
	for _, c := range []struct {
		name string
		edit func(Header)
		body []byte
		want error
	}{
		{"an older pack version", func(h Header) { h.Set(HdrVersion, "2") }, body, ErrVersion},
		{"a count the body does not hold", func(h Header) { h.Set(HdrPack, "3") }, body, ErrMalformed},
		{"a group header", func(h Header) { h.Set(HdrGroup, "a") }, body, ErrMalformed},
		{"a key", func(h Header) { h.Set(HdrKey, "k") }, body, ErrMalformed},
		{"a dependency", func(h Header) { h.Add(HdrAfter, "x") }, body, ErrMalformed},
		{"a bad reply token", func(h Header) { h.Set(HdrReply, "a.b") }, body, ErrMalformed},
		{"an empty group", nil, AppendSinglePack(nil, []SinglePackJob{{Group: "a"}, {Group: ""}}), ErrMalformed},
		{"a group with a control character", nil, AppendSinglePack(nil, []SinglePackJob{{Group: "a\x00"}, {Group: "b"}}), ErrMalformed},
		{"a priority past the highest", nil, AppendSinglePack(nil, []SinglePackJob{{Group: "a", Priority: MaxPriority + 1}, {Group: "b"}}), ErrMalformed},
		{"a group pack's body", nil, AppendPack(nil, []PackJob{{}, {}}), ErrMalformed},
		{"trailing bytes", nil, append(body, 0), ErrMalformed},
	} {
		h := Header(SinglePackHeader(2, ""))
		if c.edit != nil {
			c.edit(h)
		}
		if _, err := ParseStoredJobs(5, h, c.body); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

func TestArrival(t *testing.T) {
	// In feed order: an open at 9, the jobs of the single pack at 10, a message at 11.
	order := []uint64{9, PackedJobID(10, 0), PackedJobID(10, 1), PackedJobID(10, MaxPack-1), 11, PackedJobID(MaxJobSeq, 0)}
	for i := 1; i < len(order); i++ {
		if Arrival(order[i-1]) >= Arrival(order[i]) {
			t.Errorf("Arrival(%d) = %d is not before Arrival(%d) = %d", order[i-1], Arrival(order[i-1]), order[i], Arrival(order[i]))
		}
	}
}
