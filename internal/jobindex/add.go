package jobindex

import "fmt"

// Add indexes a new pending job of group. require lists the resources a worker must hold to run
// it; prefer lists resources that make a worker a better fit (see [Index.Select]). Names are
// case-sensitive; duplicates are ignored. The slices are not retained.
//
// Add returns an error wrapping [ErrDuplicateJob] if id is already indexed, and [ErrInvalidJob]
// if id is above [MaxID] or a name is empty.
func (x *Index) Add(id uint64, group string, require, prefer []string) error {
	return x.AddState(id, group, require, prefer, Pending)
}

// AddState is [Index.Add] for a job already in state st, for rebuilding an index by replaying a
// journal. It does not check how the job got there.
func (x *Index) AddState(id uint64, group string, require, prefer []string, st State) error {
	if err := checkJob(id, group, require, prefer); err != nil {
		return err
	}
	return x.add(id, group, require, prefer, st)
}

// AddAlone indexes job id, in state st, as a group of its own (in Weave, a single job): it has
// no group record, so it costs the index its state bit and its catalog entry, and consecutive
// jobs alone with the same resources share one span. Its group's counts are its state
// ([Index.State]); [Index.ForgetJob] drops it once it has ended. Errors are as for
// [Index.AddState].
func (x *Index) AddAlone(id uint64, require, prefer []string, st State) error {
	if err := checkJob(id, alone, require, prefer); err != nil {
		return err
	}
	return x.add(id, alone, require, prefer, st)
}

// alone is the group name AddAlone stands for in checkJob and add: never a valid name.
const alone = "\x00alone"

func (x *Index) add(id uint64, group string, require, prefer []string, st State) error {
	if !st.valid() {
		return fmt.Errorf("%w %d for job %d", ErrInvalidState, st, id)
	}
	if _, _, ok := x.catalog.lookup(id); ok {
		return fmt.Errorf("%w %d", ErrDuplicateJob, id)
	}
	gid := uint32(aloneGroup)
	if group != alone {
		gid = x.internGroup(group)
		g := &x.groups[gid]
		g.counts[st]++
		r := &g.runs[runOf(id)]
		r.first, r.last = min(r.first, id), max(r.last, id)
	}
	pid := x.internProfile(require, prefer)
	x.catalog.insert(id, gid, pid)
	x.states[st].Add(id)
	x.counts[st]++
	p := &x.profiles[pid]
	p.jobs++
	p.counts[st]++
	if st == Pending {
		x.addPending(pid, id)
	}
	return nil
}

func checkJob(id uint64, group string, require, prefer []string) error {
	if id > MaxID {
		return fmt.Errorf("%w %d: ID above MaxID", ErrInvalidJob, id)
	}
	if group == "" {
		return fmt.Errorf("%w %d: empty group", ErrInvalidJob, id)
	}
	for _, names := range [2][]string{require, prefer} {
		for _, n := range names {
			if n == "" {
				return fmt.Errorf("%w %d: empty resource name", ErrInvalidJob, id)
			}
		}
	}
	return nil
}
