package jobindex

import (
	"encoding/binary"
	"iter"
	"slices"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
)

// profile is an interned pair of resource sets: what a job requires and what it prefers.
//
// Jobs point at a profile instead of carrying their own lists: a fleet has few distinct
// combinations (typically one resource, or none) while a backlog has millions of jobs. The
// profile is also the unit of the resource index: its counters answer ResourceCounts, and its
// bitmap of pending jobs is what SelectAny searches.
type profile struct {
	key     string   // interning key; "" marks a free slot
	require []uint32 // resource IDs, ascending, no duplicates
	prefer  []uint32 // resource IDs, ascending, no duplicates
	jobs    uint64   // jobs using this profile; the profile is released when it drops to 0
	counts  counts   // those jobs per state

	// pending holds this profile's pending jobs, so "the lowest pending job a pool can take"
	// is a minimum over the profiles that fit the pool, not a scan of all pending jobs.
	pending *roaring64.Bitmap
}

// resource is a resource name and the live profiles that mention it.
type resource struct {
	name        string   // "" marks a free slot
	requiredBy  []uint32 // profiles requiring the resource
	preferredBy []uint32 // profiles preferring it
}

// emptyProfileKey is the key of profile 0. Real keys hold two varint counts, so they are at
// least two bytes long and never equal it.
const emptyProfileKey = "\xff"

// internProfile returns the profile ID for a job's resource lists, creating the profile (and
// resources) on first use.
func (x *Index) internProfile(require, prefer []string) uint32 {
	if len(require) == 0 && len(prefer) == 0 {
		return 0
	}
	w := &x.w
	if w.profileOK && slices.Equal(w.require, require) && slices.Equal(w.prefer, prefer) {
		return w.profileID
	}
	ids := x.internResources(w.ids[:0], require)
	nreq := len(ids)
	ids = x.internResources(ids, prefer)
	w.ids = ids
	req, pref := ids[:nreq], ids[nreq:]
	w.key = profileKey(w.key[:0], req, pref)
	pid, ok := x.profileIDs[string(w.key)]
	if !ok {
		pid = x.newProfile(string(w.key), slices.Clone(req), slices.Clone(pref))
	}
	// Copy the lists: the caller may reuse its slices for the next job.
	w.require = append(w.require[:0], require...)
	w.prefer = append(w.prefer[:0], prefer...)
	w.profileID, w.profileOK = pid, true
	return pid
}

// internResources appends to ids the sorted, de-duplicated IDs of names.
func (x *Index) internResources(ids []uint32, names []string) []uint32 {
	start := len(ids)
	for _, name := range names {
		rid, ok := x.resourceIDs[name]
		if !ok {
			rid = x.resourcePool.get()
			if rid == uint32(len(x.resources)) {
				x.resources = append(x.resources, resource{})
			}
			x.resources[rid] = resource{name: name}
			x.resourceIDs[name] = rid
			x.epoch++
		}
		ids = append(ids, rid)
	}
	tail := ids[start:]
	slices.Sort(tail)
	return ids[:start+len(slices.Compact(tail))]
}

// profileKey encodes two sorted ID lists unambiguously.
func profileKey(key []byte, require, prefer []uint32) []byte {
	for _, list := range [2][]uint32{require, prefer} {
		key = binary.AppendUvarint(key, uint64(len(list)))
		for _, id := range list {
			key = binary.AppendUvarint(key, uint64(id))
		}
	}
	return key
}

func (x *Index) newProfile(key string, require, prefer []uint32) uint32 {
	pid := x.profilePool.get()
	if pid == uint32(len(x.profiles)) {
		x.profiles = append(x.profiles, profile{})
		x.minPending = append(x.minPending, noJob)
	}
	x.profiles[pid] = profile{key: key, require: require, prefer: prefer}
	x.minPending[pid] = noJob
	x.profileIDs[key] = pid
	for _, rid := range require {
		x.resources[rid].requiredBy = append(x.resources[rid].requiredBy, pid)
	}
	for _, rid := range prefer {
		x.resources[rid].preferredBy = append(x.resources[rid].preferredBy, pid)
	}
	x.epoch++
	return pid
}

// releaseProfile frees a profile no job uses any more, and any resource only it mentioned.
func (x *Index) releaseProfile(pid uint32) {
	p := &x.profiles[pid]
	delete(x.profileIDs, p.key)
	for _, rid := range p.require {
		r := &x.resources[rid]
		r.requiredBy = slices.DeleteFunc(r.requiredBy, func(id uint32) bool { return id == pid })
		x.releaseResourceIfUnused(rid)
	}
	for _, rid := range p.prefer {
		r := &x.resources[rid]
		r.preferredBy = slices.DeleteFunc(r.preferredBy, func(id uint32) bool { return id == pid })
		x.releaseResourceIfUnused(rid)
	}
	*p = profile{}
	x.minPending[pid] = noJob
	x.profilePool.put(pid)
	x.epoch++
	if x.w.profileOK && x.w.profileID == pid {
		x.w.profileOK = false
	}
}

func (x *Index) releaseResourceIfUnused(rid uint32) {
	r := &x.resources[rid]
	if r.name == "" || len(r.requiredBy) > 0 || len(r.preferredBy) > 0 {
		return
	}
	delete(x.resourceIDs, r.name)
	*r = resource{}
	x.resourcePool.put(rid)
	x.epoch++
}

func (x *Index) addPending(pid uint32, id uint64) {
	p := &x.profiles[pid]
	if p.pending == nil {
		p.pending = roaring64.New()
	}
	p.pending.Add(id)
	x.minPending[pid] = min(x.minPending[pid], id)
}

func (x *Index) removePending(pid uint32, id uint64) {
	p := &x.profiles[pid]
	p.pending.Remove(id)
	if x.minPending[pid] == id {
		if p.pending.IsEmpty() {
			x.minPending[pid] = noJob
		} else {
			x.minPending[pid] = p.pending.Minimum()
		}
	}
}

// ResourceCounts is the number of jobs, per state, that name a resource.
type ResourceCounts struct {
	Required  Counts `json:"required"`  // jobs that can only run on a holder of the resource
	Preferred Counts `json:"preferred"` // jobs that run best on a holder
}

// ResourceCounts returns the jobs requiring and preferring resource, per state. Pending jobs
// requiring a resource no live worker holds are the ones waiting for capacity. The cost is
// O(profiles naming the resource), usually one or two.
func (x *Index) ResourceCounts(resource string) ResourceCounts {
	rid, ok := x.resourceIDs[resource]
	if !ok {
		return ResourceCounts{}
	}
	return x.resourceCounts(rid)
}

func (x *Index) resourceCounts(rid uint32) ResourceCounts {
	var req, pref counts
	r := &x.resources[rid]
	for _, pid := range r.requiredBy {
		req.add(&x.profiles[pid].counts)
	}
	for _, pid := range r.preferredBy {
		pref.add(&x.profiles[pid].counts)
	}
	return ResourceCounts{Required: req.export(), Preferred: pref.export()}
}

// Resources yields every resource named by an indexed job, with its counts, in no particular
// order. The loop body may read and change the index, as with [Index.Groups].
func (x *Index) Resources() iter.Seq2[string, ResourceCounts] {
	return func(yield func(string, ResourceCounts) bool) {
		for i := 0; i < len(x.resources); i++ {
			if r := &x.resources[i]; r.name != "" && !yield(r.name, x.resourceCounts(uint32(i))) {
				return
			}
		}
	}
}
