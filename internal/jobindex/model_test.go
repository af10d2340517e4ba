package jobindex

import (
	"fmt"
	"maps"
	"slices"
)

// model is the naive reference the property and fuzz tests compare the index with: a map of
// jobs, every answer computed by brute force.
type model struct {
	jobs   map[uint64]*modelJob
	sorted []uint64 // job IDs ascending; nil when stale
}

func (m *model) ids() []uint64 {
	if m.sorted == nil {
		m.sorted = slices.Sorted(maps.Keys(m.jobs))
	}
	return m.sorted
}

type modelJob struct {
	group           string // "" for a job added alone
	require, prefer []string
	state           State
}

func newModel() *model { return &model{jobs: make(map[uint64]*modelJob)} }

func (m *model) add(id uint64, group string, require, prefer []string, st State) error {
	if err := checkJob(id, group, require, prefer); err != nil {
		return err
	}
	return m.put(id, group, require, prefer, st)
}

// put adds a job whose names are checked.
func (m *model) put(id uint64, group string, require, prefer []string, st State) error {
	if !st.valid() {
		return ErrInvalidState
	}
	if _, ok := m.jobs[id]; ok {
		return ErrDuplicateJob
	}
	m.jobs[id] = &modelJob{group, slices.Clone(require), slices.Clone(prefer), st}
	m.sorted = nil
	return nil
}

// addAlone is AddAlone: a job that is a group of its own, in no group's counts.
func (m *model) addAlone(id uint64, require, prefer []string, st State) error {
	if err := checkJob(id, "alone", require, prefer); err != nil {
		return err
	}
	return m.put(id, "", require, prefer, st)
}

func (m *model) forgetJob(id uint64) error {
	j, ok := m.jobs[id]
	switch {
	case !ok:
		return ErrUnknownJob
	case j.group != "":
		return ErrInvalidJob
	case j.state == Pending || j.state == Running || j.state == RetryWait || j.state == Delayed:
		return ErrGroupActive
	}
	delete(m.jobs, id)
	m.sorted = nil
	return nil
}

func (m *model) move(id uint64, to State) (State, error) {
	if !to.valid() {
		return 0, ErrInvalidState
	}
	j, ok := m.jobs[id]
	if !ok {
		return 0, ErrUnknownJob
	}
	if !CanTransition(j.state, to) {
		return j.state, &TransitionError{ID: id, From: j.state, To: to}
	}
	from := j.state
	j.state = to
	return from, nil
}

func (m *model) moveMany(ids []uint64, to State) error {
	if !to.valid() {
		return ErrInvalidState
	}
	seen := map[uint64]bool{}
	for _, id := range ids {
		j, ok := m.jobs[id]
		if !ok {
			return ErrUnknownJob
		}
		if !CanTransition(j.state, to) {
			return &TransitionError{ID: id, From: j.state, To: to}
		}
		if seen[id] {
			return &TransitionError{ID: id, From: to, To: to}
		}
		seen[id] = true
	}
	for _, id := range ids {
		m.jobs[id].state = to
	}
	return nil
}

func (m *model) forget(group string) (uint64, error) {
	var ids []uint64
	for id, j := range m.jobs {
		if j.group == group && group != "" {
			if j.state == Pending || j.state == Running || j.state == RetryWait || j.state == Delayed {
				return 0, ErrGroupActive
			}
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return 0, ErrUnknownGroup
	}
	for _, id := range ids {
		delete(m.jobs, id)
	}
	m.sorted = nil
	return uint64(len(ids)), nil
}

func (m *model) state(id uint64) (State, bool) {
	if j, ok := m.jobs[id]; ok {
		return j.state, true
	}
	return 0, false
}

func (m *model) counts(keep func(*modelJob) bool) Counts {
	var c counts
	for _, j := range m.jobs {
		if keep(j) {
			c[j.state]++
		}
	}
	return c.export()
}

func (m *model) groups() map[string]Counts {
	c := map[string]counts{}
	for _, j := range m.jobs {
		if j.group == "" {
			continue // alone: in no group's counts
		}
		g := c[j.group]
		g[j.state]++
		c[j.group] = g
	}
	out := make(map[string]Counts, len(c))
	for g, v := range c {
		out[g] = v.export()
	}
	return out
}

func (m *model) resources() map[string]ResourceCounts {
	type both struct{ req, pref counts }
	c := map[string]*both{}
	get := func(r string) *both {
		if c[r] == nil {
			c[r] = &both{}
		}
		return c[r]
	}
	for _, j := range m.jobs {
		// A job naming a resource twice counts once.
		for _, r := range uniq(j.require) {
			get(r).req[j.state]++
		}
		for _, r := range uniq(j.prefer) {
			get(r).pref[j.state]++
		}
	}
	out := make(map[string]ResourceCounts, len(c))
	for r, v := range c {
		out[r] = ResourceCounts{Required: v.req.export(), Preferred: v.pref.export()}
	}
	return out
}

func uniq(names []string) []string {
	return slices.Compact(slices.Sorted(slices.Values(names)))
}

func (m *model) groupJobs(group string, s State) []uint64 {
	var ids []uint64
	for _, id := range m.ids() {
		if j := m.jobs[id]; j.group == group && j.state == s {
			ids = append(ids, id)
		}
	}
	return ids
}

// match is the selection rule spelled out: how a pending job suits a pool holding held.
func (j *modelJob) match(held map[string]bool) Match {
	for _, r := range j.require {
		if !held[r] {
			return MatchNone
		}
	}
	for _, r := range j.prefer {
		if held[r] {
			return MatchPreferred
		}
	}
	if len(j.require) > 0 {
		return MatchRequired
	}
	return MatchFallback
}

func (m *model) selectFrom(held map[string]bool, candidates []uint64) (uint64, Match, bool) {
	var fb uint64
	var fbm Match
	for _, id := range candidates {
		j, ok := m.jobs[id]
		if !ok || j.state != Pending {
			continue
		}
		switch v := j.match(held); v {
		case MatchPreferred:
			return id, v, true
		case MatchRequired, MatchFallback:
			if fbm == MatchNone {
				fb, fbm = id, v
			}
		}
	}
	return fb, fbm, fbm != MatchNone
}

func (m *model) selectAny(held map[string]bool) (uint64, Match, bool) {
	return m.selectFrom(held, m.ids())
}

// compare reports the first difference between x and m over the IDs in universe.
func (m *model) compare(x *Index, universe []uint64) error {
	if got, want := x.Len(), uint64(len(m.jobs)); got != want {
		return fmt.Errorf("Len=%d, model %d", got, want)
	}
	for _, id := range universe {
		gs, gok := x.State(id)
		ws, wok := m.state(id)
		if gs != ws || gok != wok {
			return fmt.Errorf("State(%d)=%v,%v, model %v,%v", id, gs, gok, ws, wok)
		}
		var wg string
		if j := m.jobs[id]; j != nil {
			wg = j.group
		}
		if g, ok := x.GroupOf(id); g != wg || ok != wok {
			return fmt.Errorf("GroupOf(%d)=%q,%v, model %q,%v", id, g, ok, wg, wok)
		}
	}
	if got, want := x.Counts(), m.counts(func(*modelJob) bool { return true }); got != want {
		return fmt.Errorf("Counts=%+v, model %+v", got, want)
	}
	for s := range State(numStates) {
		if got, want := x.Count(s), x.Counts().Get(s); got != want {
			return fmt.Errorf("Count(%s)=%d, Counts %d", s, got, want)
		}
	}
	wantGroups := m.groups()
	if got := maps.Collect(x.Groups()); !maps.Equal(got, wantGroups) {
		return fmt.Errorf("Groups=%v, model %v", got, wantGroups)
	}
	for g, want := range wantGroups {
		if got, ok := x.GroupCounts(g); !ok || got != want {
			return fmt.Errorf("GroupCounts(%q)=%+v,%v, model %+v", g, got, ok, want)
		}
		for s := range State(numStates) {
			if got, want := slices.Collect(x.GroupJobs(g, s)), m.groupJobs(g, s); !slices.Equal(got, want) {
				return fmt.Errorf("GroupJobs(%q, %s)=%v, model %v", g, s, got, want)
			}
		}
	}
	if _, ok := x.GroupCounts("no such group"); ok {
		return fmt.Errorf("GroupCounts of an unknown group reports ok")
	}
	wantResources := m.resources()
	if got := maps.Collect(x.Resources()); !maps.Equal(got, wantResources) {
		return fmt.Errorf("Resources=%v, model %v", got, wantResources)
	}
	for r, want := range wantResources {
		if got := x.ResourceCounts(r); got != want {
			return fmt.Errorf("ResourceCounts(%q)=%+v, model %+v", r, got, want)
		}
	}
	return nil
}
