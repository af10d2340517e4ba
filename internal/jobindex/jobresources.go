package jobindex

import "iter"

// JobResources yields the names of the resources job id requires, then those it prefers (a name
// in both lists is yielded twice). It yields nothing for a job not in the index. The loop body
// must not change the index.
func (x *Index) JobResources(id uint64) iter.Seq[string] {
	return func(yield func(string) bool) {
		_, pid, ok := x.catalog.lookup(id)
		if !ok {
			return
		}
		p := &x.profiles[pid]
		for _, list := range [2][]uint32{p.require, p.prefer} {
			for _, rid := range list {
				if !yield(x.resources[rid].name) {
					return
				}
			}
		}
	}
}

// JobRequires yields the names of the resources job id requires. It yields nothing for a job
// not in the index. The loop body must not change the index.
func (x *Index) JobRequires(id uint64) iter.Seq[string] {
	return func(yield func(string) bool) {
		_, pid, ok := x.catalog.lookup(id)
		if !ok {
			return
		}
		for _, rid := range x.profiles[pid].require {
			if !yield(x.resources[rid].name) {
				return
			}
		}
	}
}

// JobPrefers yields the names of the resources job id prefers. It yields nothing for a job not
// in the index. The loop body must not change the index.
func (x *Index) JobPrefers(id uint64) iter.Seq[string] {
	return func(yield func(string) bool) {
		_, pid, ok := x.catalog.lookup(id)
		if !ok {
			return
		}
		for _, rid := range x.profiles[pid].prefer {
			if !yield(x.resources[rid].name) {
				return
			}
		}
	}
}
