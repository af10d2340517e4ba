package jobindex

import (
	"math"
	"sync/atomic"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
)

// MaxID is the largest job ID the index accepts. The one value above it is reserved to mean
// "no job" internally; stream sequence numbers never get near it.
const MaxID = math.MaxUint64 - 1

// noJob marks an empty slot in minPending.
const noJob = math.MaxUint64

// indexIDs gives every Index a distinct identity, so a [ResourceSet] compiled for one index is
// never mistaken for another's.
var indexIDs atomic.Uint64

// Index is the coordinator's job index: the state of every job, per-state, per-group and
// per-resource counts, and resource-aware selection of pending jobs.
//
// An Index has one owner and is not safe for concurrent use: the goroutine that creates it
// reads and changes it, and nothing else. In Weave that is the coordinator's loop goroutine,
// which also answers status requests, so the index needs no lock. Create one with [New].
type Index struct {
	id uint64 // identity for compiled ResourceSets; never changes

	states  [numStates]*roaring64.Bitmap // states[s] holds the jobs in state s; disjoint
	counts  counts                       // counts[s] == states[s].GetCardinality(), kept O(1)
	catalog catalog                      // job ID -> group, profile

	groups    []group // by group ID; a free slot has an empty name
	groupIDs  map[string]uint32
	groupPool idPool

	resources    []resource // by resource ID; a free slot has an empty name
	resourceIDs  map[string]uint32
	resourcePool idPool

	profiles    []profile // by profile ID; profile 0 is "no requirements, no preferences"
	profileIDs  map[string]uint32
	profilePool idPool
	minPending  []uint64 // minPending[p] is the lowest pending job of profile p, or noJob

	// epoch changes whenever a resource or profile ID is assigned or released. A compiled
	// ResourceSet is valid for one epoch.
	epoch uint64

	w writerScratch // reused by Add and Forget
}

// writerScratch is memory writers reuse between calls to keep Add allocation-free in the
// common case.
type writerScratch struct {
	// The last group and resource lists Add saw. Consecutive jobs nearly always share them, so
	// a hit skips the map look-ups and the sort.
	group     string
	groupID   uint32
	groupOK   bool
	require   []string
	prefer    []string
	profileID uint32
	profileOK bool

	ids    []uint32
	key    []byte
	bitmap *roaring64.Bitmap
}

// New returns an empty index.
func New() *Index {
	x := &Index{
		id:          indexIDs.Add(1),
		groupIDs:    make(map[string]uint32),
		resourceIDs: make(map[string]uint32),
		profileIDs:  make(map[string]uint32),
		epoch:       1,
	}
	for s := range x.states {
		x.states[s] = roaring64.New()
	}
	x.w.bitmap = roaring64.New()
	x.newProfile(emptyProfileKey, nil, nil) // ID 0, never released
	return x
}

// Len returns the number of jobs in the index.
func (x *Index) Len() uint64 {
	return x.counts.total()
}

// Count returns the number of jobs in state s, in O(1).
func (x *Index) Count(s State) uint64 {
	if !s.valid() {
		return 0
	}
	return x.counts[s]
}

// Counts returns the number of jobs in every state, read at one instant.
func (x *Index) Counts() Counts {
	return x.counts.export()
}

// State returns the state of job id, and false if the job is not in the index.
func (x *Index) State(id uint64) (State, bool) {
	return x.stateOf(id)
}

// lookupOrder is the order stateOf probes the state bitmaps: most jobs are done, most of the
// rest pending.
var lookupOrder = [numStates]State{Done, Pending, Running, RetryWait, Delayed, Failed, Canceled}

func (x *Index) stateOf(id uint64) (State, bool) {
	for _, s := range lookupOrder {
		if x.states[s].Contains(id) {
			return s, true
		}
	}
	return 0, false
}
