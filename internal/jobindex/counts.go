package jobindex

// Counts is the number of jobs in each state.
type Counts struct {
	Pending   uint64 `json:"pending"`
	Running   uint64 `json:"running"`
	RetryWait uint64 `json:"retrywait"`
	Done      uint64 `json:"done"`
	Failed    uint64 `json:"failed"`
	Canceled  uint64 `json:"canceled"`
	Delayed   uint64 `json:"delayed"`
}

// Get returns the count for state s (0 for an invalid state).
func (c Counts) Get(s State) uint64 {
	if !s.valid() {
		return 0
	}
	return c.array()[s]
}

// Total returns the number of jobs in all states.
func (c Counts) Total() uint64 {
	var n uint64
	for _, v := range c.array() {
		n += v
	}
	return n
}

func (c Counts) array() counts {
	return counts{c.Pending, c.Running, c.RetryWait, c.Done, c.Failed, c.Canceled, c.Delayed}
}

// counts is the internal form of Counts: indexable by State, so updates on the hot path are
// two array writes.
type counts [numStates]uint64

func (c *counts) move(from, to State) {
	c[from]--
	c[to]++
}

func (c *counts) add(o *counts) {
	for s := range c {
		c[s] += o[s]
	}
}

func (c *counts) sub(o *counts) {
	for s := range c {
		c[s] -= o[s]
	}
}

func (c *counts) total() uint64 {
	var n uint64
	for _, v := range c {
		n += v
	}
	return n
}

// active is the number of jobs that may still change state on their own: pending, running,
// waiting for a retry or for their time.
func (c *counts) active() uint64 { return c[Pending] + c[Running] + c[RetryWait] + c[Delayed] }

func (c *counts) export() Counts {
	return Counts{c[Pending], c[Running], c[RetryWait], c[Done], c[Failed], c[Canceled], c[Delayed]}
}
