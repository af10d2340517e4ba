package worker_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/weavejobs/weave/internal/wire"
	"github.com/weavejobs/weave/worker"
)

// BenchmarkThroughput runs no-op jobs through one worker: publish work batches (as the
// coordinator does), run them, and read every report. It reports the worker's pulls, wakeups
// and report messages per job, and the process's CPU per job (the embedded server's included).
// 4 jobs per batch to 4 slots is what each worker of `weave bench throughput --workers 16
// --concurrency 4` gets.
func BenchmarkThroughput(b *testing.B) {
	for _, bc := range []struct{ perBatch, slots int }{{1, 8}, {4, 4}, {16, 8}, {64, 32}} {
		b.Run(fmt.Sprintf("jobs_per_batch=%d/slots=%d", bc.perBatch, bc.slots), func(b *testing.B) {
			f := setup(b)
			rr := f.reports()
			r := f.start(worker.Config{Concurrency: bc.slots},
				worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) { return nil, nil }))
			subject := f.names.WorkSubject(r.w.Pool())
			b.ResetTimer()
			cpu0 := processCPU(b)

			published := make(chan error, 1)
			go func() {
				jobs := make([]wire.WorkJob, 0, bc.perBatch)
				for id := 1; id <= b.N; id++ {
					jobs = append(jobs, wire.WorkJob{ID: uint64(id), Attempt: 1, Group: "g", Payload: []byte("payload")})
					if len(jobs) == bc.perBatch || id == b.N {
						if _, err := f.js.PublishAsync(subject, wire.AppendWork(nil, jobs)); err != nil {
							published <- err
							return
						}
						jobs = jobs[:0]
					}
				}
				<-f.js.PublishAsyncComplete()
				published <- nil
			}()
			for n := 0; n < b.N; {
				n += len(rr.nextMsg().reports)
			}
			b.StopTimer()
			cpu := processCPU(b) - cpu0
			must(b, <-published)
			st := r.w.Stats()
			must(b, r.stop())
			if st.JobsOK != uint64(b.N) || st.SpuriousWakeups != 0 {
				b.Fatalf("stats %+v for %d jobs", st, b.N)
			}
			b.ReportMetric(float64(st.Pulls)/float64(b.N), "pulls/job")
			b.ReportMetric(float64(st.AcksWithPulls)/float64(b.N), "ackpulls/job")
			b.ReportMetric(float64(st.Wakeups)/float64(b.N), "wakeups/job")
			b.ReportMetric(float64(st.ReportBatches)/float64(b.N), "reportmsgs/job")
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/job")
		})
	}
}

// processCPU is the CPU time (user and system) the process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
