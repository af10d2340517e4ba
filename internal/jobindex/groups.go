package jobindex

import (
	"fmt"
	"iter"
	"math"
)

// group is what the index keeps per group: counters, not a bitmap. A group's members are
// found through the catalog, whose spans already record them compactly; a roaring bitmap per
// group would cost 150-260 bytes of container overhead each, more than the rest of the index
// for typical groups of ~100 jobs.
type group struct {
	name   string // "" marks a free slot
	runs   [2]idRange
	counts counts
}

// aloneGroup is the catalog's group for a job added with AddAlone: a group of its own, with no
// record in groups.
const aloneGroup = math.MaxUint32

// PackedIDs is where the second run of job IDs starts: Weave's jobs stored in packs
// (wire.PackedJobID). A group keeps its lowest and highest ID in each run apart, so a group with
// jobs in both (keyed jobs, each in a message of its own, and packed ones) reads only its own
// stretches of the catalog, not every block between its first job and its last.
const PackedIDs = 1 << 52

// idRange is the lowest and highest job ID of a group in one run of IDs: the catalog stretch
// holding those jobs. first is noJob while the group has none there.
type idRange struct{ first, last uint64 }

// runOf is the run of IDs id belongs to.
func runOf(id uint64) int {
	if id >= PackedIDs {
		return 1
	}
	return 0
}

// scanRuns calls fn for the catalog stretch of each run the group has jobs in, in ID order.
func (g *group) scanRuns(fn func(first, last uint64) bool) {
	for _, r := range g.runs {
		if r.first != noJob && !fn(r.first, r.last) {
			return
		}
	}
}

func (x *Index) internGroup(name string) uint32 {
	if x.w.groupOK && x.w.group == name {
		return x.w.groupID
	}
	gid, ok := x.groupIDs[name]
	if !ok {
		gid = x.groupPool.get()
		if gid == uint32(len(x.groups)) {
			x.groups = append(x.groups, group{})
		}
		x.groups[gid] = group{name: name, runs: [2]idRange{{first: noJob}, {first: noJob}}}
		x.groupIDs[name] = gid
	}
	x.w.group, x.w.groupID, x.w.groupOK = name, gid, true
	return gid
}

// GroupCounts returns the number of jobs of group in each state, in O(1), and false if the
// index holds no job of group.
func (x *Index) GroupCounts(group string) (Counts, bool) {
	gid, ok := x.groupIDs[group]
	if !ok {
		return Counts{}, false
	}
	return x.groups[gid].counts.export(), true
}

// Groups yields every group with its counts, in no particular order. The loop body may read and
// change the index; a group added or forgotten by the body may or may not be yielded.
func (x *Index) Groups() iter.Seq2[string, Counts] {
	return func(yield func(string, Counts) bool) {
		for i := 0; i < len(x.groups); i++ { // len read each time: the body may add groups
			if g := &x.groups[i]; g.name != "" && !yield(g.name, g.counts.export()) {
				return
			}
		}
	}
}

// GroupJobs yields the IDs of group's jobs in state s, in ascending order. The cost is
// proportional to the catalog spans between the group's first and last job. The loop body must
// not change the index (collect the IDs first to move them, as with slices.Collect).
func (x *Index) GroupJobs(group string, s State) iter.Seq[uint64] {
	return func(yield func(uint64) bool) {
		if !s.valid() {
			return
		}
		gid, ok := x.groupIDs[group]
		if !ok || x.groups[gid].counts[s] == 0 {
			return
		}
		g := &x.groups[gid]
		it := x.states[s].Iterator()
		g.scanRuns(func(first, last uint64) bool {
			more := true
			x.catalog.scan(gid, first, last, func(lo, hi uint64) bool {
				it.AdvanceIfNeeded(lo)
				for it.HasNext() && it.PeekNext() <= hi {
					if !yield(it.Next()) {
						more = false
						return false
					}
				}
				return true
			})
			return more
		})
	}
}

// GroupOf returns the name of job id's group, "" for a job added alone ([Index.AddAlone]), and
// false if the job is not in the index. It costs a catalog look-up, O(log spans).
func (x *Index) GroupOf(id uint64) (string, bool) {
	gid, _, ok := x.catalog.lookup(id)
	switch {
	case !ok:
		return "", false
	case gid == aloneGroup:
		return "", true
	}
	return x.groups[gid].name, true
}

// ForgetJob drops job id, added alone ([Index.AddAlone]) and ended (done, failed or canceled),
// from the index: what [Index.Forget] is for a group. It returns an error wrapping
// [ErrUnknownJob] for a job not in the index, [ErrInvalidJob] for a job of a group, and
// [ErrGroupActive] for a job pending, running, retrying or delayed. A resource or profile used
// only by the job is released too.
func (x *Index) ForgetJob(id uint64) error {
	gid, pid, ok := x.catalog.lookup(id)
	switch {
	case !ok:
		return fmt.Errorf("%w %d", ErrUnknownJob, id)
	case gid != aloneGroup:
		return fmt.Errorf("%w %d: it belongs to group %q (Forget the group)", ErrInvalidJob, id, x.groups[gid].name)
	}
	st, _ := x.stateOf(id)
	var c counts
	if c[st]++; c.active() > 0 {
		return fmt.Errorf("%w: job %d is %s", ErrGroupActive, id, st)
	}
	x.states[st].Remove(id)
	x.counts[st]--
	x.catalog.remove(id)
	p := &x.profiles[pid]
	p.counts[st]--
	if p.jobs--; p.jobs == 0 && pid != 0 {
		x.releaseProfile(pid)
	}
	return nil
}

// Forget drops every job of group name from the index, for retention clean-up once the group has
// finished, and returns how many it dropped. A group with pending, running or retrying jobs is
// refused with [ErrGroupActive]: cancel them first. Resource and profile entries used only by
// the group are released too.
func (x *Index) Forget(name string) (uint64, error) {
	gid, ok := x.groupIDs[name]
	if !ok {
		return 0, fmt.Errorf("%w %q", ErrUnknownGroup, name)
	}
	g := &x.groups[gid]
	if n := g.counts.active(); n > 0 {
		return 0, fmt.Errorf("%w: %q has %d pending, running, retrying or delayed", ErrGroupActive, name, n)
	}
	// A finished group is usually in one state (all done): then every span is in that state
	// and needs no per-state counting.
	only, single := State(0), 0
	for s, n := range g.counts {
		if n > 0 {
			only, single = State(s), single+1
		}
	}
	var touched []uint32
	remove := func(lo, hi uint64, pid uint32) {
		p := &x.profiles[pid]
		if single == 1 {
			x.states[only].RemoveRange(lo, hi+1)
			p.counts[only] -= hi - lo + 1
		} else {
			r := x.w.bitmap
			r.Clear()
			r.AddRange(lo, hi+1)
			for s, n := range g.counts {
				if n > 0 {
					p.counts[s] -= x.states[s].AndCardinality(r)
					x.states[s].RemoveRange(lo, hi+1)
				}
			}
		}
		p.jobs -= hi - lo + 1
		if p.jobs == 0 && pid != 0 {
			touched = append(touched, pid)
		}
	}
	g.scanRuns(func(first, last uint64) bool {
		x.catalog.removeGroup(gid, first, last, remove)
		return true
	})
	n := g.counts.total()
	x.counts.sub(&g.counts)
	delete(x.groupIDs, name)
	*g = group{}
	x.groupPool.put(gid)
	if x.w.groupOK && x.w.groupID == gid {
		x.w.groupOK = false
	}
	for _, pid := range touched {
		x.releaseProfile(pid)
	}
	return n, nil
}

// FirstPending returns the lowest pending job at or above from, and false if there is none. The
// cost is a search of the pending bitmap.
func (x *Index) FirstPending(from uint64) (uint64, bool) {
	it := x.states[Pending].Iterator()
	it.AdvanceIfNeeded(from)
	if !it.HasNext() {
		return 0, false
	}
	return it.Next(), true
}
