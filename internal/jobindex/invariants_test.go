package jobindex

import (
	"fmt"
	"slices"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
)

// checkInvariants verifies every internal invariant of x from first principles: the derived
// structures (counters, pending bitmaps, minimums, dictionaries) must agree with the states
// and the catalog. Property and fuzz tests call it after every operation.
func (x *Index) checkInvariants() error {
	var total uint64
	for s, bm := range x.states {
		if c := bm.GetCardinality(); c != x.counts[s] {
			return fmt.Errorf("count[%s]=%d, bitmap holds %d", State(s), x.counts[s], c)
		}
		if bm.HasRunCompression() {
			return fmt.Errorf("%s bitmap holds run containers", State(s))
		}
		total += x.counts[s]
	}
	if u := roaring64.FastOr(x.states[:]...).GetCardinality(); u != total {
		return fmt.Errorf("states overlap: union %d, sum %d", u, total)
	}

	// Catalog: blocks sorted, spans sorted, disjoint, non-empty, neighbours not mergeable.
	spanned := roaring64.New()
	spans := 0
	for b, key := range x.catalog.keys {
		if b > 0 && x.catalog.keys[b-1] >= key {
			return fmt.Errorf("catalog keys out of order at %d", b)
		}
		ss := x.catalog.spans[b]
		if len(ss) == 0 {
			return fmt.Errorf("empty catalog block %d", key)
		}
		for i, s := range ss {
			if s.lo > s.hi {
				return fmt.Errorf("inverted span %+v", s)
			}
			if i > 0 {
				p := ss[i-1]
				if p.hi >= s.lo {
					return fmt.Errorf("overlapping spans %+v %+v", p, s)
				}
				if int(p.hi)+1 == int(s.lo) && p.group == s.group && p.profile == s.profile {
					return fmt.Errorf("unmerged spans %+v %+v", p, s)
				}
			}
			spanned.AddRange(key<<blockBits|uint64(s.lo), key<<blockBits|uint64(s.hi)+1)
		}
		spans += len(ss)
	}
	if spans != x.catalog.n {
		return fmt.Errorf("catalog.n=%d, spans=%d", x.catalog.n, spans)
	}
	all := roaring64.FastOr(x.states[:]...)
	if !spanned.Equals(all) {
		return fmt.Errorf("catalog holds %d jobs, states %d", spanned.GetCardinality(), all.GetCardinality())
	}

	// Recount groups and profiles from the catalog and the states.
	groupCounts := make([]counts, len(x.groups))
	profileCounts := make([]counts, len(x.profiles))
	profileJobs := make([]uint64, len(x.profiles))
	profilePending := make([]*roaring64.Bitmap, len(x.profiles))
	first := make([][2]uint64, len(x.groups)) // per run of IDs (runOf)
	last := make([][2]uint64, len(x.groups))
	for i := range first {
		first[i] = [2]uint64{noJob, noJob}
	}
	var err error
	x.catalog.each(func(lo, hi uint64, gid, pid uint32) bool {
		if gid != aloneGroup && (int(gid) >= len(x.groups) || x.groups[gid].name == "") {
			err = fmt.Errorf("span %d-%d names free group %d", lo, hi, gid)
			return false
		}
		if int(pid) >= len(x.profiles) || x.profiles[pid].key == "" {
			err = fmt.Errorf("span %d-%d names free profile %d", lo, hi, pid)
			return false
		}
		if runOf(lo) != runOf(hi) {
			err = fmt.Errorf("span %d-%d crosses PackedIDs", lo, hi)
			return false
		}
		r := runOf(lo)
		if gid != aloneGroup {
			first[gid][r], last[gid][r] = min(first[gid][r], lo), max(last[gid][r], hi)
		}
		profileJobs[pid] += hi - lo + 1
		for id := lo; ; id++ {
			s, _ := x.stateOf(id)
			if gid != aloneGroup {
				groupCounts[gid][s]++
			}
			profileCounts[pid][s]++
			if s == Pending {
				if profilePending[pid] == nil {
					profilePending[pid] = roaring64.New()
				}
				profilePending[pid].Add(id)
			}
			if id == hi {
				break
			}
		}
		return true
	})
	if err != nil {
		return err
	}

	liveGroups := 0
	for gid, g := range x.groups {
		if g.name == "" {
			if g.counts != (counts{}) {
				return fmt.Errorf("free group %d has counts", gid)
			}
			continue
		}
		liveGroups++
		if id, ok := x.groupIDs[g.name]; !ok || id != uint32(gid) {
			return fmt.Errorf("group %q not mapped to %d", g.name, gid)
		}
		if g.counts != groupCounts[gid] {
			return fmt.Errorf("group %q counts %v, recount %v", g.name, g.counts, groupCounts[gid])
		}
		if g.counts.total() == 0 {
			return fmt.Errorf("group %q is empty", g.name)
		}
		// first/last may be loose after nothing but they must bound the group's spans, in
		// each run of IDs.
		for r, run := range g.runs {
			if first[gid][r] != noJob && (run.first > first[gid][r] || run.last < last[gid][r]) {
				return fmt.Errorf("group %q run %d: span %d-%d does not cover %d-%d", g.name, r, run.first, run.last, first[gid][r], last[gid][r])
			}
		}
	}
	if liveGroups != len(x.groupIDs) {
		return fmt.Errorf("%d live groups, %d mapped", liveGroups, len(x.groupIDs))
	}

	liveProfiles := 0
	for pid := range x.profiles {
		p := &x.profiles[pid]
		if p.key == "" {
			if x.minPending[pid] != noJob {
				return fmt.Errorf("free profile %d has a pending minimum", pid)
			}
			continue
		}
		liveProfiles++
		if id, ok := x.profileIDs[p.key]; !ok || id != uint32(pid) {
			return fmt.Errorf("profile %d not mapped", pid)
		}
		if pid == 0 && (p.key != emptyProfileKey || len(p.require)+len(p.prefer) != 0) {
			return fmt.Errorf("profile 0 is not the empty profile")
		}
		if pid != 0 && string(profileKey(nil, p.require, p.prefer)) != p.key {
			return fmt.Errorf("profile %d key does not match its lists", pid)
		}
		for _, list := range [2][]uint32{p.require, p.prefer} {
			if !slices.IsSorted(list) || len(slices.Compact(slices.Clone(list))) != len(list) {
				return fmt.Errorf("profile %d list %v not sorted and unique", pid, list)
			}
			for _, rid := range list {
				if int(rid) >= len(x.resources) || x.resources[rid].name == "" {
					return fmt.Errorf("profile %d names free resource %d", pid, rid)
				}
			}
		}
		if p.jobs != profileJobs[pid] {
			return fmt.Errorf("profile %d jobs %d, recount %d", pid, p.jobs, profileJobs[pid])
		}
		if pid != 0 && p.jobs == 0 {
			return fmt.Errorf("profile %d unused but live", pid)
		}
		if p.counts != profileCounts[pid] {
			return fmt.Errorf("profile %d counts %v, recount %v", pid, p.counts, profileCounts[pid])
		}
		want := profilePending[pid]
		if want == nil {
			want = roaring64.New()
		}
		got := p.pending
		if got != nil && got.HasRunCompression() {
			return fmt.Errorf("profile %d pending bitmap holds run containers", pid)
		}
		if got == nil {
			got = roaring64.New()
		}
		if !got.Equals(want) {
			return fmt.Errorf("profile %d pending %v, want %v", pid, got, want)
		}
		wantMin := uint64(noJob)
		if !want.IsEmpty() {
			wantMin = want.Minimum()
		}
		if x.minPending[pid] != wantMin {
			return fmt.Errorf("profile %d minPending %d, want %d", pid, x.minPending[pid], wantMin)
		}
	}
	if liveProfiles != len(x.profileIDs) {
		return fmt.Errorf("%d live profiles, %d mapped", liveProfiles, len(x.profileIDs))
	}

	liveResources := 0
	for rid, r := range x.resources {
		if r.name == "" {
			if len(r.requiredBy)+len(r.preferredBy) > 0 {
				return fmt.Errorf("free resource %d referenced", rid)
			}
			continue
		}
		liveResources++
		if id, ok := x.resourceIDs[r.name]; !ok || id != uint32(rid) {
			return fmt.Errorf("resource %q not mapped", r.name)
		}
		if len(r.requiredBy)+len(r.preferredBy) == 0 {
			return fmt.Errorf("resource %q unused but live", r.name)
		}
		var wantReq, wantPref []uint32
		for pid := range x.profiles {
			if x.profiles[pid].key == "" {
				continue
			}
			if slices.Contains(x.profiles[pid].require, uint32(rid)) {
				wantReq = append(wantReq, uint32(pid))
			}
			if slices.Contains(x.profiles[pid].prefer, uint32(rid)) {
				wantPref = append(wantPref, uint32(pid))
			}
		}
		if !sameSet(r.requiredBy, wantReq) || !sameSet(r.preferredBy, wantPref) {
			return fmt.Errorf("resource %q back-references %v/%v, want %v/%v", r.name, r.requiredBy, r.preferredBy, wantReq, wantPref)
		}
	}
	if liveResources != len(x.resourceIDs) {
		return fmt.Errorf("%d live resources, %d mapped", liveResources, len(x.resourceIDs))
	}
	return nil
}

func sameSet(a, b []uint32) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// each calls fn for every span in ascending ID order until fn returns false.
func (c *catalog) each(fn func(lo, hi uint64, group, profile uint32) bool) {
	for b, key := range c.keys {
		base := key << blockBits
		for _, s := range c.spans[b] {
			if !fn(base|uint64(s.lo), base|uint64(s.hi), s.group, s.profile) {
				return
			}
		}
	}
}
