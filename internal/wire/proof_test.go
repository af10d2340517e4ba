package wire

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

// TestProof: a proof verifies for the pool, job, attempt and release it was made for, and for
// nothing else; a key that is not the coordinators' verifies nothing.
func TestProof(t *testing.T) {
	t.Parallel()
	var k, other ReleaseKey
	k[0], other[0] = 1, 2
	p := k.Proof("pa", 42, 3, 17)
	if rel, ok := k.Verify(p, "pa", 42, 3); !ok || rel != 17 {
		t.Fatalf("Verify(%q) = %d, %v; want 17, true", p, rel, ok)
	}
	for _, tc := range []struct {
		name, proof, pool string
		id                uint64
		attempt           uint32
	}{
		{"another pool", p, "pb", 42, 3},
		{"another job", p, "pa", 43, 3},
		{"another attempt", p, "pa", 42, 4},
		{"another release", "18" + p[2:], "pa", 42, 3},
		{"another key", other.Proof("pa", 42, 3, 17), "pa", 42, 3},
		{"none", "", "pa", 42, 3},
		{"garbage", "17.not-a-mac", "pa", 42, 3},
		{"no release", p[3:], "pa", 42, 3},
	} {
		if _, ok := k.Verify(tc.proof, tc.pool, tc.id, tc.attempt); ok {
			t.Errorf("%s: proof %q verified", tc.name, tc.proof)
		}
	}
}

// TestProofHeaders: proofs go from a work batch's header to its jobs, and from reports to their
// message's header and back, each to its own job and attempt.
func TestProofHeaders(t *testing.T) {
	t.Parallel()
	var k ReleaseKey
	jobs := []WorkJob{{ID: 1, Attempt: 1, Proof: k.Proof("p", 1, 1, 0)}, {ID: 2, Attempt: 2, Proof: k.Proof("p", 2, 2, 9)}, {ID: 3, Attempt: 1}}
	m := nats.NewMsg("w")
	m.Header = SetWorkProofs(m.Header, jobs)
	got := []WorkJob{{ID: 1, Attempt: 1}, {ID: 2, Attempt: 2}, {ID: 3, Attempt: 1}}
	WorkProofs(m.Header, got)
	for i := range jobs {
		if got[i].Proof != jobs[i].Proof {
			t.Errorf("job %d: proof %q, want %q", jobs[i].ID, got[i].Proof, jobs[i].Proof)
		}
	}
	if vals := m.Header.Values(HdrProof); len(vals) != 1 || strings.Count(vals[0], ",") != 1 {
		t.Errorf("Weave-Proof %q: want one value holding the two proofs", vals)
	}
	reports := []Report{{ID: 2, Attempt: 1, Proof: "a"}, {ID: 2, Attempt: 2, Proof: "b"}, {ID: 5, Attempt: 1}}
	rm := nats.NewMsg("r")
	rm.Header = SetReportProofs(rm.Header, reports)
	back := []Report{{ID: 2, Attempt: 1}, {ID: 2, Attempt: 2}, {ID: 5, Attempt: 1}}
	ReportProofs(rm.Header, back)
	for i := range reports {
		if back[i].Proof != reports[i].Proof {
			t.Errorf("report %d: proof %q, want %q", i, back[i].Proof, reports[i].Proof)
		}
	}
}

func BenchmarkProof(b *testing.B) {
	var k ReleaseKey
	for i := range b.N {
		_ = k.Proof("p0123456789abcdef", uint64(i), 1, 0)
	}
}

func BenchmarkVerify(b *testing.B) {
	var k ReleaseKey
	p := k.Proof("p0123456789abcdef", 7, 1, 0)
	for range b.N {
		if _, ok := k.Verify(p, "p0123456789abcdef", 7, 1); !ok {
			b.Fatal("proof does not verify")
		}
	}
}
