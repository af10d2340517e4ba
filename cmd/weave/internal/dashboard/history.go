package dashboard

import (
	"cmp"
	"slices"
	"time"
)

// sample is what the history keeps of one status.
type sample struct {
	at       time.Time
	epoch    uint64
	jobs     map[string]uint64
	admitted uint64         // totals since the coordinator took over: they restart with a new epoch
	ended    uint64         // done + failed + canceled
	inFlight map[string]int // per open group
}

func sampleOf(at time.Time, st *Status) sample {
	s := sample{
		at:       at,
		epoch:    st.Epoch,
		jobs:     st.Jobs,
		admitted: st.Totals.Admitted,
		ended:    st.Totals.Done + st.Totals.Failed + st.Totals.Canceled,
		inFlight: make(map[string]int, len(st.Groups)),
	}
	for _, g := range st.Groups {
		if g.InFlight > 0 {
			s.inFlight[g.ID] = g.InFlight
		}
	}
	return s
}

// history is a ring of the latest samples, oldest first. The poller owns it (Server.poll); the
// handlers read only the snapshots it renders.
type history struct {
	keep    time.Duration
	samples []sample
}

func (h *history) add(s sample) {
	h.samples = append(h.samples, s)
	cut := 0
	for cut < len(h.samples) && s.at.Sub(h.samples[cut].at) > h.keep {
		cut++
	}
	h.samples = slices.Delete(h.samples, 0, cut)
}

// rateWindow is the span the rates are averaged over.
const rateWindow = 5 * time.Second

// maxShareGroups bounds the groups drawn apart in the fairness chart; the others are summed.
const maxShareGroups = 8

// series is the history as the page draws it: one value per sample in every slice.
type series struct {
	Times []int64 `json:"times"` // Unix milliseconds
	// States counts the jobs per state (pending, running, retrywait); the ended states grow
	// for ever and are shown as rates instead.
	States map[string][]uint64 `json:"states"`
	// RateIn and RateOut are jobs admitted and ended per second over the rateWindow before each
	// sample (bursts of a group's publication smoothed); null for the first sample and for one
	// right after a change of coordinator (its totals restart).
	RateIn  []*float64 `json:"rate_in"`
	RateOut []*float64 `json:"rate_out"`
	// Shares are the in-flight jobs of at most maxShareGroups groups (those in flight now, then
	// those that held the most over the window), and of all the others summed as "(other
	// groups)".
	Shares []share `json:"shares"`
}

type share struct {
	Group    string `json:"group"`
	InFlight []int  `json:"in_flight"`
}

// otherGroups names the sum of the groups not drawn apart.
const otherGroups = "(other groups)"

func (h *history) series() series {
	n := len(h.samples)
	out := series{
		Times:   make([]int64, n),
		States:  map[string][]uint64{},
		RateIn:  make([]*float64, n),
		RateOut: make([]*float64, n),
	}
	for _, st := range []string{"pending", "running", "retrywait"} {
		out.States[st] = make([]uint64, n)
	}
	// Groups drawn apart: those in flight now first, then those that held the most, recent
	// samples weighing more (a group that ended long ago matters less than one just ended).
	held := map[string]float64{}
	for i, s := range h.samples {
		out.Times[i] = s.at.UnixMilli()
		for st, v := range out.States {
			v[i] = s.jobs[st]
		}
		// The oldest sample within the window, of the same coordinator's totals.
		j := i
		for j > 0 {
			p := h.samples[j-1]
			if s.at.Sub(p.at) > rateWindow || p.epoch != s.epoch || p.admitted > s.admitted || p.ended > s.ended {
				break
			}
			j--
		}
		if p := h.samples[j]; j < i && s.at.After(p.at) {
			dt := s.at.Sub(p.at).Seconds()
			in, o := float64(s.admitted-p.admitted)/dt, float64(s.ended-p.ended)/dt
			out.RateIn[i], out.RateOut[i] = &in, &o
		}
		for g, f := range s.inFlight {
			held[g] += float64(f) * float64(i+1) / float64(n)
		}
	}
	groups := make([]string, 0, len(held))
	for g := range held {
		groups = append(groups, g)
	}
	now := map[string]int{}
	if n > 0 {
		now = h.samples[n-1].inFlight
	}
	slices.SortFunc(groups, func(a, b string) int {
		return cmp.Or(cmp.Compare(min(now[b], 1), min(now[a], 1)), cmp.Compare(held[b], held[a]), cmp.Compare(a, b))
	})
	apart := groups[:min(len(groups), maxShareGroups)]
	for _, g := range apart {
		sh := share{Group: g, InFlight: make([]int, n)}
		for i, s := range h.samples {
			sh.InFlight[i] = s.inFlight[g]
		}
		out.Shares = append(out.Shares, sh)
	}
	if len(groups) > len(apart) {
		sh := share{Group: otherGroups, InFlight: make([]int, n)}
		for i, s := range h.samples {
			for g, f := range s.inFlight {
				if !slices.Contains(apart, g) {
					sh.InFlight[i] += f
				}
			}
		}
		out.Shares = append(out.Shares, sh)
	}
	return out
}
