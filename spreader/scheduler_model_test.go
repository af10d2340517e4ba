package spreader_test

import (
	"slices"

	"github.com/weavejobs/weave/spreader"
)

// model is a plain reference implementation of the Scheduler's semantics. It
// uses slices and linear scans, and follows the spec as directly as possible.
// It is also the O(slots) scan baseline in the benchmarks.
type model struct {
	policy   spreader.Policy
	maxGroup int
	feeders  int
	slots    []*modelGroup // nil: vacant
	line     []*modelGroup // waiting groups in arrival order
	groups   map[int]*modelGroup
	rotation int
}

type modelGroup struct {
	key      int
	jobs     []int
	sealed   bool
	inFlight int
	draining bool
}

func newModel(cfg spreader.Config) *model {
	return &model{
		policy:   cfg.Policy,
		maxGroup: cfg.MaxInFlightPerGroup,
		feeders:  cfg.Feeders,
		slots:    make([]*modelGroup, cfg.Feeders),
		groups:   map[int]*modelGroup{},
	}
}

func (m *model) slotOf(g *modelGroup) int { return slices.Index(m.slots, g) }

func (m *model) AddGroup(k int) error {
	if m.groups[k] != nil {
		return spreader.ErrDuplicateGroup
	}
	m.groups[k] = &modelGroup{key: k} // idle until jobs are pushed
	return nil
}

// idle reports whether g is open with nothing queued: in no slot and not in the line.
func (m *model) idle(g *modelGroup) bool {
	return !g.draining && m.slotOf(g) < 0 && !slices.Contains(m.line, g)
}

// place gives g the lowest vacant slot, or a place at the back of the line.
func (m *model) place(g *modelGroup) {
	for i := range m.feeders {
		if m.slots[i] == nil {
			m.slots[i] = g
			return
		}
	}
	m.line = append(m.line, g)
}

func (m *model) open(k int) (*modelGroup, error) {
	g := m.groups[k]
	if g == nil {
		return nil, spreader.ErrUnknownGroup
	}
	if g.sealed {
		return nil, spreader.ErrSealed
	}
	return g, nil
}

func (m *model) Push(k int, jobs ...int) error {
	g, err := m.open(k)
	if err == nil {
		wasIdle := m.idle(g)
		g.jobs = append(g.jobs, jobs...)
		if wasIdle && len(g.jobs) > 0 {
			m.place(g)
		}
	}
	return err
}

func (m *model) Seal(k int) error {
	g, err := m.open(k)
	if err == nil {
		g.sealed = true
		if len(g.jobs) == 0 {
			m.retire(g)
		}
	}
	return err
}

// remove takes g out of its slot or the line.
func (m *model) remove(g *modelGroup) {
	if i := m.slotOf(g); i >= 0 {
		m.slots[i] = nil
		m.fill(i)
	}
	m.line = slices.DeleteFunc(m.line, func(w *modelGroup) bool { return w == g })
}

func (m *model) retire(g *modelGroup) {
	m.remove(g)
	if g.inFlight > 0 {
		g.draining = true
	} else {
		delete(m.groups, g.key)
	}
}

func (m *model) fill(i int) {
	switch {
	case i >= m.feeders:
		for len(m.slots) > m.feeders && m.slots[len(m.slots)-1] == nil {
			m.slots = m.slots[:len(m.slots)-1]
		}
	case len(m.line) > 0:
		m.slots[i], m.line = m.line[0], m.line[1:]
	}
}

func (m *model) Cancel(k int) []int {
	g := m.groups[k]
	if g == nil {
		return nil
	}
	m.remove(g)
	delete(m.groups, k)
	return g.jobs
}

func (m *model) Done(k int) {
	g := m.groups[k]
	if g == nil || g.inFlight == 0 {
		return
	}
	g.inFlight--
	if g.draining && g.inFlight == 0 {
		delete(m.groups, k)
	}
}

func (m *model) SetFeeders(n int) {
	n = max(n, 1)
	old := m.feeders
	m.feeders = n
	for i := old; i < n; i++ {
		if i == len(m.slots) {
			m.slots = append(m.slots, nil)
		}
		if m.slots[i] == nil {
			m.fill(i)
		}
	}
	m.fill(n) // closes vacant retiring slots when shrinking
}

func (m *model) offerable(g *modelGroup) bool {
	return g != nil && len(g.jobs) > 0 && (m.maxGroup == 0 || g.inFlight < m.maxGroup)
}

// cyclic returns the slot indexes in round-robin order from the rotation point.
func (m *model) cyclic() []int {
	n := len(m.slots)
	start := m.rotation
	if start >= n {
		start = 0
	}
	order := make([]int, n)
	for d := range n {
		order[d] = (start + d) % n
	}
	return order
}

// offers returns the offerable groups best first: by rank, then cyclically.
func (m *model) offers() []*modelGroup {
	var out []*modelGroup
	for _, i := range m.cyclic() {
		if m.offerable(m.slots[i]) {
			out = append(out, m.slots[i])
		}
	}
	if m.policy == spreader.LeastInFlight {
		slices.SortStableFunc(out, func(a, b *modelGroup) int { return a.inFlight - b.inFlight })
	}
	return out
}

// Next is a single linear scan from the rotation point, keeping the first
// best group.
func (m *model) Next() (int, int, bool) {
	n := len(m.slots)
	start := m.rotation
	if start >= n {
		start = 0
	}
	var best *modelGroup
	for d := range n {
		g := m.slots[(start+d)%n]
		if !m.offerable(g) {
			continue
		}
		if best == nil || m.policy == spreader.LeastInFlight && g.inFlight < best.inFlight {
			best = g
			if m.policy == spreader.RoundRobin {
				break
			}
		}
	}
	if best == nil {
		return 0, 0, false
	}
	return best.key, m.take(best), true
}

func (m *model) Take(k int) (int, bool) {
	g := m.groups[k]
	if g == nil || m.slotOf(g) < 0 || !m.offerable(g) {
		return 0, false
	}
	return m.take(g), true
}

func (m *model) take(g *modelGroup) int {
	job := g.jobs[0]
	g.jobs = g.jobs[1:]
	g.inFlight++
	m.rotation = m.slotOf(g) + 1
	switch {
	case len(g.jobs) > 0:
	case g.sealed:
		m.retire(g)
	default:
		m.remove(g) // idle until more jobs come
	}
	return job
}

func (m *model) InFlight(k int) int {
	if g := m.groups[k]; g != nil {
		return g.inFlight
	}
	return 0
}

func (m *model) Queued(k int) int {
	if g := m.groups[k]; g != nil {
		return len(g.jobs)
	}
	return 0
}

func (m *model) Active() int {
	n := 0
	for _, g := range m.slots {
		if g != nil {
			n++
		}
	}
	return n
}

func (m *model) Waiting() int { return len(m.line) }
