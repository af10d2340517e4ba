package worker_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/weavejobs/weave/internal/wire"
	"github.com/weavejobs/weave/worker"
)

// TestCollector runs jobs through a worker and reads its collector: outcomes, retries (an
// attempt beyond the first), slots and the run-time histogram.
func TestCollector(t *testing.T) {
	t.Parallel()
	f := setup(t)
	rr := f.reports()
	r := f.start(worker.Config{ID: "w-metrics", Concurrency: 3}, worker.HandlerFunc(func(_ context.Context, j *worker.Job) ([]byte, error) {
		if string(j.Payload) == "bad" {
			return nil, worker.Permanent(errors.New("bad"))
		}
		return nil, nil
	}))
	f.publish(r.w.Pool(), job(1, "a"), job(2, "bad"), wire.WorkJob{ID: 3, Attempt: 2, Group: "g", Key: "k3"})
	rr.collect(3)

	c := r.w.Collector()
	if err := testutil.CollectAndCompare(c, strings.NewReader(`
# HELP weave_worker_jobs_total Jobs this worker ended an attempt of, by outcome (ok, failed, canceled, returned: given back unrun, lapsed: its lease ran out).
# TYPE weave_worker_jobs_total counter
weave_worker_jobs_total{outcome="canceled",pool="any",worker="w-metrics"} 0
weave_worker_jobs_total{outcome="failed",pool="any",worker="w-metrics"} 1
weave_worker_jobs_total{outcome="lapsed",pool="any",worker="w-metrics"} 0
weave_worker_jobs_total{outcome="ok",pool="any",worker="w-metrics"} 2
weave_worker_jobs_total{outcome="returned",pool="any",worker="w-metrics"} 0
# HELP weave_worker_retries_total Attempts started that were not their job's first.
# TYPE weave_worker_retries_total counter
weave_worker_retries_total{pool="any",worker="w-metrics"} 1
`), "weave_worker_jobs_total", "weave_worker_retries_total"); err != nil {
		t.Error(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "weave_worker_job_run_seconds":
			if n := mf.GetMetric()[0].GetHistogram().GetSampleCount(); n != 3 {
				t.Errorf("run-time histogram has %d samples, want 3", n)
			}
		case "weave_worker_slots":
			var sum float64
			for _, m := range mf.GetMetric() {
				sum += m.GetGauge().GetValue()
			}
			if sum != 3 {
				t.Errorf("busy + idle slots = %v, want 3", sum)
			}
		}
	}
}
