package spreader_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/weavejobs/weave/spreader"
)

// opKeys is the number of distinct group keys the random operations use: few
// enough that duplicates, unknown keys and re-added keys come up often.
const opKeys = 8

// runOps reads ops as a program of scheduler operations and runs it against a
// Scheduler and the model, failing at the first difference. Every byte string
// is a valid program, so the fuzzer and the seeded random test share it.
func runOps(t *testing.T, ops []byte) {
	t.Helper()
	if len(ops) < 3 {
		return
	}
	cfg := spreader.Config{
		Feeders:             1 + int(ops[0]%4),
		Policy:              spreader.Policy(ops[1] % 2),
		MaxInFlightPerGroup: int(ops[2] % 4),
	}
	ops = ops[3:]
	s, err := spreader.NewScheduler[int, int](cfg)
	if err != nil {
		t.Fatal(err)
	}
	m := newModel(cfg)
	nextJob := 0
	var log []string
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("config %+v\nops so far:\n%v\n%s", cfg, log, fmt.Sprintf(format, args...))
	}
	sameErr := func(op string, got, want error) {
		t.Helper()
		if !errors.Is(got, want) || (got == nil) != (want == nil) {
			fail("%s: error %v, model %v", op, got, want)
		}
	}

	for i := 0; i+1 < len(ops); i += 2 {
		op, arg := ops[i]%12, int(ops[i+1])
		k := arg % opKeys
		switch op {
		case 0, 1:
			log = append(log, fmt.Sprintf("AddGroup(%d)", k))
			sameErr(log[len(log)-1], s.AddGroup(k), m.AddGroup(k))
		case 2, 3:
			jobs := make([]int, 1+arg/opKeys%3)
			for j := range jobs {
				jobs[j] = nextJob
				nextJob++
			}
			log = append(log, fmt.Sprintf("Push(%d, %v)", k, jobs))
			sameErr(log[len(log)-1], s.Push(k, jobs...), m.Push(k, jobs...))
		case 4:
			log = append(log, fmt.Sprintf("Seal(%d)", k))
			sameErr(log[len(log)-1], s.Seal(k), m.Seal(k))
		case 5:
			log = append(log, fmt.Sprintf("Cancel(%d)", k))
			if got, want := s.Cancel(k), m.Cancel(k); !slices.Equal(got, want) {
				fail("Cancel(%d) = %v, model %v", k, got, want)
			}
		case 6, 7:
			log = append(log, "Next()")
			g, job, ok := s.Next()
			wg, wjob, wok := m.Next()
			if g != wg || job != wjob || ok != wok {
				fail("Next() = %d, %d, %v; model %d, %d, %v", g, job, ok, wg, wjob, wok)
			}
		case 8:
			log = append(log, fmt.Sprintf("Done(%d)", k))
			s.Done(k)
			m.Done(k)
		case 9:
			log = append(log, fmt.Sprintf("Take(%d)", k))
			job, ok := s.Take(k)
			wjob, wok := m.Take(k)
			if job != wjob || ok != wok {
				fail("Take(%d) = %d, %v; model %d, %v", k, job, ok, wjob, wok)
			}
		case 10:
			if arg%2 == 0 {
				n := arg / 2 % 5
				log = append(log, fmt.Sprintf("SetFeeders(%d)", n))
				s.SetFeeders(n)
				m.SetFeeders(n)
				break
			}
			// Range over Offers, taking the offered group when the key's bit
			// in arg is set. Taking only the group just offered leaves the
			// rest of the range as the model's list from the start.
			log = append(log, fmt.Sprintf("Offers(take mask %b)", arg>>1))
			want := m.offers()
			var got, wantSeen []string
			for g, job := range s.Offers() {
				got = append(got, fmt.Sprint(g, ":", job))
				if arg>>(1+g)&1 == 1 {
					tjob, ok := s.Take(g)
					got = append(got, fmt.Sprint("take ", tjob, ok))
				}
			}
			for _, g := range want {
				wantSeen = append(wantSeen, fmt.Sprint(g.key, ":", g.jobs[0]))
				if arg>>(1+g.key)&1 == 1 {
					tjob, ok := m.Take(g.key)
					wantSeen = append(wantSeen, fmt.Sprint("take ", tjob, ok))
				}
			}
			if !slices.Equal(got, wantSeen) {
				fail("Offers:\n got %v\nwant %v", got, wantSeen)
			}
		case 11:
			// Stop ranging over Offers early.
			limit := 1 + arg%3
			log = append(log, fmt.Sprintf("Offers(stop after %d)", limit))
			var got, want []string
			for g, job := range s.Offers() {
				got = append(got, fmt.Sprint(g, ":", job))
				if len(got) == limit {
					break
				}
			}
			for _, g := range m.offers()[:min(limit, len(m.offers()))] {
				want = append(want, fmt.Sprint(g.key, ":", g.jobs[0]))
			}
			if !slices.Equal(got, want) {
				fail("Offers:\n got %v\nwant %v", got, want)
			}
		}

		if s.Active() != m.Active() || s.Waiting() != m.Waiting() || s.Feeders() != m.feeders {
			fail("Active/Waiting/Feeders = %d/%d/%d, model %d/%d/%d",
				s.Active(), s.Waiting(), s.Feeders(), m.Active(), m.Waiting(), m.feeders)
		}
		for k := range opKeys {
			if s.InFlight(k) != m.InFlight(k) || s.Queued(k) != m.Queued(k) {
				fail("group %d: InFlight/Queued = %d/%d, model %d/%d", k, s.InFlight(k), s.Queued(k), m.InFlight(k), m.Queued(k))
			}
		}
	}
	// The offers at the end must agree too, read without taking.
	var got, want []string
	for g, job := range s.Offers() {
		got = append(got, fmt.Sprint(g, ":", job))
	}
	for _, g := range m.offers() {
		want = append(want, fmt.Sprint(g.key, ":", g.jobs[0]))
	}
	if !slices.Equal(got, want) {
		fail("final Offers:\n got %v\nwant %v", got, want)
	}
}

// TestSchedulerModel runs random operation sequences against the Scheduler and
// the model.
func TestSchedulerModel(t *testing.T) {
	t.Parallel()
	for seed := range uint64(3000) {
		rng := rand.New(rand.NewPCG(seed, 3))
		ops := make([]byte, 3+2*rng.IntN(200))
		for i := range ops {
			ops[i] = byte(rng.Uint32())
		}
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			runOps(t, ops)
		})
	}
}

// FuzzScheduler explores operation sequences beyond the seeded ones:
//
//	go test -fuzz=FuzzScheduler ./spreader/
func FuzzScheduler(f *testing.F) {
	f.Add([]byte{1, 0, 0, 0, 1, 2, 1, 6, 0, 8, 1})
	f.Add([]byte{2, 1, 2, 0, 1, 0, 2, 2, 10, 3, 17, 4, 2, 6, 0, 10, 5, 10, 8})
	f.Fuzz(runOps)
}
