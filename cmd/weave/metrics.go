package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
	"github.com/spf13/pflag"

	"github.com/weavejobs/weave/coordinator"
)

// serveMetrics serves c (and the Go runtime's and process's collectors) on http://addr/metrics
// until ctx ends. An empty addr serves nothing. It fails at once if addr cannot be bound, so a
// typo is an error at start, not a silent absence of metrics.
func serveMetrics(ctx context.Context, addr string, c prometheus.Collector, log zerolog.Logger) error {
	if addr == "" {
		return nil
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return usageErrorf("--metrics-addr %s: %v", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Msg("metrics server stopped")
		}
	}()
	context.AfterFunc(ctx, func() { _ = srv.Close() })
	log.Info().Str("url", fmt.Sprintf("http://%s/metrics", ln.Addr())).Msg("serving metrics")
	return nil
}

// registerAlarmFlags adds the alarms' thresholds to weave coordinator's flags.
func registerAlarmFlags(f *pflag.FlagSet, a *coordinator.AlarmConfig) {
	f.DurationVar(&a.Window, "alarm-window", coordinator.DefaultAlarmWindow, "sliding window of the failed_growth and pending_growth alarms")
	f.IntVar(&a.FailedGrowth, "alarm-failed-growth", coordinator.DefaultFailedGrowth, "jobs failed within --alarm-window that raise failed_growth")
	f.IntVar(&a.PendingGrowth, "alarm-pending-growth", coordinator.DefaultPendingGrowth, "growth of pending jobs within --alarm-window that raises pending_growth")
	f.DurationVar(&a.BacklogAfter, "alarm-backlog-after", coordinator.DefaultBacklogAfter, "how long more jobs may be pending than live slots before backlog is raised")
	f.DurationVar(&a.ScaleDownAfter, "alarm-scale-down-after", coordinator.DefaultScaleDownAfter, "how long the fleet may stay under --alarm-scale-down-below busy before scale_down is raised")
	f.Float64Var(&a.ScaleDownBelow, "alarm-scale-down-below", coordinator.DefaultScaleDownBelow, "busy share of the live slots under which the fleet counts as oversized")
	f.DurationVar(&a.StuckAfter, "alarm-stuck-after", coordinator.DefaultStuckAfter, "how long a worker with busy slots may report nothing before worker_stuck is raised")
	f.DurationVar(&a.LostFor, "alarm-lost-for", coordinator.DefaultLostFor, "how long worker_lost stays raised after a worker's heartbeats lapsed")
	f.DurationVar(&a.MissingAfter, "alarm-missing-after", coordinator.DefaultMissingAfter, "how long a group may wait for a group never published before dependency_missing is raised")
}

func init() {
	maps.Copy(coordinatorFlags, map[string]string{
		"Alarms.Window": "--alarm-window", "Alarms.FailedGrowth": "--alarm-failed-growth", "Alarms.PendingGrowth": "--alarm-pending-growth",
		"Alarms.BacklogAfter": "--alarm-backlog-after", "Alarms.ScaleDownAfter": "--alarm-scale-down-after",
		"Alarms.ScaleDownBelow": "--alarm-scale-down-below", "Alarms.StuckAfter": "--alarm-stuck-after", "Alarms.LostFor": "--alarm-lost-for", "Alarms.MissingAfter": "--alarm-missing-after",
	})
}

// printAlarms lists the raised alarms at the top of weave status.
func printAlarms(w io.Writer, st *coordinator.Status) {
	if len(st.Alarms) == 0 {
		return
	}
	fmt.Fprintf(w, "\nALARMS (%d raised)\n", len(st.Alarms))
	for _, a := range st.Alarms {
		fmt.Fprintf(w, "! %s, raised %s: %s\n", a.Name, ago(st.Time, a.RaisedAt), a.Message)
	}
}
