package wire

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"hash"
	"strconv"
	"strings"
	"sync"
)

// Release proofs. The coordinator signs each job it releases with a key only coordinators can
// read (ReleaseKey, kept in the namespace's key bucket, see Names.KeyBucket): the proof names
// the pool, the job, the attempt and the release (Rel). It travels beside the work batch's
// encoding, in its Weave-Proof header: one entry per job, "<job ID> <attempt> <proof>",
// comma-separated; a worker echoes each job's entry on the report batch that reports it. A
// coordinator that did not see the release (after a restart, when the job's batch has been
// acknowledged) accepts a report only with a proof it can verify: no worker can forge one for a
// job that was not released to its own pool. Headers, not the binary encodings, so that workers
// and coordinators of the release before proofs read the batches and reports of this one.
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

// macs keeps keyed HMAC states per release key, so a proof does not key a new one (a process
// holds one key, or a few in tests).
var macs sync.Map // ReleaseKey → *sync.Pool of hash.Hash

func (k *ReleaseKey) mac(pool string, id uint64, attempt uint32, rel uint64) []byte {
	p, ok := macs.Load(*k)
	if !ok {
		key := *k
		p, _ = macs.LoadOrStore(key, &sync.Pool{New: func() any { return hmac.New(sha256.New, key[:]) }})
	}
	states := p.(*sync.Pool)
	m := states.Get().(hash.Hash)
	defer states.Put(m)
	m.Reset()
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

// SetWorkProofs sets the Weave-Proof header of h to the entries of the batch's jobs that carry a
// proof, and returns h (made if it was nil and there was one).
func SetWorkProofs(h map[string][]string, jobs []WorkJob) map[string][]string {
	return setProofs(h, len(jobs), func(i int) (uint64, uint32, string) { return jobs[i].ID, jobs[i].Attempt, jobs[i].Proof })
}

// SetReportProofs sets the Weave-Proof header of h to the entries of the reports that carry a
// proof, and returns h (made if it was nil and there was one).
func SetReportProofs(h map[string][]string, reports []Report) map[string][]string {
	return setProofs(h, len(reports), func(i int) (uint64, uint32, string) {
		return reports[i].ID, reports[i].Attempt, reports[i].Proof
	})
}

// setProofs writes the n records' proofs as one header value, entries "<id> <attempt> <proof>"
// separated by commas: one header line per message, however many jobs it carries, is what the
// NATS clients and server parse.
func setProofs(h map[string][]string, n int, record func(i int) (id uint64, attempt uint32, proof string)) map[string][]string {
	var b []byte
	for i := range n {
		id, attempt, proof := record(i)
		if proof == "" {
			continue
		}
		if len(b) > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, id, 10)
		b = append(b, ' ')
		b = strconv.AppendUint(b, uint64(attempt), 10)
		b = append(b, ' ')
		b = append(b, proof...)
	}
	if len(b) == 0 {
		return h
	}
	if h == nil {
		h = map[string][]string{}
	}
	h[HdrProof] = []string{string(b)}
	return h
}

// WorkProofs sets the Proof of the batch's jobs from its Weave-Proof entries.
func WorkProofs(hm map[string][]string, jobs []WorkJob) {
	h := Header(hm)
	eachProof(h, len(jobs), func(k int, id uint64, attempt uint32, proof string) {
		if k < len(jobs) && jobs[k].ID == id && jobs[k].Attempt == attempt {
			jobs[k].Proof = proof // in the batch's order, as SetWorkProofs writes them
			return
		}
		for i := range jobs {
			if jobs[i].ID == id && jobs[i].Attempt == attempt {
				jobs[i].Proof = proof
				return
			}
		}
	})
}

// ReportProofs sets the Proof of the reports from their message's Weave-Proof entries. Entries
// that do not parse, or name no report of the message, are ignored: a report without its proof
// is judged as one without any.
func ReportProofs(hm map[string][]string, reports []Report) {
	h := Header(hm)
	eachProof(h, len(reports), func(k int, id uint64, attempt uint32, proof string) {
		if k < len(reports) && reports[k].ID == id && reports[k].Attempt == attempt && reports[k].Proof == "" {
			reports[k].Proof = proof // in the message's order, as SetReportProofs writes them
			return
		}
		for i := range reports {
			if reports[i].ID == id && reports[i].Attempt == attempt && reports[i].Proof == "" {
				reports[i].Proof = proof
				return
			}
		}
	})
}

// eachProof calls f with each well-formed Weave-Proof entry of h and its rank among the entries,
// at most n of them (one per job or report of the message, so a forged header cannot make the
// reader work harder than the message's own records do). Entries are separated by commas, in
// one value or several.
func eachProof(h Header, n int, f func(k int, id uint64, attempt uint32, proof string)) {
	k := 0
	for _, v := range h[HdrProof] {
		for v != "" && k < n {
			var entry string
			entry, v, _ = strings.Cut(v, ",")
			if id, attempt, proof, ok := parseProofValue(entry); ok {
				f(k, id, attempt, proof)
			}
			k++
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
