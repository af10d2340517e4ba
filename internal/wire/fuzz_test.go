package wire

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"unicode"

	"github.com/nats-io/nats.go"
)

// The fuzzers check that decoders of untrusted bytes never panic and that whatever they accept
// re-encodes to an equivalent message.

func FuzzDecodeWork(f *testing.F) {
	f.Add(AppendWork(nil, []WorkJob{{ID: 1, Attempt: 1, Group: "g", Key: "k", Payload: []byte("p")}}))
	f.Add([]byte{Version, kindWork, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		jobs, err := DecodeWork(b)
		if err != nil {
			return
		}
		again, err := DecodeWork(AppendWork(nil, jobs))
		if err != nil || len(again) != len(jobs) {
			t.Fatalf("re-encode of accepted batch failed: %v", err)
		}
	})
}

func FuzzDecodeReports(f *testing.F) {
	f.Add(AppendReports(nil, "w", []Report{{ID: 1, Attempt: 1, Status: StatusOK, Data: []byte("x")}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		w, rs, err := DecodeReports(b)
		if err != nil {
			return
		}
		w2, rs2, err := DecodeReports(AppendReports(nil, w, rs))
		if err != nil || w2 != w || len(rs2) != len(rs) {
			t.Fatalf("re-encode of accepted reports failed: %v", err)
		}
	})
}

func FuzzDecodeOutcomeMsg(f *testing.F) {
	f.Add(AppendOutcomes(nil, []Outcome{{ID: 1, State: FinalDone, Attempts: 1}}))
	f.Add(AppendSummary(nil, GroupSummary{Jobs: 1, Done: 1}))
	f.Add(AppendLast(nil, []Outcome{{ID: 1, Key: "k", State: FinalFailed, Attempts: 2, Data: []byte("e")}}, GroupSummary{Jobs: 1, Failed: 1}))
	f.Add(AppendOutcomes(nil, []Outcome{{ID: 9, State: FinalDone, Attempts: 1, RedriveOf: 2}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		outs, sum, err := DecodeOutcomeMsg(b)
		if err != nil {
			return
		}
		var again []byte
		switch {
		case sum == nil:
			again = AppendOutcomes(nil, outs)
		default:
			again = AppendLast(nil, outs, *sum)
		}
		outs2, sum2, err := DecodeOutcomeMsg(again)
		if err != nil || len(outs2) != len(outs) || (sum == nil) != (sum2 == nil) || sum != nil && *sum != *sum2 {
			t.Fatalf("re-encode of an accepted message: %d outcomes, summary %v; again %d, %v, %v", len(outs), sum, len(outs2), sum2, err)
		}
	})
}

// FuzzParseHeaders feeds raw header blocks (as a NATS client would receive them) to the job and
// group-control parsers and the heartbeat parser.
func FuzzParseHeaders(f *testing.F) {
	f.Add([]byte("NATS/1.0\r\nWeave-Version: 1\r\nWeave-Group: g\r\nWeave-Require: a,b\r\nWeave-Timeout: 1s\r\n\r\n"))
	f.Add([]byte("NATS/1.0\r\nWeave-Version: 1\r\nWeave-Group: g\r\nWeave-Op: seal\r\nWeave-Count: 3\r\n\r\n"))
	f.Add([]byte("NATS/1.0\r\nWeave-Version: 1\r\nWeave-Group: g\r\nWeave-Op: redrive\r\nWeave-Reply: t1\r\nWeave-Jobs: 4,7\r\n\r\n"))
	f.Add([]byte("NATS/1.0\r\nWeave-Version: 1\r\nWeave-Group: g\r\nWeave-Op: open\r\nWeave-Redrive: 12\r\n\r\n"))
	f.Add([]byte("NATS/1.0\r\nWeave-Version: 1\r\nWeave-Group: g\r\nWeave-Op: open\r\nWeave-Weight: 3\r\n\r\n"))
	f.Add([]byte("NATS/1.0\r\nWeave-Version: 1\r\nWeave-Group: g\r\nWeave-Run-At: 1795000000123\r\n\r\n"))
	f.Add([]byte("NATS/1.0\r\nWeave-Version: 1\r\nWeave-Group: g\r\nWeave-Op: open\r\nWeave-Reply: p-1\r\n\r\n"))
	f.Add([]byte("NATS/1.0\r\nWeave-Version: 1\r\nWeave-Group: g\r\nWeave-Single: 1\r\nWeave-Reply: p-1\r\n\r\n"))
	f.Add([]byte("NATS/1.0\r\nWeave-Version: 3\r\nWeave-Group: g\r\nWeave-Op: open\r\nWeave-After: success wait 0 crawl 1\r\nWeave-After: failure cancel 17 b\r\nWeave-Priority: 2\r\n\r\n"))
	f.Add([]byte("NATS/1.0\r\nWeave-Version: 3\r\nWeave-Group: g\r\nWeave-Single: 1\r\nWeave-After: complete cancel 0 a\r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h := parseHeaderBlock(b)
		if m, err := ParseJobMeta(h); err == nil {
			if err := m.Validate(); err != nil {
				t.Fatalf("accepted invalid meta %+v: %v", m, err)
			}
			if back, err := ParseJobMeta(m.Header()); err != nil || !back.RunAt.Equal(m.RunAt) {
				t.Fatalf("re-encode of accepted meta %+v gave %+v, %v", m, back, err)
			}
		}
		if c, err := ParseGroupControl(h); err == nil {
			if back, err := ParseGroupControl(c.Header()); err != nil || !reflect.DeepEqual(back, c) {
				t.Fatalf("re-encode of accepted control %+v gave %+v, %v", c, back, err)
			}
		}
		_, _ = ParseHeartbeat(b)
		_, _ = ParseGroupToken(string(b))
	})
}

// parseHeaderBlock is a lenient "Key: value" line parser, enough to build arbitrary headers.
func parseHeaderBlock(b []byte) nats.Header {
	h := nats.Header{}
	for _, line := range bytes.Split(b, []byte("\r\n")) {
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		h.Add(string(bytes.TrimSpace(k)), string(bytes.TrimSpace(v)))
	}
	return h
}

func FuzzDecodeCancel(f *testing.F) {
	f.Add(AppendCancel(nil, []uint64{1, 1 << 40}))
	f.Fuzz(func(t *testing.T, b []byte) {
		ids, err := DecodeCancel(b)
		if err != nil {
			return
		}
		if again, err := DecodeCancel(AppendCancel(nil, ids)); err != nil || len(again) != len(ids) {
			t.Fatalf("re-encode of accepted cancel failed: %v", err)
		}
	})
}

// FuzzParsePack feeds arbitrary bodies to the pack decoder under a pack's headers.
func FuzzParsePack(f *testing.F) {
	f.Add(AppendPack(nil, []PackJob{{Payload: []byte("a")}, {Payload: []byte("b"), Require: []string{"r"}, Prefer: []string{"p"}, MaxAttempts: 3, Timeout: 5e9}}), 2, uint8(0))
	f.Add([]byte{Version, kindPack, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 2, uint8(4))
	f.Fuzz(func(t *testing.T, b []byte, n int, prio uint8) {
		p := int(prio) % (MaxPriority + 1)
		jobs, err := ParseStoredJobs(7, PackHeader("g", n, p), b)
		if err != nil {
			return
		}
		pack := make([]PackJob, len(jobs))
		for i, j := range jobs {
			if err := j.Meta.Validate(); err != nil || j.ID != PackedJobID(7, i) || j.Meta.Group != "g" || j.Meta.Priority != p {
				t.Fatalf("accepted job %d: %+v (%v)", i, j, err)
			}
			pack[i] = PackJob{Payload: j.Payload, Require: j.Meta.Require, Prefer: j.Meta.Prefer, MaxAttempts: j.Meta.MaxAttempts, Timeout: j.Meta.Timeout, RunAt: j.Meta.RunAt}
		}
		again, err := ParseStoredJobs(7, PackHeader("g", n, p), AppendPack(nil, pack))
		if err != nil || !reflect.DeepEqual(again, jobs) {
			t.Fatalf("re-encode of an accepted pack gave %+v, %v; want %+v", again, err, jobs)
		}
	})
}

// FuzzParseSinglePack feeds arbitrary bodies to the single pack decoder under its headers.
func FuzzParseSinglePack(f *testing.F) {
	f.Add(AppendSinglePack(nil, []SinglePackJob{{Group: "a", PackJob: PackJob{Payload: []byte("a")}}, {Group: "b", Priority: 3, PackJob: PackJob{Require: []string{"r"}, MaxAttempts: 2, Timeout: 5e9}}}), 2, "tok")
	f.Add([]byte{Version, kindSinglePack, 2, 1, 'g', 0, 0, 0, 0, 0, 0, 0, 1, 'g', 9, 0, 0, 0, 0, 0, 0}, 2, "")
	f.Fuzz(func(t *testing.T, b []byte, n int, reply string) {
		jobs, err := ParseStoredJobs(7, SinglePackHeader(n, reply), b)
		if err != nil {
			return
		}
		pack := make([]SinglePackJob, len(jobs))
		for i, j := range jobs {
			if err := j.Meta.Validate(); err != nil || j.ID != PackedJobID(7, i) || !j.Meta.Single || j.Meta.Reply != reply || j.Meta.Key != "" {
				t.Fatalf("accepted job %d: %+v (%v)", i, j, err)
			}
			pack[i] = SinglePackJob{Group: j.Meta.Group, Priority: j.Meta.Priority, PackJob: PackJob{Payload: j.Payload, Require: j.Meta.Require, Prefer: j.Meta.Prefer, MaxAttempts: j.Meta.MaxAttempts, Timeout: j.Meta.Timeout, RunAt: j.Meta.RunAt}}
		}
		again, err := ParseStoredJobs(7, SinglePackHeader(n, reply), AppendSinglePack(nil, pack))
		if err != nil || !reflect.DeepEqual(again, jobs) {
			t.Fatalf("re-encode of an accepted single pack gave %+v, %v; want %+v", again, err, jobs)
		}
	})
}

// FuzzValidateName checks the naming rule against its definition: whatever ValidateGroupID or
// ValidateKey accepts is valid UTF-8 without control, format or separator characters.
func FuzzValidateName(f *testing.F) {
	for _, s := range []string{"g", "example.com/ä", "invoice\u202efdp.exe\u202c", "zw\u200b\u200d\ufeffend", "a\u0085b", "\xff", "a\u2028"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, err := range []error{ValidateGroupID(s), ValidateKey(s)} {
			if err != nil {
				continue
			}
			for _, c := range s {
				if c == unicode.ReplacementChar || unicode.In(c, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp) {
					t.Fatalf("accepted %q, which holds U+%04X", s, c)
				}
			}
		}
	})
}

// FuzzReportProofs: Weave-Proof values come from whoever published the report; any of them
// leaves each report with the proof of a well-formed value naming it, or none, never panics, and
// a proof verifies only as the text Proof makes.
func FuzzReportProofs(f *testing.F) {
	var k ReleaseKey
	f.Add("7 1 " + k.Proof("p", 7, 1, 0))
	f.Add("8 2 " + k.Proof("p", 8, 2, 12))
	f.Add("7 1 3.AAAAAAAAAAAAAAAAAAAAAA")
	f.Add("7 0 x")
	f.Add("18446744073709551616 1 x")
	f.Add("7 1 0.o34tbbZRugcOhiZuYfqK-o")   // padding bits set: the same MAC
	f.Add("7 1 0.o\r34tbbZRugcOhiZuYfqK-g") // a line break, which the decoder skips
	f.Add("7 1 00.o34tbbZRugcOhiZuYfqK-g")  // a leading zero
	f.Add("7 1 " + k.Proof("p", 7, 1, 0) + ",8 2 " + k.Proof("p", 8, 2, 12))
	f.Add(",,7 1 x,")
	f.Fuzz(func(t *testing.T, v string) {
		reports := []Report{{ID: 7, Attempt: 1}, {ID: 8, Attempt: 2}}
		ReportProofs(nats.Header{HdrProof: []string{v, v}}, reports)
		for _, r := range reports {
			if r.Proof == "" {
				continue
			}
			named := false // by a well-formed entry of v
			for _, entry := range strings.Split(v, ",") {
				if id, attempt, proof, ok := parseProofValue(entry); ok && id == r.ID && attempt == r.Attempt && proof == r.Proof {
					named = true
				}
			}
			if !named {
				t.Fatalf("report %d/%d took proof %q from %q", r.ID, r.Attempt, r.Proof, v)
			}
			if rel, ok := k.Verify(r.Proof, "p", r.ID, r.Attempt); ok && r.Proof != k.Proof("p", r.ID, r.Attempt, rel) {
				t.Fatalf("proof %q verified but is not the text Proof makes", r.Proof)
			}
		}
	})
}
