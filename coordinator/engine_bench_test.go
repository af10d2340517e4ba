package coordinator

import (
	"fmt"
	"testing"

	"github.com/weavejobs/weave/internal/wire"
)

// BenchmarkReleaseFromBacklog measures the engine alone (no NATS) scheduling from a backlog:
// pending jobs in groups of 1,000, admitted and sealed, then one worker of 64 slots whose every
// job is reported done at once. One op is one job released and reported; the cost per op should
// not grow with the backlog.
func BenchmarkReleaseFromBacklog(b *testing.B) {
	for _, pending := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("pending=%d", pending), func(b *testing.B) {
			te := newTestEngine(&testing.T{}, Config{})
			for g := range pending / 1000 {
				group := fmt.Sprint("g", g)
				te.open(group)
				for range 1000 {
					te.job(wire.JobMeta{Group: group})
				}
				te.seal(group)
			}
			te.worker("w", 64)
			var running []*job
			b.ResetTimer()
			for b.Loop() {
				if len(running) == 0 {
					for _, js := range te.releases() {
						running = append(running, js...)
					}
					if len(running) == 0 {
						b.Fatal("nothing released")
					}
				}
				j := running[len(running)-1]
				running = running[:len(running)-1]
				te.report(j, wire.StatusOK, "")
				te.e.out = effects{}
			}
		})
	}
}
