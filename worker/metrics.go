package worker

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// workerMetrics are the worker's figures beyond Stats, for its Prometheus collector. Written by
// the shepherd; the histogram and counter are safe to read from a scrape.
type workerMetrics struct {
	run     prometheus.Histogram // handler run time of the attempts reported
	retries atomic.Uint64        // attempts started that were not the job's first
}

// newRunHistogram is workerMetrics.run, labeled with the worker's ID and pool.
func newRunHistogram(id, pool string) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:        "weave_worker_job_run_seconds",
		Help:        "Handler run time of the attempts this worker reported.",
		ConstLabels: prometheus.Labels{"worker": id, "pool": pool},
		Buckets:     []float64{.001, .005, .01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600},
	})
}

// observe notes a reported attempt's run time (attempts that never started have none).
func (m *workerMetrics) observe(ran time.Duration, started bool) {
	if started {
		m.run.Observe(ran.Seconds())
	}
}

// started counts an attempt started.
func (m *workerMetrics) started(attempt int) {
	if attempt > 1 {
		m.retries.Add(1)
	}
}

// Collector returns a prometheus.Collector of this worker's metrics, for Go programs that run
// their own registry: registry.MustRegister(w.Collector()). Its series carry the worker's ID
// and pool as labels. `weave worker --metrics-addr` serves the same on /metrics.
func (w *Worker) Collector() prometheus.Collector { return (*workerCollector)(w) }

type workerCollector Worker

var (
	descSlots    = prometheus.NewDesc("weave_worker_slots", "This worker's slots by state: busy (assigned a job) or idle (waiting for work).", []string{"worker", "pool", "state"}, nil)
	descQueued   = prometheus.NewDesc("weave_worker_queued_jobs", "Jobs received and waiting for a slot.", []string{"worker", "pool"}, nil)
	descJobs     = prometheus.NewDesc("weave_worker_jobs_total", "Jobs this worker ended an attempt of, by outcome (ok, failed, canceled, returned: given back unrun, lapsed: its lease ran out).", []string{"worker", "pool", "outcome"}, nil)
	descStarted  = prometheus.NewDesc("weave_worker_attempts_started_total", "Handler calls started.", []string{"worker", "pool"}, nil)
	descRetries  = prometheus.NewDesc("weave_worker_retries_total", "Attempts started that were not their job's first.", []string{"worker", "pool"}, nil)
	descTimeouts = prometheus.NewDesc("weave_worker_timeouts_total", "Attempts failed because their deadline passed (also in jobs_total failed).", []string{"worker", "pool"}, nil)
	descPanics   = prometheus.NewDesc("weave_worker_panics_total", "Handler panics.", []string{"worker", "pool"}, nil)
	descPulls    = prometheus.NewDesc("weave_worker_pulls_total", "Pull requests sent to JetStream.", []string{"worker", "pool"}, nil)
	descWakeups  = prometheus.NewDesc("weave_worker_wakeups_total", "Sleeping slots woken with a job.", []string{"worker", "pool"}, nil)
	descBatches  = prometheus.NewDesc("weave_worker_batches_total", "Work batches received.", []string{"worker", "pool"}, nil)
	descReports  = prometheus.NewDesc("weave_worker_report_retries_total", "Report messages published again after a failure.", []string{"worker", "pool"}, nil)
)

func (c *workerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSlots, descQueued, descJobs, descStarted, descRetries, descTimeouts, descPanics, descPulls, descWakeups, descBatches, descReports} {
		ch <- d
	}
	c.stats.mx.run.Describe(ch)
}

func (c *workerCollector) Collect(ch chan<- prometheus.Metric) {
	w := (*Worker)(c)
	s := w.Stats()
	id, pool := w.cfg.ID, w.cfg.pool
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{id, pool}, labels...)...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), append([]string{id, pool}, labels...)...)
	}
	gauge(descSlots, float64(s.Busy), "busy")
	gauge(descSlots, float64(s.Sleeping), "idle")
	gauge(descQueued, float64(s.Queued))
	counter(descJobs, s.JobsOK, "ok")
	counter(descJobs, s.JobsFailed, "failed")
	counter(descJobs, s.Canceled, "canceled")
	counter(descJobs, s.Returned, "returned")
	counter(descJobs, s.Lost, "lapsed")
	counter(descStarted, s.JobsRun)
	counter(descRetries, w.stats.mx.retries.Load())
	counter(descTimeouts, s.Timeouts)
	counter(descPanics, s.Panics)
	counter(descPulls, s.Pulls)
	counter(descWakeups, s.Wakeups)
	counter(descBatches, s.Batches)
	counter(descReports, s.ReportRetries)
	w.stats.mx.run.Collect(ch)
}
