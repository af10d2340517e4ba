package jobindex

import (
	"math/rand/v2"
	"strconv"
)

// workload generates a realistic coordinator backlog for benchmarks and the memory report.
//
// Groups of 50..150 jobs (about 100 on average) are published by a few concurrent producers,
// so a group's jobs get nearby but interleaved stream sequences, and each group's open and
// seal messages use sequences too. 30% of groups require one of the resources, 40% prefer
// one, 30% name none. Jobs are processed roughly in stream order: the oldest groups are done
// (with a sprinkling of failed and canceled jobs), a window of active groups has a done
// prefix, ten in flight and a pending tail, and the latest groups are entirely pending. With
// the defaults that is about 89% done, 1% running and 10% pending.
type workload struct {
	groups    int // number of groups; jobs ≈ 100 × groups
	resources int
	producers int // concurrent publishers interleaving their groups
	seed      uint64
}

// genJob is one generated job. require and prefer are shared by a group's jobs.
type genJob struct {
	id              uint64
	group           string
	require, prefer []string
	state           State
}

// The processing frontier: the last lateShare of groups are untouched, the activeShare before
// them are in progress with inFlight jobs each running or retrying.
const (
	activeShare = 0.10
	lateShare   = 0.055
	inFlight    = 10 // running (and retrying) jobs per active group
)

type producer struct {
	rank, size, pos int // group admission rank, jobs in group, next job (-1: open, size: seal)
	name            string
	require, prefer []string
	doneUpTo        int // active groups: jobs below this index are done
}

// each calls fn for every job in ascending ID order.
func (w workload) each(fn func(j *genJob)) {
	rng := rand.New(rand.NewPCG(w.seed, 0x5eed))
	resources := make([]string, w.resources)
	for i := range resources {
		resources[i] = "res-" + strconv.Itoa(i)
	}
	lateFrom := w.groups - int(float64(w.groups)*lateShare)
	activeFrom := lateFrom - int(float64(w.groups)*activeShare)
	next := 0 // next group rank to open
	open := func(p *producer) bool {
		if next >= w.groups {
			return false
		}
		*p = producer{rank: next, size: 50 + rng.IntN(101), pos: -1}
		p.name = "group-" + strconv.Itoa(next)
		switch r := rng.IntN(10); {
		case r < 3:
			p.require = []string{resources[rng.IntN(len(resources))]}
		case r < 7:
			p.prefer = []string{resources[rng.IntN(len(resources))]}
		}
		if p.rank >= activeFrom && p.rank < lateFrom {
			p.doneUpTo = rng.IntN(p.size - inFlight + 1)
		}
		next++
		return true
	}
	live := make([]*producer, 0, w.producers)
	for range w.producers {
		p := &producer{}
		if open(p) {
			live = append(live, p)
		}
	}
	var seq uint64
	var j genJob
	for len(live) > 0 {
		k := rng.IntN(len(live))
		p := live[k]
		for burst := 1 + rng.IntN(64); burst > 0; burst-- {
			seq++
			switch {
			case p.pos < 0: // open message
			case p.pos < p.size:
				j = genJob{id: seq, group: p.name, require: p.require, prefer: p.prefer, state: p.state(seq, activeFrom, lateFrom)}
				fn(&j)
			default: // seal message; the producer takes the next group
				if !open(p) {
					live = append(live[:k], live[k+1:]...)
					burst = 0
				}
				continue
			}
			p.pos++
		}
	}
}

func (p *producer) state(id uint64, activeFrom, lateFrom int) State {
	switch {
	case p.rank >= lateFrom:
		return Pending
	case p.rank >= activeFrom:
		switch i := p.pos; {
		case i < p.doneUpTo:
			return Done
		case i == p.doneUpTo:
			return RetryWait
		case i < p.doneUpTo+inFlight:
			return Running
		default:
			return Pending
		}
	}
	switch h := id * 0x9e3779b97f4a7c15 >> 40 % 10000; {
	case h < 5:
		return Failed
	case h < 6:
		return Canceled
	}
	return Done
}

// build returns an index holding the workload, built with AddState as a journal replay would.
func (w workload) build() *Index {
	x := New()
	w.each(func(j *genJob) {
		if err := x.AddState(j.id, j.group, j.require, j.prefer, j.state); err != nil {
			panic(err)
		}
	})
	return x
}

// defaultWorkload is the benchmark workload over 1,000 resources with the given number of
// groups; 100,000 groups make the 10-million-job target.
func defaultWorkload(groups int) workload {
	return workload{groups: groups, resources: 1000, producers: 4, seed: 1}
}
