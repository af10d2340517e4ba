//go:build unix

package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/integration/jstest"
	"github.com/weavejobs/weave/internal/testwait"
)

// TestMetricsEndpoints runs a coordinator and a worker with --metrics-addr, runs jobs, and
// checks the scraped figures against the coordinator's status.
func TestMetricsEndpoints(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	srv := jstest.New(t)
	conn := []string{"--nats", srv.ClientURL(), "--namespace", "mx", "--log-level", "warn"}
	coordAddr, workerAddr := freeAddr(t), freeAddr(t)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	background := func(args ...string) {
		wg.Go(func() {
			var out, errOut bytes.Buffer
			full := append(append([]string{args[0]}, conn...), args[1:]...)
			if code := run(ctx, full, strings.NewReader(""), &out, &errOut); code != exitOK {
				t.Errorf("weave %q: exit %d\n%s%s", args, code, out.String(), errOut.String())
			}
		})
	}
	defer func() {
		cancel()
		wg.Wait()
	}()
	initNamespace(t, conn)
	background("coordinator", "--metrics-addr", coordAddr)
	background("worker", "--id", "w1", "--concurrency", "2", "--heartbeat-interval", "100ms", "--metrics-addr", workerAddr, "--",
		"sh", "-c", `if [ "$WEAVE_JOB_KEY" = bad ]; then exit 65; fi; cat`)

	jobs := "{\"key\":\"a\"}\n{\"key\":\"b\"}\n{\"key\":\"c\"}\n{\"key\":\"bad\",\"max_attempts\":1}\n"
	if code, out, errOut := runCLI(t, jobs, append([]string{"submit", "--group", "g1", "--wait", "--wait-timeout", "30s"}, conn...)...); code != exitError {
		t.Fatalf("submit: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	// The coordinator publishes its snapshot every 250ms: wait until the scrape shows the
	// group's jobs ended, then compare with status.
	var cm map[string]*dto.MetricFamily
	testwait.For(t, 10*time.Second, "the coordinator's metrics to count 4 ended jobs", func() bool {
		cm = scrape(t, coordAddr)
		return value(cm, "weave_jobs_ended_total", "outcome", "done")+value(cm, "weave_jobs_ended_total", "outcome", "failed") == 4
	})
	nc := jstest.NewConn(t, srv.ClientURL())
	st, err := coordinator.QueryStatus(ctx, nc, "mx")
	if err != nil {
		t.Fatal(err)
	}
	cm = scrape(t, coordAddr)
	for state, n := range st.Jobs {
		if got := value(cm, "weave_jobs", "state", state); got != float64(n) {
			t.Errorf("weave_jobs{state=%q} = %v, status says %d", state, got, n)
		}
	}
	for outcome, n := range map[string]uint64{"done": st.Totals.Done, "failed": st.Totals.Failed, "canceled": st.Totals.Canceled} {
		if got := value(cm, "weave_jobs_ended_total", "outcome", outcome); got != float64(n) {
			t.Errorf("weave_jobs_ended_total{outcome=%q} = %v, status says %d", outcome, got, n)
		}
	}
	if st.Totals.Done != 3 || st.Totals.Failed != 1 {
		t.Errorf("status totals %+v, want 3 done and 1 failed", st.Totals)
	}
	if got := value(cm, "weave_jobs_admitted_total"); got != float64(st.Totals.Admitted) || got != 4 {
		t.Errorf("weave_jobs_admitted_total %v, status says %d", got, st.Totals.Admitted)
	}
	if got := value(cm, "weave_jobs_entered_total", "state", "pending"); got != 4 {
		t.Errorf("weave_jobs_entered_total{state=pending} = %v, want 4", got)
	}
	if got := value(cm, "weave_jobs_left_total", "state", "running"); got != 4 {
		t.Errorf("weave_jobs_left_total{state=running} = %v, want 4", got)
	}
	if got := histCount(cm, "weave_job_run_seconds"); got != 4 {
		t.Errorf("weave_job_run_seconds count %v, want 4 attempts", got)
	}
	if got := histCount(cm, "weave_job_queue_wait_seconds"); got != 4 {
		t.Errorf("weave_job_queue_wait_seconds count %v, want 4 first releases", got)
	}
	if value(cm, "weave_lease_held") != 1 || value(cm, "weave_lease_epoch") != float64(st.Epoch) {
		t.Errorf("lease: held %v epoch %v, status epoch %d", value(cm, "weave_lease_held"), value(cm, "weave_lease_epoch"), st.Epoch)
	}
	if got := value(cm, "weave_worker_slots", "worker", "w1", "state", "sleeping") + value(cm, "weave_worker_slots", "worker", "w1", "state", "busy"); got != 2 {
		t.Errorf("coordinator's weave_worker_slots of w1 add up to %v, want 2", got)
	}

	wm := scrape(t, workerAddr)
	if got := value(wm, "weave_worker_jobs_total", "outcome", "ok"); got != 3 {
		t.Errorf("worker's weave_worker_jobs_total{outcome=ok} = %v, want 3", got)
	}
	if got := value(wm, "weave_worker_jobs_total", "outcome", "failed"); got != 1 {
		t.Errorf("worker's weave_worker_jobs_total{outcome=failed} = %v, want 1", got)
	}
	if got := value(wm, "weave_worker_slots", "state", "idle") + value(wm, "weave_worker_slots", "state", "busy"); got != 2 {
		t.Errorf("worker's slots add up to %v, want 2", got)
	}
	if got := histCount(wm, "weave_worker_job_run_seconds"); got != 4 {
		t.Errorf("weave_worker_job_run_seconds count %v, want 4", got)
	}
}

// freeAddr returns a local address free at the time of the call.
func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// scrape reads http://addr/metrics, waiting for the server to be up.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	var body bytes.Buffer
	testwait.For(t, 10*time.Second, "the metrics endpoint "+addr, func() bool {
		resp, err := client.Get(fmt.Sprintf("http://%s/metrics", addr))
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body.Reset()
		_, err = body.ReadFrom(resp.Body)
		return err == nil && resp.StatusCode == http.StatusOK
	})
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(&body)
	if err != nil {
		t.Fatalf("parsing the scrape of %s: %v", addr, err)
	}
	return mfs
}

// value is the value of the first series of name whose labels include the given pairs, or -1.
func value(mfs map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	mf := mfs[name]
	if mf == nil {
		return -1
	}
series:
	for _, m := range mf.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, lp := range m.GetLabel() {
				found = found || lp.GetName() == labels[i] && lp.GetValue() == labels[i+1]
			}
			if !found {
				continue series
			}
		}
		switch {
		case m.Gauge != nil:
			return m.GetGauge().GetValue()
		case m.Counter != nil:
			return m.GetCounter().GetValue()
		case m.Untyped != nil:
			return m.GetUntyped().GetValue()
		}
	}
	return -1
}

func histCount(mfs map[string]*dto.MetricFamily, name string) float64 {
	mf := mfs[name]
	if mf == nil || len(mf.GetMetric()) == 0 {
		return -1
	}
	return float64(mf.GetMetric()[0].GetHistogram().GetSampleCount())
}
