package jobindex

import (
	"errors"
	"fmt"
	"slices"
)

// opRunner decodes a byte string into a sequence of index operations, applies each to an Index
// and to the naive model, and reports the first divergence. The property test feeds it random
// bytes, FuzzTransitions lets the fuzzer choose them.
//
// IDs come from four regions of 64 that straddle the interesting boundaries: zero, a catalog
// block (2^16), a roaring 32-bit bucket (2^32), and the top of the ID space (MaxID, and one
// reserved ID above it).
type opRunner struct {
	x    *Index
	m    *model
	sets map[byte]*ResourceSet // reused across operations, so their compiled form goes stale
	data []byte
	ops  []string // applied operations, for failure messages
}

var (
	testGroups    = []string{"g0", "g1", "g2", "g3"}
	testResources = []string{"r0", "r1", "r2", "r3"}
	idRegions     = [4]uint64{0, 1<<blockBits - 32, 1<<32 - 32, MaxID - 62}
)

// testUniverse is every ID opRunner can produce.
var testUniverse = func() (ids []uint64) {
	for b := range 256 {
		ids = append(ids, idRegions[b>>6]+uint64(b&63))
	}
	return ids
}()

func newOpRunner(data []byte) *opRunner {
	return &opRunner{x: New(), m: newModel(), sets: map[byte]*ResourceSet{}, data: data}
}

func (r *opRunner) next() byte {
	if len(r.data) == 0 {
		return 0
	}
	b := r.data[0]
	r.data = r.data[1:]
	return b
}

func (r *opRunner) id() uint64 { b := r.next(); return idRegions[b>>6] + uint64(b&63) }

// jobID mostly picks an indexed job, so moves and selections hit something.
func (r *opRunner) jobID() uint64 {
	if b := r.next(); b < 0xc0 && len(r.m.jobs) > 0 {
		ids := r.m.ids()
		return ids[int(b)%len(ids)]
	}
	return r.id()
}

func (r *opRunner) jobIDs() []uint64 {
	ids := make([]uint64, r.next()%8)
	for i := range ids {
		ids[i] = r.jobID()
	}
	return ids
}

// target mostly picks a legal next state for job id.
func (r *opRunner) target(id uint64) State {
	b := r.next()
	if j, ok := r.m.jobs[id]; ok && b < 0xc0 {
		var next []State
		for _, s := range AllStates() {
			if CanTransition(j.state, s) {
				next = append(next, s)
			}
		}
		if len(next) > 0 {
			return next[int(b)%len(next)]
		}
	}
	return State(b % (numStates + 1))
}

func (r *opRunner) group() string {
	if b := r.next(); b != 0xff {
		return testGroups[b%4]
	}
	return ""
}

// names decodes a resource list: bits 0-3 pick resources, bit 4 repeats one, bit 5 reverses
// the order, 0xff is an invalid empty name.
func (r *opRunner) names() []string {
	b := r.next()
	if b == 0xff {
		return []string{""}
	}
	var names []string
	for i, n := range testResources {
		if b&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	if b&0x10 != 0 && len(names) > 0 {
		names = append(names, names[0])
	}
	if b&0x20 != 0 {
		slices.Reverse(names)
	}
	return names
}

func (r *opRunner) state() State { return State(r.next() % (numStates + 1)) }

// held decodes a pool's resources: bits 0-3 pick resources, bit 4 adds one no job names.
func (r *opRunner) held() (*ResourceSet, map[string]bool) {
	b := r.next() & 0x1f
	held := map[string]bool{}
	var names []string
	for i, n := range testResources {
		if b&(1<<i) != 0 {
			names = append(names, n)
			held[n] = true
		}
	}
	if b&0x10 != 0 {
		names = append(names, "r9")
	}
	w, ok := r.sets[b]
	if !ok {
		w = NewResourceSet(names...)
		r.sets[b] = w
	}
	return w, held
}

// run applies operations until the input is used up, checking results as it goes and the
// whole index every checkEvery operations and at the end.
func (r *opRunner) run(checkEvery int) error {
	for n := 1; len(r.data) > 0; n++ {
		if err := r.step(); err != nil {
			return fmt.Errorf("%w\nafter %s", err, r.ops)
		}
		if n%checkEvery == 0 {
			if err := r.check(); err != nil {
				return fmt.Errorf("%w\nafter %s", err, r.ops)
			}
		}
	}
	if err := r.check(); err != nil {
		return fmt.Errorf("%w\nafter %s", err, r.ops)
	}
	return nil
}

func (r *opRunner) check() error {
	if err := r.x.checkInvariants(); err != nil {
		return err
	}
	return r.m.compare(r.x, testUniverse)
}

func (r *opRunner) log(format string, args ...any) {
	r.ops = append(r.ops, fmt.Sprintf(format, args...))
}

func (r *opRunner) step() error {
	switch op := r.next() % 12; op {
	case 0, 1, 2:
		id, g, req, pref := r.id(), r.group(), r.names(), r.names()
		st := Pending
		if op == 2 {
			st = r.state()
		}
		r.log("AddState(%d,%q,%q,%q,%s)", id, g, req, pref, st)
		return sameErr(r.x.AddState(id, g, req, pref, st), r.m.add(id, g, req, pref, st))
	case 3, 4:
		id := r.jobID()
		to := r.target(id)
		r.log("Move(%d,%s)", id, to)
		got, gerr := r.x.Move(id, to)
		want, werr := r.m.move(id, to)
		if err := sameErr(gerr, werr); err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("Move returned from=%s, model %s", got, want)
		}
	case 5:
		ids := r.jobIDs()
		to := r.state()
		if len(ids) > 0 {
			to = r.target(ids[0])
		}
		r.log("MoveMany(%v,%s)", ids, to)
		return sameErr(r.x.MoveMany(ids, to), r.m.moveMany(ids, to))
	case 6:
		g := r.group()
		r.log("Forget(%q)", g)
		got, gerr := r.x.Forget(g)
		want, werr := r.m.forget(g)
		if err := sameErr(gerr, werr); err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("Forget dropped %d, model %d", got, want)
		}
	case 7:
		w, held := r.held()
		cands := r.jobIDs()
		r.log("Select(%v,%v)", w.Names(), cands)
		return sameSelection(r.x.Select(w, cands))(r.m.selectFrom(held, cands))
	case 8:
		w, held := r.held()
		r.log("SelectAny(%v)", w.Names())
		return sameSelection(r.x.SelectAny(w))(r.m.selectAny(held))
	case 9:
		_, held := r.held()
		cands := r.jobIDs()
		names := make([]string, 0, len(held))
		for n := range held {
			names = append(names, n)
		}
		w := r.x.Compile(names)
		r.log("Compile(%v).Select(%v)", w.Names(), cands)
		return sameSelection(r.x.Select(w, cands))(r.m.selectFrom(held, cands))
	case 10:
		id, req, pref, st := r.id(), r.names(), r.names(), r.state()
		r.log("AddAlone(%d,%q,%q,%s)", id, req, pref, st)
		return sameErr(r.x.AddAlone(id, req, pref, st), r.m.addAlone(id, req, pref, st))
	case 11:
		id := r.jobID()
		r.log("ForgetJob(%d)", id)
		return sameErr(r.x.ForgetJob(id), r.m.forgetJob(id))
	}
	return nil
}

var sentinels = []error{
	ErrIllegalTransition, ErrUnknownJob, ErrDuplicateJob, ErrInvalidJob, ErrInvalidState,
	ErrUnknownGroup, ErrGroupActive,
}

// sameErr checks that got is the error the model expects: nil, or wrapping the same sentinels,
// and for a TransitionError naming the same job and states.
func sameErr(got, want error) error {
	if (got == nil) != (want == nil) {
		return fmt.Errorf("error %v, model %v", got, want)
	}
	for _, s := range sentinels {
		if errors.Is(got, s) != errors.Is(want, s) {
			return fmt.Errorf("error %v, model %v", got, want)
		}
	}
	var gt, wt *TransitionError
	if errors.As(want, &wt) && (!errors.As(got, &gt) || *gt != *wt) {
		return fmt.Errorf("error %v, model %v", got, want)
	}
	return nil
}

func sameSelection(id uint64, m Match, ok bool) func(uint64, Match, bool) error {
	return func(wid uint64, wm Match, wok bool) error {
		if id != wid || m != wm || ok != wok {
			return fmt.Errorf("selected %d,%s,%v, model %d,%s,%v", id, m, ok, wid, wm, wok)
		}
		return nil
	}
}
