package wire

import (
	"bytes"
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

func TestJobMetaRoundTrip(t *testing.T) {
	t.Parallel()
	m := JobMeta{Group: "example.com", Key: "/index.html", Require: []string{"eu"}, Prefer: []string{"cache-1", "cache-2"}, MaxAttempts: 5, Timeout: 1500 * time.Millisecond, RunAt: time.UnixMilli(1_795_000_000_123)}
	h := Header(m.Header())
	if got := h.Get(HdrMsgID); got != "~ZXhhbXBsZS5jb20//index.html" {
		t.Fatalf("Nats-Msg-Id = %q", got)
	}
	back, err := ParseJobMeta(h)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, m) {
		t.Fatalf("round trip: got %+v, want %+v", back, m)
	}
}

func TestSingleJobReplyRoundTrip(t *testing.T) {
	t.Parallel()
	m := JobMeta{Group: "g", Key: "k", Single: true, Reply: "p-1"}
	back, err := ParseJobMeta(m.Header())
	if err != nil || !reflect.DeepEqual(back, m) {
		t.Fatalf("round trip: got %+v, %v; want %+v", back, err, m)
	}
}

func TestParseJobMetaRejects(t *testing.T) {
	t.Parallel()
	base := func() nats.Header { return JobMeta{Group: "g"}.Header() }
	for _, tc := range []struct {
		name string
		edit func(nats.Header)
		want error
	}{
		{"no version", func(h nats.Header) { h.Del(HdrVersion) }, ErrMalformed},
		{"future version", func(h nats.Header) { h.Set(HdrVersion, "2") }, ErrVersion},
		{"no group", func(h nats.Header) { h.Del(HdrGroup) }, ErrMalformed},
		{"bad attempts", func(h nats.Header) { h.Set(HdrMaxAttempts, "many") }, ErrMalformed},
		{"too many attempts", func(h nats.Header) { h.Set(HdrMaxAttempts, "100000") }, ErrMalformed},
		{"bad timeout", func(h nats.Header) { h.Set(HdrTimeout, "soon") }, ErrMalformed},
		{"negative timeout", func(h nats.Header) { h.Set(HdrTimeout, "-1s") }, ErrMalformed},
		{"bad resource", func(h nats.Header) { h.Set(HdrRequire, "a,,b") }, ErrMalformed},
		{"bad run-at", func(h nats.Header) { h.Set(HdrRunAt, "tomorrow") }, ErrMalformed},
		{"bad single", func(h nats.Header) { h.Set(HdrSingle, "yes") }, ErrMalformed},
		{"reply on a job of a group", func(h nats.Header) { h.Set(HdrReply, "p") }, ErrMalformed},
		{"bad reply", func(h nats.Header) { h.Set(HdrSingle, "1"); h.Set(HdrReply, "a.b") }, ErrMalformed},
		{"run-at before 1970", func(h nats.Header) { h.Set(HdrRunAt, "-5") }, ErrMalformed},
		{"run-at after 9999", func(h nats.Header) { h.Set(HdrRunAt, "999999999999999") }, ErrMalformed},
	} {
		h := base()
		tc.edit(h)
		if _, err := ParseJobMeta(h); !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestGroupControlRoundTrip(t *testing.T) {
	t.Parallel()
	for _, c := range []GroupControl{{Group: "g", Op: OpOpen}, {Group: "g", Op: OpOpen, Weight: 3}, {Group: "g", Op: OpOpen, Reply: "p-1"}, {Group: "g", Op: OpSeal, Count: 7}, {Group: "g g", Op: OpCancel}, {Group: "g", Op: OpCancel, Jobs: []uint64{3, 1 << 40}}} {
		back, err := ParseGroupControl(c.Header())
		if err != nil || !reflect.DeepEqual(back, c) {
			t.Fatalf("round trip %+v: got %+v, %v", c, back, err)
		}
	}
	h := Header(GroupControl{Group: "g", Op: OpSeal}.Header())
	h.Set(HdrCount, "-1")
	if _, err := ParseGroupControl(h); !errors.Is(err, ErrMalformed) {
		t.Fatalf("bad count accepted: %v", err)
	}
	bad := Header(GroupControl{Group: "g", Op: OpCancel}.Header())
	bad.Set(HdrJobs, "1,x")
	if _, err := ParseGroupControl(bad); !errors.Is(err, ErrMalformed) {
		t.Fatalf("bad job ID accepted: %v", err)
	}
	open := Header(GroupControl{Group: "g", Op: OpOpen}.Header())
	open.Set(HdrReply, "out.>")
	if _, err := ParseGroupControl(open); !errors.Is(err, ErrMalformed) {
		t.Fatalf("an open with a reply token that is not a subject token accepted: %v", err)
	}
	h.Set(HdrOp, "explode")
	if _, err := ParseGroupControl(h); !errors.Is(err, ErrMalformed) {
		t.Fatalf("bad op accepted: %v", err)
	}
}

func TestWorkRoundTrip(t *testing.T) {
	t.Parallel()
	jobs := []WorkJob{
		{ID: 1 << 40, Attempt: 1, Timeout: 3 * time.Second, Group: "g", Key: "k", Payload: []byte("hello")},
		{ID: 7, Attempt: 3, Group: "example.com", Payload: []byte{}},
	}
	back, err := DecodeWork(AppendWork(nil, jobs))
	if err != nil {
		t.Fatal(err)
	}
	if len(back) != 2 || back[0].ID != jobs[0].ID || back[0].Timeout != jobs[0].Timeout || !bytes.Equal(back[0].Payload, jobs[0].Payload) || back[1].Attempt != 3 || back[1].Group != "example.com" {
		t.Fatalf("round trip: %+v", back)
	}
}

func TestReportsRoundTrip(t *testing.T) {
	t.Parallel()
	in := []Report{
		{ID: 9, Attempt: 1, Status: StatusOK, Duration: 1234 * time.Microsecond, Waited: 77 * time.Microsecond, Data: []byte("result")},
		{ID: 10, Attempt: 2, Status: StatusError, RetryAfter: 2 * time.Second, Data: []byte("boom")},
		LapsedReports([]WorkJob{{ID: 11, Attempt: 3}}, 2)[0],
	}
	worker, out, err := DecodeReports(AppendReports(nil, "w-1", in))
	if err != nil || worker != "w-1" || !reflect.DeepEqual(out, in) {
		t.Fatalf("round trip: %q %+v %v", worker, out, err)
	}
	// A status after the last one known is refused.
	bad := AppendReports(nil, "w-1", []Report{{ID: 1, Attempt: 1, Status: StatusLapsed + 1}})
	if _, _, err := DecodeReports(bad); !errors.Is(err, ErrMalformed) {
		t.Fatalf("status %d decoded: %v", StatusLapsed+1, err)
	}
}

func TestOutcomesRoundTrip(t *testing.T) {
	t.Parallel()
	at := time.UnixMilli(time.Now().UnixMilli())
	in := []Outcome{{ID: 1, Key: "a", State: FinalDone, Attempts: 1, Data: []byte("r")}, {ID: 2, State: FinalFailed, Attempts: 3, Data: []byte("e"),
		History: []Attempt{{At: at, Worker: "w1", Error: "boom"}, {At: at.Add(time.Second), Worker: "w2", Error: "e"}}}}
	out, sum, err := DecodeOutcomeMsg(AppendOutcomes(nil, in))
	if err != nil || sum != nil || !reflect.DeepEqual(out, in) {
		t.Fatalf("outcomes: %+v %v %v", out, sum, err)
	}
	// A redriven job's outcome carries the failed job it ran again; others are encoded as before.
	redriven := append(slices.Clone(in), Outcome{ID: 9, State: FinalDone, Attempts: 1, Data: []byte("r"), RedriveOf: 2})
	if out, _, err := DecodeOutcomeMsg(AppendOutcomes(nil, redriven)); err != nil || !reflect.DeepEqual(out, redriven) {
		t.Fatalf("redriven outcome: %+v %v", out, err)
	}
	if b := AppendOutcomes(nil, []Outcome{{ID: 1, State: FinalDone}}); !bytes.Equal(b, []byte{Version, kindOutcomes, 1, 1, 0, byte(FinalDone), 0, 0, 0}) {
		t.Fatalf("an outcome without RedriveOf is encoded %v: not as before", b)
	}
	flaggedZero := AppendOutcomes(nil, []Outcome{{ID: 1, State: FinalDone}})
	flaggedZero[5] |= finalRedriven // version, kind, count, ID, key length, then the state
	flaggedZero = slices.Insert(flaggedZero, 6, 0)
	if _, _, err := DecodeOutcomeMsg(flaggedZero); !errors.Is(err, ErrMalformed) {
		t.Fatalf("a redriven flag with ID 0 accepted: %v", err)
	}
	s := GroupSummary{Jobs: 3, Done: 1, Failed: 1, Canceled: 1}
	out, sum, err = DecodeOutcomeMsg(AppendSummary(nil, s))
	if err != nil || out != nil || *sum != s {
		t.Fatalf("summary: %+v %v %v", out, sum, err)
	}
	if _, _, err := DecodeOutcomeMsg(AppendSummary(nil, GroupSummary{Jobs: 5, Done: 1})); !errors.Is(err, ErrMalformed) {
		t.Fatalf("inconsistent summary accepted: %v", err)
	}
	abandoned := GroupSummary{Jobs: 2, Done: 2, Abandoned: true}
	if _, sum, err := DecodeOutcomeMsg(AppendSummary(nil, abandoned)); err != nil || *sum != abandoned {
		t.Fatalf("abandoned summary: %+v %v", sum, err)
	}
	// A summary without flags is the same bytes as before flags existed.
	if b := AppendSummary(nil, s); len(b) != 2+4 {
		t.Fatalf("summary without flags is %d bytes, want 6", len(b))
	}
	if _, _, err := DecodeOutcomeMsg(append(AppendSummary(nil, s), 2)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("unknown summary flag accepted: %v", err)
	}

	// A group's last message: its outcomes not yet written and its summary.
	last := GroupSummary{Jobs: 2, Done: 1, Failed: 1, Abandoned: true}
	out, sum, err = DecodeOutcomeMsg(AppendLast(nil, in, last))
	if err != nil || !reflect.DeepEqual(out, in) || sum == nil || *sum != last {
		t.Fatalf("last message: %+v %v %v", out, sum, err)
	}
	if b := AppendLast(nil, nil, s); !bytes.Equal(b, AppendSummary(nil, s)) {
		t.Fatalf("a last message without outcomes is %q, want the summary alone", b)
	}
	whole := AppendLast(nil, in, s)
	for _, b := range [][]byte{whole[:len(whole)-1], append(whole, 1, 1), AppendLast(nil, in, GroupSummary{Jobs: 3})} {
		if _, _, err := DecodeOutcomeMsg(b); !errors.Is(err, ErrMalformed) {
			t.Fatalf("%q accepted: %v", b, err)
		}
	}
}

func TestDecodersReject(t *testing.T) {
	t.Parallel()
	good := AppendWork(nil, []WorkJob{{ID: 1, Attempt: 1, Group: "g", Payload: []byte("p")}})
	for _, tc := range []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, ErrMalformed},
		{"version", append([]byte{9}, good[1:]...), ErrVersion},
		{"kind", append([]byte{Version, kindReports}, good[2:]...), ErrMalformed},
		{"truncated", good[:len(good)-1], ErrMalformed},
		{"trailing", append(bytes.Clone(good), 0), ErrMalformed},
		{"huge count", []byte{Version, kindWork, 0xff, 0xff, 0xff, 0xff, 0x0f}, ErrMalformed},
		{"attempt zero", AppendWork(nil, []WorkJob{{ID: 1, Group: "g"}}), ErrMalformed},
	} {
		if _, err := DecodeWork(tc.b); !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestHeartbeat(t *testing.T) {
	t.Parallel()
	h := Heartbeat{Worker: "w1", Pool: PoolKey([]string{"a"}), Resources: []string{"a"}, Concurrency: 4, Busy: 1, Sleeping: 3, IntervalMS: 1000}
	back, err := ParseHeartbeat(h.Marshal())
	if err != nil || back.Worker != "w1" || back.Busy != 1 || back.Interval() != time.Second {
		t.Fatalf("round trip: %+v %v", back, err)
	}
	if back.Held != nil {
		t.Fatalf("a heartbeat without held parsed with %d", *back.Held)
	}
	for _, held := range []int{0, 3} {
		h.Held = &held
		if back, err := ParseHeartbeat(h.Marshal()); err != nil || back.Held == nil || *back.Held != held {
			t.Fatalf("held %d: %+v %v", held, back.Held, err)
		}
	}
	neg := -1
	h.Held = &neg
	if _, err := ParseHeartbeat(h.Marshal()); !errors.Is(err, ErrMalformed) {
		t.Fatalf("negative held accepted: %v", err)
	}
	h.Held = nil
	h.Pool = "any"
	if _, err := ParseHeartbeat(h.Marshal()); !errors.Is(err, ErrMalformed) {
		t.Fatalf("mismatched pool accepted: %v", err)
	}
	if _, err := ParseHeartbeat([]byte("{")); !errors.Is(err, ErrMalformed) {
		t.Fatalf("bad JSON accepted: %v", err)
	}
}
