package wire

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestJobIDs(t *testing.T) {
	for _, c := range []struct {
		seq uint64
		i   int
	}{{1, 0}, {12345, 0}, {12345, 1}, {MaxJobSeq, MaxPack - 1}} {
		id := PackedJobID(c.seq, c.i)
		if JobSeq(id) != c.seq || JobIndex(id) != c.i {
			t.Errorf("PackedJobID(%d, %d) = %d: seq %d index %d", c.seq, c.i, id, JobSeq(id), JobIndex(id))
		}
		if id >= 1<<53 {
			t.Errorf("PackedJobID(%d, %d) = %d is past 2^53", c.seq, c.i, id)
		}
		if JobSeq(c.seq) != c.seq || JobIndex(c.seq) != 0 {
			t.Errorf("the job stored alone at %d: seq %d index %d", c.seq, JobSeq(c.seq), JobIndex(c.seq))
		}
	}
	// A group's packs, stored one after another, hold consecutive IDs.
	if PackedJobID(7, MaxPack-1)+1 != PackedJobID(8, 0) {
		t.Error("the IDs of consecutive full packs are not consecutive")
	}
}

func TestPackRoundTrip(t *testing.T) {
	at := time.UnixMilli(1795000000123)
	in := []PackJob{
		{Payload: []byte("one")},
		{Payload: nil, Require: []string{"gpu", "eu"}, Prefer: []string{"host:a"}, MaxAttempts: 4, Timeout: 3 * time.Second, RunAt: at},
		{Payload: []byte(strings.Repeat("x", 1000))},
	}
	h := Header(PackHeader("crawl/7", len(in), 6))
	h.Set(HdrTraceParent, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	h.Set(HdrPublished, "1795000000000000")
	jobs, err := ParseStoredJobs(900, h, AppendPack(nil, in))
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 3 {
		t.Fatalf("%d jobs, want 3", len(jobs))
	}
	for i, j := range jobs {
		if j.ID != PackedJobID(900, i) || j.Meta.Group != "crawl/7" || string(j.Payload) != string(in[i].Payload) {
			t.Errorf("job %d: %+v", i, j)
		}
		if j.Meta.Priority != 6 {
			t.Errorf("job %d has priority %d, want the pack's 6", i, j.Meta.Priority)
		}
		if !strings.Contains(j.Trace, "b7ad6b7169203331") {
			t.Errorf("job %d lost the pack's trace: %q", i, j.Trace)
		}
	}
	m := jobs[1].Meta
	if strings.Join(m.Require, ",") != "gpu,eu" || strings.Join(m.Prefer, ",") != "host:a" || m.MaxAttempts != 4 || m.Timeout != 3*time.Second || !m.RunAt.Equal(at) {
		t.Errorf("job 1 meta %+v", m)
	}
	if !jobs[0].Meta.RunAt.IsZero() || jobs[0].Meta.Require != nil {
		t.Errorf("job 0 meta %+v", jobs[0].Meta)
	}

	// A message holding one job parses as before, its ID its sequence.
	one, err := ParseStoredJobs(901, JobMeta{Group: "g", Key: "k"}.Header(), []byte("p"))
	if err != nil || len(one) != 1 || one[0].ID != 901 || one[0].Meta.Key != "k" || string(one[0].Payload) != "p" {
		t.Fatalf("single message: %+v, %v", one, err)
	}
}

func TestPackRejections(t *testing.T) {
	good := AppendPack(nil, []PackJob{{Payload: []byte("a")}, {Payload: []byte("b")}})
	keyed := Header(PackHeader("g", 2, 0))
	keyed.Set(HdrKey, "k")
	withOpt := Header(PackHeader("g", 2, 0))
	withOpt.Set(HdrTimeout, "1s")
	for name, c := range map[string]struct {
		seq  uint64
		h    func() map[string][]string
		body []byte
		want string
	}{
		"count mismatch":   {1, func() map[string][]string { return PackHeader("g", 3, 0) }, good, "holds 2"},
		"count of one":     {1, func() map[string][]string { return PackHeader("g", 1, 0) }, good, "bad Weave-Pack"},
		"too many":         {1, func() map[string][]string { return PackHeader("g", MaxPack+1, 0) }, good, "bad Weave-Pack"},
		"past its seqs":    {MaxJobSeq + 1, func() map[string][]string { return PackHeader("g", 2, 0) }, good, "past the last"},
		"single past seqs": {MaxJobSeq + 1, func() map[string][]string { return JobMeta{Group: "g"}.Header() }, nil, "ambiguous"},
		"a key":            {1, func() map[string][]string { return keyed }, good, "not in headers"},
		"options in hdr":   {1, func() map[string][]string { return withOpt }, good, "not in headers"},
		"bad group":        {1, func() map[string][]string { return PackHeader("", 2, 0) }, good, "group"},
		"truncated":        {1, func() map[string][]string { return PackHeader("g", 2, 0) }, good[:len(good)-2], "malformed"},
		"trailing":         {1, func() map[string][]string { return PackHeader("g", 2, 0) }, append(append([]byte{}, good...), 0), "trailing"},
		"bad resource":     {1, func() map[string][]string { return PackHeader("g", 2, 0) }, AppendPack(nil, []PackJob{{}, {Require: []string{"a b"}}}), "job 1 of the pack"},
		"attempts":         {1, func() map[string][]string { return PackHeader("g", 2, 0) }, AppendPack(nil, []PackJob{{MaxAttempts: MaxAttemptsLimit + 1}, {}}), "job 0 of the pack: MaxAttempts"},
		"timeout":          {1, func() map[string][]string { return PackHeader("g", 2, 0) }, AppendPack(nil, []PackJob{{}, {Timeout: MaxTimeout + 1}}), "Timeout"},
		"other kind":       {1, func() map[string][]string { return PackHeader("g", 2, 0) }, AppendWork(nil, nil), "kind"},
	} {
		_, err := ParseStoredJobs(c.seq, c.h(), c.body)
		if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrMalformed containing %q", name, err, c.want)
		}
	}
	// A resource list longer than a job may have is refused before it is read.
	long := AppendPack(nil, []PackJob{{}, {}})
	long = append(long[:len(long)-6], 0, 0xe8, 0x07) // job 1: no payload, 1,000 required names...
	long = append(long, make([]byte, 2000)...)
	if _, err := ParseStoredJobs(1, PackHeader("g", 2, 0), long); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "resource names") {
		t.Errorf("a pack with 1,000 resource names: %v", err)
	}
	// A priority travels in Weave-Priority with the feature version, and nowhere else.
	prio := func(version, priority string, after bool) func() map[string][]string {
		return func() map[string][]string {
			h := Header(PackHeader("g", 2, 0))
			h.Set(HdrVersion, version)
			if priority != "" {
				h.Set(HdrPriority, priority)
			}
			if after {
				h.Set(HdrAfter, After{Group: "other"}.value())
			}
			return h
		}
	}
	for name, c := range map[string]struct {
		h    func() map[string][]string
		want string
	}{
		"priority at version 2":  {prio("2", "3", false), "Weave-Priority on a pack"},
		"version 3, no priority": {prio("3", "", false), "without Weave-Priority"},
		"priority 10":            {prio("3", "10", false), "bad Weave-Priority"},
		"priority 0":             {prio("3", "0", false), "bad Weave-Priority"},
		"dependencies":           {prio("3", "3", true), "Weave-After on a pack"},
	} {
		if _, err := ParseStoredJobs(1, c.h(), good); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrMalformed containing %q", name, err, c.want)
		}
	}
	// A pack that says version 1 is from no producer that knows packs: refused as a version.
	h := Header(PackHeader("g", 2, 0))
	h.Set(HdrVersion, "1")
	if _, err := ParseStoredJobs(1, h, good); !errors.Is(err, ErrVersion) {
		t.Errorf("a pack of version 1: %v, want ErrVersion", err)
	}
}
