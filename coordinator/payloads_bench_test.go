package coordinator

import (
	"testing"

	"github.com/weavejobs/weave/internal/wire"
)

// BenchmarkPayloadCache: the feed adds 200 groups of 100 packed jobs (packs of 32), then the
// jobs are taken as releases take them, a job of each group in turn; ns per job added and
// taken. Throughput runs do this with everything cached.
func BenchmarkPayloadCache(b *testing.B) {
	const groups, perGroup = 200, 100
	var ids [groups][]uint64
	var seq uint64
	for g := range groups {
		for i := 0; i < perGroup; i += wire.MaxPack {
			seq++
			for k := 0; k < wire.MaxPack && i+k < perGroup; k++ {
				ids[g] = append(ids[g], wire.PackedJobID(seq, k))
			}
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		p := newPayloads(nil, DefaultPayloadCache)
		for g := range groups {
			jobs := make([]wire.StoredJob, len(ids[g]))
			for i, id := range ids[g] {
				jobs[i] = wire.StoredJob{ID: id, Payload: make([]byte, 16)}
			}
			p.add(jobs, 0)
		}
		for i := range perGroup {
			for g := range groups {
				id := ids[g][i : i+1]
				if !p.has(id[0]) || p.cached(id) == nil {
					b.Fatal("not cached")
				}
				p.take(id)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*groups*perGroup), "ns/job")
}
