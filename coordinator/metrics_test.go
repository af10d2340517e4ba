package coordinator

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"

	"github.com/weavejobs/weave/coordinator/internal/engine"
	"github.com/weavejobs/weave/internal/wire"
)

// gather collects c in a pedantic registry (which checks that Collect matches Describe).
func gather(t *testing.T, c prometheus.Collector) map[string]*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// TestMetricsBoundGroupsAndAgeOldest: 60 open groups get series for the first 50 only, the
// rest are counted as unlisted; the oldest pending job's age comes from its stored time.
func TestMetricsBoundGroupsAndAgeOldest(t *testing.T) {
	tl := newTestLoop(t, Config{})
	for i := range 60 {
		g := fmt.Sprintf("g%02d", i)
		tl.open(g)
		tl.job(wire.JobMeta{Group: g}, tl.now.Add(-time.Duration(60-i)*time.Second)) // g00's job is a minute old
	}
	c := &Coordinator{}
	r := tl.run(c)
	r.alarms = newAlarms(tl.cfg.Alarms)
	r.observe()

	mfs := gather(t, c.Collector())
	if n := len(mfs["weave_group_in_flight"].GetMetric()); n != engine.MaxGroupMetrics {
		t.Errorf("%d groups with series, want %d", n, engine.MaxGroupMetrics)
	}
	for name, want := range map[string]float64{"weave_groups_active": 60, "weave_groups_unlisted": 10, "weave_queue_depth": 60, "weave_oldest_pending_job_age_seconds": 60} {
		if got := mfs[name].GetMetric()[0].GetGauge().GetValue(); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if got := mfs["weave_lease_held"].GetMetric()[0].GetGauge().GetValue(); got != 0 {
		t.Errorf("weave_lease_held %v: the test coordinator never took the lease", got)
	}
}

// TestMetricsStandbyExportsLeaseOnly: a coordinator that has not led exports only its lease
// series, so the leader's figures are not doubled by a standby's zeros.
func TestMetricsStandbyExportsLeaseOnly(t *testing.T) {
	mfs := gather(t, (&Coordinator{}).Collector())
	for name := range mfs {
		switch name {
		case "weave_lease_held", "weave_lease_epoch", "weave_lease_acquisitions_total", "weave_lease_lost_total":
		default:
			t.Errorf("a standby exports %s", name)
		}
	}
	if len(mfs) != 4 {
		t.Errorf("standby exports %d families, want the 4 lease ones", len(mfs))
	}
}

// BenchmarkObserve measures one tick's snapshot and alarms (run 4 times a second) with 1,000
// open groups of 10 pending jobs, and one scrape of the result.
func BenchmarkObserve(b *testing.B) {
	cfg, _ := Config{}.withDefaults()
	names, _ := wire.NewNames("")
	e, err := engine.New(cfg.engineConfig(), names, 1)
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	e.EndReplay(nil, now)
	seq := uint64(0)
	for i := range 1000 {
		g := fmt.Sprintf("g%04d", i)
		seq++
		e.Feed(names.GroupSubject(wire.GroupToken(g)), seq, wire.GroupControl{Group: g, Op: wire.OpOpen}.Header(), nil, now)
		for range 10 {
			seq++
			e.Feed(names.JobSubject(wire.GroupToken(g)), seq, wire.JobMeta{Group: g}.Header(), nil, now)
		}
	}
	c := &Coordinator{}
	r := &run{c: c, e: e, cfg: cfg, names: names, log: zerolog.Nop(), alarms: newAlarms(cfg.Alarms)}
	b.Run("tick", func(b *testing.B) {
		for b.Loop() {
			r.observe()
		}
	})
	reg := prometheus.NewRegistry()
	reg.MustRegister(c.Collector())
	b.Run("scrape", func(b *testing.B) {
		for b.Loop() {
			if _, err := reg.Gather(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestMetricsOfLimits: each limit exports its running jobs, the jobs it holds back and whether
// it is paused, labelled by kind and name.
func TestMetricsOfLimits(t *testing.T) {
	tl := newTestLoop(t, Config{Prefetch: -1})
	tl.e.SetLimit(wire.Limit{Kind: wire.LimitGroup, Name: "g", Concurrency: 1}, tl.now)
	tl.e.SetLimit(wire.Limit{Kind: wire.LimitResource, Name: "api", Paused: true}, tl.now)
	tl.open("g")
	for range 3 {
		tl.job(wire.JobMeta{Group: "g"}, tl.now)
	}
	tl.worker("w", 8)
	tl.releases()
	c := &Coordinator{}
	r := tl.run(c)
	r.alarms = newAlarms(tl.cfg.Alarms)
	r.observe()
	mfs := gather(t, c.Collector())
	value := func(name, kind, limit string) float64 {
		for _, m := range mfs[name].GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["kind"] == kind && labels["name"] == limit {
				return m.GetGauge().GetValue()
			}
		}
		t.Fatalf("no %s{kind=%q,name=%q}", name, kind, limit)
		return 0
	}
	for _, c := range []struct {
		metric, kind, name string
		want               float64
	}{
		{"weave_limit_running", "group", "g", 1},
		{"weave_limit_held_back", "group", "g", 2},
		{"weave_limit_paused", "group", "g", 0},
		{"weave_limit_paused", "resource", "api", 1},
		{"weave_limit_held_back", "resource", "api", 0},
	} {
		if got := value(c.metric, c.kind, c.name); got != c.want {
			t.Errorf("%s{kind=%q,name=%q} = %v, want %v", c.metric, c.kind, c.name, got, c.want)
		}
	}
}
