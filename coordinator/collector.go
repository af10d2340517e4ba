package coordinator

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/weavejobs/weave/coordinator/internal/engine"
	"github.com/weavejobs/weave/internal/jobindex"
)

// coordMetrics is the Coordinator's side: the latest snapshot and the lease figures, which
// outlive a term. Written by Run and the loop, read by Collect.
type coordMetrics struct {
	snap      atomic.Pointer[engine.MetricsSnapshot] // nil while not leading
	held      atomic.Bool
	epoch     atomic.Uint64
	acquired  atomic.Uint64 // lease acquisitions: terms started
	lostLease atomic.Uint64 // terms that ended with an error (lease lost, stall)
}

// termStarted and termEnded bracket a term (see Run).
func (m *coordMetrics) termStarted(epoch uint64) {
	m.held.Store(true)
	m.epoch.Store(epoch)
	m.acquired.Add(1)
}

func (m *coordMetrics) termEnded(err error) {
	m.held.Store(false)
	m.snap.Store(nil)
	if err != nil {
		m.lostLease.Add(1)
	}
}

// Collector returns a prometheus.Collector of this coordinator's metrics, for Go programs
// that run their own registry: registry.MustRegister(c.Collector()). A standby exports only
// the weave_lease_* series. Collect reads a snapshot the coordinator publishes every 250ms.
// `weave coordinator --metrics-addr` serves the same on /metrics.
func (c *Coordinator) Collector() prometheus.Collector { return (*coordCollector)(c) }

type coordCollector Coordinator

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

func (c *coordCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descJobs, descEntered, descLeft, descAdmitted, descReleased, descRetried, descEnded,
		descRejected, descLostJobs, descLapsed, descRescued, descRequeued, descWait, descRun, descGroupJobs, descGroupInFlight,
		descGroupsActive, descGroupsWaiting, descAfter, descGroupsUnlist, descResourceJobs, descResourceHold, descLimitRunning, descLimitHeld, descLimitPaused,
		descPoolWorkers, descPoolSlots, descPoolOut,
		descWorkerSlots, descSlots, descOldest, descDepth, descAlarm, descLeaseHeld, descLeaseEpoch, descLeaseAcq, descLeaseLost} {
		ch <- d
	}
}

func (c *coordCollector) Collect(ch chan<- prometheus.Metric) {
	m := &c.mx
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	held := 0.0
	if m.held.Load() {
		held = 1
	}
	gauge(descLeaseHeld, held)
	gauge(descLeaseEpoch, float64(m.epoch.Load()))
	counter(descLeaseAcq, m.acquired.Load())
	counter(descLeaseLost, m.lostLease.Load())
	s := m.snap.Load()
	if s == nil {
		return // a standby: the leader exports the namespace's figures
	}
	for _, st := range jobindex.AllStates() {
		gauge(descJobs, float64(s.States[st]), st.String())
		counter(descEntered, s.Entered[st], st.String())
		counter(descLeft, s.Left[st], st.String())
	}
	t := s.Totals
	counter(descAdmitted, t.Admitted)
	counter(descReleased, t.Released)
	counter(descRetried, t.Retried)
	counter(descEnded, t.Done, "done")
	counter(descEnded, t.Failed, "failed")
	counter(descEnded, t.Canceled, "canceled")
	counter(descRejected, t.Rejected-t.RejectedReports-t.RejectedHeartbeats, "message")
	counter(descRejected, t.RejectedReports, "report")
	counter(descRejected, t.RejectedHeartbeats, "heartbeat")
	counter(descRejected, t.Refused, "request")
	counter(descLostJobs, t.LostJobs)
	counter(descLapsed, t.LostAttempts)
	counter(descRescued, t.Rescued)
	counter(descRequeued, t.Requeued)
	ch <- histMetric(s.Wait, descWait)
	ch <- histMetric(s.Run, descRun)
	for _, g := range s.Groups {
		for _, st := range jobindex.AllStates() {
			gauge(descGroupJobs, float64(g.Jobs.Get(st)), g.ID, st.String())
		}
		gauge(descGroupInFlight, float64(g.InFlight), g.ID)
	}
	gauge(descGroupsActive, float64(s.GroupsActive))
	gauge(descGroupsWaiting, float64(s.GroupsWaiting))
	counter(descAfter, t.AfterReleased, "released")
	counter(descAfter, t.AfterCanceled, "canceled")
	gauge(descGroupsUnlist, float64(s.GroupsActive-len(s.Groups)))
	for _, r := range s.Resources {
		for st, n := range r.Required {
			gauge(descResourceJobs, float64(n), r.Name, st)
		}
		gauge(descResourceHold, float64(r.Holders), r.Name)
	}
	for _, l := range s.Limits {
		kind := string(l.Kind)
		gauge(descLimitRunning, float64(l.Running), kind, l.Name)
		gauge(descLimitHeld, float64(l.Waiting), kind, l.Name)
		paused := 0.0
		if l.Paused {
			paused = 1
		}
		gauge(descLimitPaused, paused, kind, l.Name)
	}
	for _, p := range s.Pools {
		gauge(descPoolWorkers, float64(p.Workers), p.Key)
		gauge(descPoolSlots, float64(p.Slots), p.Key)
		gauge(descPoolOut, float64(p.Outstanding), p.Key)
	}
	for _, w := range s.Workers {
		gauge(descWorkerSlots, float64(w.Busy), w.ID, w.Pool, "busy")
		gauge(descWorkerSlots, float64(w.Sleeping), w.ID, w.Pool, "sleeping")
	}
	gauge(descSlots, float64(s.Slots))
	gauge(descOldest, s.OldestAge.Seconds())
	gauge(descDepth, float64(s.States[jobindex.Pending]+s.States[jobindex.Running]))
	active := map[string]bool{}
	for _, a := range s.Alarms {
		active[a.Name] = true
	}
	for _, name := range AlarmNames {
		v := 0.0
		if active[name] {
			v = 1
		}
		gauge(descAlarm, v, name)
	}
}

// observe runs on the loop each tick: it publishes the engine's new metrics snapshot and its
// alarms' events.
func (r *run) observe() {
	s, in := r.e.Observe(r.cfg.now())
	events := r.alarms.observe(in)
	s.Alarms = r.alarms.active()
	r.c.mx.snap.Store(s) // before the events: a scrape prompted by one sees its alarm
	for _, ev := range events {
		if err := r.c.nc.Publish(r.names.AlarmSubject(ev.Name), ev.Marshal()); err != nil {
			r.log.Warn().Err(err).Str("alarm", ev.Name).Msg("publishing an alarm event failed")
		}
		lvl := zerolog.WarnLevel
		if ev.State == "cleared" {
			lvl = zerolog.InfoLevel // the all-clear is news, not a warning
		}
		r.log.WithLevel(lvl).Str("alarm", ev.Name).Str("state", ev.State).Msg(ev.Message)
	}
}

func histMetric(h engine.Hist, d *prometheus.Desc) prometheus.Metric {
	cum := make(map[float64]uint64, len(engine.SecondsBuckets))
	var c uint64
	for i, b := range engine.SecondsBuckets {
		if h.Counts != nil {
			c += h.Counts[i]
		}
		cum[b] = c
	}
	return prometheus.MustNewConstHistogram(d, h.N, h.Sum, cum)
}

var (
	descJobs          = desc("weave_jobs", "Jobs per state, from the job index (pending, running, retrywait, done, failed, canceled of the tracked groups).", "state")
	descEntered       = desc("weave_jobs_entered_total", "Jobs that entered each state (admissions enter pending).", "state")
	descLeft          = desc("weave_jobs_left_total", "Jobs that left each state.", "state")
	descAdmitted      = desc("weave_jobs_admitted_total", "Jobs admitted into open groups.")
	descReleased      = desc("weave_jobs_released_total", "Releases of jobs to pools (attempts).")
	descRetried       = desc("weave_jobs_retried_total", "Attempts that failed and were scheduled for a retry.")
	descEnded         = desc("weave_jobs_ended_total", "Jobs that ended, by outcome.", "outcome")
	descRejected      = desc("weave_rejections_total", "Messages refused and recorded in NS_REJECTED, by kind (message: a job or control message; report; heartbeat; request: a cancel or redrive the state refuses).", "reason")
	descLostJobs      = desc("weave_jobs_vanished_total", "Jobs failed because their stored message was gone.")
	descLapsed        = desc("weave_attempts_lapsed_total", "Attempts lost with their worker's lease, counted as failed.")
	descRescued       = desc("weave_jobs_rescued_total", "Jobs taken back from pools left without workers.")
	descRequeued      = desc("weave_jobs_requeued_total", "Releases that failed and went back to pending.")
	descWait          = desc("weave_job_queue_wait_seconds", "Time from a job's storage to its first release (±10ms).")
	descRun           = desc("weave_job_run_seconds", "Handler run time of the attempts reported.")
	descGroupJobs     = desc("weave_group_jobs", "Jobs of an open group per state (the first 50 open groups in arrival order).", "group", "state")
	descGroupInFlight = desc("weave_group_in_flight", "Jobs of an open group released and not yet reported (first 50 groups).", "group")
	descGroupsActive  = desc("weave_groups_active", "Open groups tracked by the coordinator.")
	descGroupsWaiting = desc("weave_groups_waiting_dependencies", "Open groups held until the groups they run after complete.")
	descAfter         = desc("weave_dependents_total", "Groups held by dependencies (After, follow-ups) that were released or canceled.", "outcome")
	descGroupsUnlist  = desc("weave_groups_unlisted", "Open groups beyond the 50 with their own weave_group_* series.")
	descResourceJobs  = desc("weave_resource_jobs", "Jobs requiring a resource, per state (first 100 resources by name).", "resource", "state")
	descResourceHold  = desc("weave_resource_holder_slots", "Live slots holding a resource.", "resource")
	descLimitRunning  = desc("weave_limit_running", "Jobs under a limit released and not yet reported.", "kind", "name")
	descLimitHeld     = desc("weave_limit_held_back", "Jobs a limit holds back (a paused one holds back all of them).", "kind", "name")
	descLimitPaused   = desc("weave_limit_paused", "1 while a resource or group is paused (weave limit pause).", "kind", "name")
	descPoolWorkers   = desc("weave_pool_workers", "Live workers of a pool.", "pool")
	descPoolSlots     = desc("weave_pool_slots", "Live slots of a pool (draining workers excluded).", "pool")
	descPoolOut       = desc("weave_pool_outstanding", "Jobs released to a pool and not yet reported.", "pool")
	descWorkerSlots   = desc("weave_worker_slots", "A live worker's slots by state (busy, sleeping), from its latest heartbeat.", "worker", "pool", "state")
	descSlots         = desc("weave_slots", "Live slots of the fleet (draining workers excluded).")
	descOldest        = desc("weave_oldest_pending_job_age_seconds", "Age of the oldest pending job (0 when none).")
	descDepth         = desc("weave_queue_depth", "Jobs waiting for or holding a slot (pending + running): an autoscaler's target divides it by the slots per worker.")
	descAlarm         = desc("weave_alarm_active", "1 while an alarm is raised.", "alarm")
	descLeaseHeld     = desc("weave_lease_held", "1 while this coordinator holds the namespace's lease (leads), 0 as a standby.")
	descLeaseEpoch    = desc("weave_lease_epoch", "Epoch of the lease this coordinator last held.")
	descLeaseAcq      = desc("weave_lease_acquisitions_total", "Terms this coordinator started (failovers to it, and its first start).")
	descLeaseLost     = desc("weave_lease_lost_total", "Terms of this coordinator that ended with an error (lease lost, stalled).")
)
