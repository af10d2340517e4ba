package wire

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
)

// Release proofs. The coordinator signs each job it releases with a key only coordinators can
// read (ReleaseKey, kept in the namespace's key bucket, see Names.KeyBucket): the proof names
// the pool, the job, the attempt and the release (Rel). It travels beside the work batch's
// encoding, in one Weave-Proof header value per job, "<job ID> <attempt> <proof>"; a worker
// echoes each job's value on the report batch that reports it. A coordinator that did not see
// the release (after a restart, when the job's batch has been acknowledged) accepts a report only
// with a proof it can verify: no worker can forge one for a job that was not released to its own
// pool. Headers, not the binary encodings, so that workers and coordinators of the release
// before proofs read the batches and reports of this one.
const HdrProof = "Weave-Proof"

// ReleaseKeySize is the length of a release key.
const ReleaseKeySize = 32

// ReleaseKey is the secret the coordinator signs releases with.
type ReleaseKey [ReleaseKeySize]byte

// proofMACSize is how many bytes of the HMAC a proof keeps: 128 bits cannot be guessed.
const proofMACSize = 16

// proofEncoding is strict, so that each MAC has one text and a proof that verifies is the one
// Proof made.
var proofEncoding = base64.RawURLEncoding.Strict()

// maxProofLen bounds a proof's text: a decimal uint64, a dot and the encoded MAC.
const maxProofLen = 20 + 1 + 22

// Proof returns the proof that attempt of job id was released to pool, as the release that
// follows the returned report at EVENTS sequence rel of that attempt (0 for its first release).
func (k *ReleaseKey) Proof(pool string, id uint64, attempt uint32, rel uint64) string {
	return strconv.FormatUint(rel, 10) + "." + proofEncoding.EncodeToString(k.mac(pool, id, attempt, rel))
}

// Verify checks a proof for attempt of job id reported on pool's subject and returns the release
// it names (see Proof); ok is false for a proof that is absent, malformed or not the key's.
func (k *ReleaseKey) Verify(proof, pool string, id uint64, attempt uint32) (rel uint64, ok bool) {
	relText, macText, found := strings.Cut(proof, ".")
	if !found || len(proof) > maxProofLen || len(macText) != proofEncoding.EncodedLen(proofMACSize) || len(relText) > 1 && relText[0] == '0' {
		return 0, false // one text per proof: the decoders would take leading zeros and line breaks
	}
	rel, err := strconv.ParseUint(relText, 10, 64)
	if err != nil {
		return 0, false
	}
	got, err := proofEncoding.DecodeString(macText)
	if err != nil || len(got) != proofMACSize {
		return 0, false
	}
	return rel, hmac.Equal(got, k.mac(pool, id, attempt, rel))
}

func (k *ReleaseKey) mac(pool string, id uint64, attempt uint32, rel uint64) []byte {
	m := hmac.New(sha256.New, k[:])
	var b [8 + 8 + 4 + 8]byte
	binary.BigEndian.PutUint64(b[0:], uint64(len(pool)))
	binary.BigEndian.PutUint64(b[8:], id)
	binary.BigEndian.PutUint32(b[16:], attempt)
	binary.BigEndian.PutUint64(b[20:], rel)
	m.Write(b[:8])
	m.Write([]byte(pool))
	m.Write(b[8:])
	return m.Sum(nil)[:proofMACSize]
}

// SetWorkProofs adds the Weave-Proof values of the batch's jobs that carry a proof to m.
func SetWorkProofs(m *nats.Msg, jobs []WorkJob) {
	for i := range jobs {
		setProof(m, jobs[i].ID, jobs[i].Attempt, jobs[i].Proof)
	}
}

// SetReportProofs adds the Weave-Proof values of the reports that carry a proof to m.
func SetReportProofs(m *nats.Msg, reports []Report) {
	for i := range reports {
		setProof(m, reports[i].ID, reports[i].Attempt, reports[i].Proof)
	}
}

func setProof(m *nats.Msg, id uint64, attempt uint32, proof string) {
	if proof == "" {
		return
	}
	if m.Header == nil {
		m.Header = nats.Header{}
	}
	m.Header[HdrProof] = append(m.Header[HdrProof], strconv.FormatUint(id, 10)+" "+strconv.FormatUint(uint64(attempt), 10)+" "+proof)
}

// WorkProofs sets the Proof of the batch's jobs from its Weave-Proof values.
func WorkProofs(h nats.Header, jobs []WorkJob) {
	eachProof(h, len(jobs), func(id uint64, attempt uint32, proof string) {
		for i := range jobs {
			if jobs[i].ID == id && jobs[i].Attempt == attempt {
				jobs[i].Proof = proof
				return
			}
		}
	})
}

// ReportProofs sets the Proof of the reports from their message's Weave-Proof values. Values
// that do not parse, or name no report of the message, are ignored: a report without its proof
// is judged as one without any.
func ReportProofs(h nats.Header, reports []Report) {
	eachProof(h, len(reports), func(id uint64, attempt uint32, proof string) {
		for i := range reports {
			if reports[i].ID == id && reports[i].Attempt == attempt && reports[i].Proof == "" {
				reports[i].Proof = proof
				return
			}
		}
	})
}

// eachProof calls f with each well-formed Weave-Proof value of h, at most n of them (one per
// job or report of the message, so a forged header cannot make the reader work harder than the
// message's own records do).
func eachProof(h nats.Header, n int, f func(id uint64, attempt uint32, proof string)) {
	vals := h[HdrProof]
	if len(vals) > n {
		vals = vals[:n]
	}
	for _, v := range vals {
		id, attempt, proof, ok := parseProofValue(v)
		if ok {
			f(id, attempt, proof)
		}
	}
}

// parseProofValue splits a Weave-Proof value "<job ID> <attempt> <proof>".
func parseProofValue(v string) (id uint64, attempt uint32, proof string, ok bool) {
	if len(v) > 20+1+10+1+maxProofLen {
		return 0, 0, "", false
	}
	idText, rest, ok1 := strings.Cut(v, " ")
	attText, proof, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 || proof == "" || strings.Contains(proof, " ") {
		return 0, 0, "", false
	}
	id, err := strconv.ParseUint(idText, 10, 64)
	if err != nil {
		return 0, 0, "", false
	}
	a, err := strconv.ParseUint(attText, 10, 32)
	if err != nil || a == 0 {
		return 0, 0, "", false
	}
	return id, uint32(a), proof, true
}
