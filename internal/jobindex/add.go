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
	if !st.valid() {
		return fmt.Errorf("%w %d for job %d", ErrInvalidState, st, id)
	}
	if _, _, ok := x.catalog.lookup(id); ok {
		return fmt.Errorf("%w %d", ErrDuplicateJob, id)
	}
	gid := x.internGroup(group)
	pid := x.internProfile(require, prefer)
	x.catalog.insert(id, gid, pid)
	x.states[st].Add(id)
	x.counts[st]++
	g := &x.groups[gid]
	g.counts[st]++
	r := &g.runs[runOf(id)]
	r.first, r.last = min(r.first, id), max(r.last, id)
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
