package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/weavejobs/weave/cmd/weave/internal/inproc"
	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/worker"
)

// ChainsConfig configures the chains scenario. Zero fields take the defaults.
type ChainsConfig struct {
	FollowUps int           `json:"follow_ups"`  // groups published with a follow-up; default 300
	Interval  time.Duration `json:"interval_ns"` // between two of them; default 5ms
	Waiting   int           `json:"waiting"`     // groups waiting on one never published; default 10,000
	Window    time.Duration `json:"window_ns"`   // CPU window with and without them; default 3s
	// Groups of CrowdJobs jobs of 1 ms, as many as the feeder slots and Crowd more, hold every
	// slot when an urgent and a plain single job are submitted; defaults 100 and 20.
	Crowd     int `json:"crowd"`
	CrowdJobs int `json:"crowd_jobs"`
}

func (c *ChainsConfig) defaults() error {
	setDefault(&c.FollowUps, 300)
	setDefault(&c.Interval, 5*time.Millisecond)
	setDefault(&c.Waiting, 10_000)
	setDefault(&c.Window, 3*time.Second)
	setDefault(&c.Crowd, 100)
	setDefault(&c.CrowdJobs, 20)
	if c.FollowUps < 10 || c.Waiting < 1 || c.Window < 100*time.Millisecond {
		return fmt.Errorf("chains: need at least 10 follow-ups, 1 waiting group and a 100ms window")
	}
	return nil
}

// ChainsResult is what the chains scenario measured.
type ChainsResult struct {
	Config ChainsConfig `json:"config"`
	// FollowUpDelay: from the end of a group's last job to the start of its follow-up's job.
	// SingleStart, the reference measured in the same run: from Submit of a single job to its
	// start, the same path a follow-up takes after its group's summary.
	FollowUpDelay Quantiles `json:"follow_up_delay"`
	SingleStart   Quantiles `json:"single_start"`
	FollowUpsRan  int       `json:"follow_ups_ran"` // follow-up jobs started (each should run once)
	// Waiting groups: the coordinator's heap per waiting group (allocations of the coordinator's
	// packages), the process CPU per second with them waiting and without, and how long they
	// took to finish once the group they wait on was published and done.
	HeapPerWaiting float64 `json:"heap_per_waiting_bytes"`
	IdleCPU        float64 `json:"idle_cpu_share"`    // of one core, before they are published
	WaitingCPU     float64 `json:"waiting_cpu_share"` // of one core, while they wait
	ReleaseAllS    float64 `json:"release_all_s"`     // gate published → every waiting group complete
	ReleasedPerSec float64 `json:"released_per_s"`
	// Urgent work: submit → start of a single job of priority 5 and of one of priority 0, submitted
	// together while Crowd large groups of priority 0 hold every feeder slot and wait for them.
	UrgentStartMS float64 `json:"urgent_start_ms"`
	PlainStartMS  float64 `json:"plain_start_ms"`
	Feeders       int     `json:"feeders"` // the feeder slots then; the crowd is Feeders + Crowd groups
	Checks        []Check `json:"checks"`
}

// Scenario implements Result.
func (r *ChainsResult) Scenario() string { return "chains" }

// RunChains measures what dependencies cost: the delay from a group's completion to its
// follow-up's first job start (beside a single job's submit → start, the same path), and the
// coordinator's memory and CPU for groups waiting on a group not published yet, then how fast
// they run once it is.
func RunChains(ctx context.Context, env *Env, cfg ChainsConfig) (res *ChainsResult, err error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	d, err := env.deploy(ctx, "chains")
	if err != nil {
		return nil, err
	}
	defer d.closeInto(&err)
	res = &ChainsResult{Config: cfg}
	var (
		mu       sync.Mutex
		ended    = map[string]time.Time{} // a parent group's job returned
		started  = map[string]time.Time{} // a follow-up's job, or a single job, started
		ran      int
		released int
		allDone  = make(chan struct{})
		crowdGo  = make(chan struct{}) // closed once the urgent and plain jobs are submitted
	)
	if err := d.Coordinator(coordinator.Config{}); err != nil {
		return nil, err
	}
	_, _, err = d.Worker(worker.Config{ID: "w0", Concurrency: 8}, func(jctx context.Context, j *worker.Job) ([]byte, error) {
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		switch {
		case strings.HasPrefix(j.Group, "w-"):
			if released++; released == cfg.Waiting {
				close(allDone)
			}
		case strings.HasPrefix(j.Group, "crowd-"):
			mu.Unlock()
			select { // the crowd holds every slot until the two jobs are submitted
			case <-crowdGo:
			case <-jctx.Done():
			}
			time.Sleep(time.Millisecond) // the job's work
			mu.Lock()
		case j.Group == "urgent" || j.Group == "plain":
			started[j.Group] = now
		case strings.HasSuffix(j.Group, ".then.1"), strings.HasPrefix(j.Group, "s-"):
			if _, dup := started[j.Group]; !dup && strings.HasSuffix(j.Group, ".then.1") {
				ran++
			}
			started[j.Group] = now
		default:
			defer func() { ended[j.Group] = time.Now() }()
		}
		return nil, nil
	})
	if err != nil {
		return nil, err
	}
	disp, err := d.Dispatcher()
	if err != nil {
		return nil, err
	}
	if err := d.WaitStatus(inproc.FleetReady(1, 8)); err != nil {
		return nil, err
	}
	if err := warmUp(ctx, disp, make([]byte, 8)); err != nil {
		return nil, err
	}

	// Follow-up delay, and single jobs interleaved as the reference.
	env.progressf("chains: %d groups with a follow-up, %d single jobs beside them", cfg.FollowUps, cfg.FollowUps)
	submitted := map[string]time.Time{}
	var handles []*dispatcher.Handle
	for i := range cfg.FollowUps {
		p := "p-" + strconv.Itoa(i)
		h, err := disp.Publish(ctx, p, slices.Values([]dispatcher.Job{{Payload: []byte("x")}}),
			dispatcher.Then(dispatcher.FollowUp{Jobs: []dispatcher.Job{{Payload: []byte("y")}}}))
		if err != nil {
			return nil, err
		}
		handles = append(handles, h.FollowUps()...)
		s := "s-" + strconv.Itoa(i)
		submitted[s] = time.Now()
		if _, _, err := disp.Submit(ctx, s, dispatcher.Job{Payload: []byte("z")}); err != nil {
			return nil, err
		}
		time.Sleep(cfg.Interval) // open loop: the pace of submissions, not a wait
	}
	for _, h := range handles {
		if _, err := h.WaitSummary(ctx); err != nil {
			return nil, err
		}
	}
	var delays, singles []time.Duration
	mu.Lock()
	for i := range cfg.FollowUps {
		p := "p-" + strconv.Itoa(i)
		if e, ok := ended[p]; ok {
			if s, ok := started[p+".then.1"]; ok {
				delays = append(delays, s.Sub(e))
			}
		}
		s := "s-" + strconv.Itoa(i)
		if st, ok := started[s]; ok {
			singles = append(singles, st.Sub(submitted[s]))
		}
	}
	res.FollowUpsRan = ran
	mu.Unlock()
	res.FollowUpDelay, res.SingleStart = summarize(delays), summarize(singles)

	// Waiting groups: memory and CPU while they wait, then their release.
	env.progressf("chains: %d groups waiting on one not published", cfg.Waiting)
	_ = waitQuiet(ctx, 2*time.Second)
	res.IdleCPU = cpuShare(env, cfg.Window)
	prevRate := runtime.MemProfileRate
	runtime.MemProfileRate = 512
	before := attributedHeap(coordinatorPackages)
	gate := []dispatcher.Dependency{{Group: "gate"}}
	for i := range cfg.Waiting {
		if _, _, err := disp.Submit(ctx, "w-"+strconv.Itoa(i), dispatcher.Job{Payload: []byte("w")}, dispatcher.After(gate...)); err != nil {
			runtime.MemProfileRate = prevRate
			return nil, err
		}
	}
	if err := d.WaitStatus(func(st *coordinator.Status) (bool, string) {
		return st.WaitingGroups >= cfg.Waiting, fmt.Sprintf("%d of %d groups waiting", st.WaitingGroups, cfg.Waiting)
	}); err != nil {
		runtime.MemProfileRate = prevRate
		return nil, err
	}
	after := attributedHeap(coordinatorPackages)
	runtime.MemProfileRate = prevRate
	res.HeapPerWaiting = (float64(after) - float64(before)) / float64(cfg.Waiting)
	_ = waitQuiet(ctx, 2*time.Second)
	res.WaitingCPU = cpuShare(env, cfg.Window)
	start := time.Now()
	if _, err := disp.Publish(ctx, "gate", slices.Values([]dispatcher.Job{{Payload: []byte("g")}})); err != nil {
		return nil, err
	}
	select {
	case <-allDone:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	res.ReleaseAllS = time.Since(start).Seconds()
	res.ReleasedPerSec = float64(cfg.Waiting) / res.ReleaseAllS

	if err := urgentWork(ctx, env, d, disp, cfg, res, crowdGo, func(g string) (time.Time, bool) {
		mu.Lock()
		defer mu.Unlock()
		t, ok := started[g]
		return t, ok
	}); err != nil {
		return nil, err
	}

	res.Checks = append(res.Checks,
		atLeast("follow-ups that ran, of those published (each once)", float64(res.FollowUpsRan)/float64(cfg.FollowUps), 1, "%.3f"),
		atMost("process CPU while groups wait, above idle (share of one core)", res.WaitingCPU-res.IdleCPU, 0.02, "%.3f"),
	)
	return res, nil
}

// urgentWork publishes groups of cfg.CrowdJobs jobs, cfg.Crowd more than the feeder slots, then,
// once they are admitted, a single job of priority 5 and one of priority 0 together, and records
// when each started (started reports it, once its job has ended); then it cancels the crowd.
func urgentWork(ctx context.Context, env *Env, d *deployment, disp *dispatcher.Dispatcher, cfg ChainsConfig, res *ChainsResult, crowdGo chan struct{}, started func(string) (time.Time, bool)) error {
	defer func() {
		select {
		case <-crowdGo:
		default:
			close(crowdGo) // an error: let the crowd's jobs end
		}
	}()
	st, err := d.Status()
	if err != nil {
		return err
	}
	res.Feeders = st.Feeders
	groups := res.Feeders + cfg.Crowd
	env.progressf("chains: an urgent job behind %d groups of %d jobs (%d feeder slots)", groups, cfg.CrowdJobs, res.Feeders)
	jobs := make([]dispatcher.Job, cfg.CrowdJobs)
	var crowd []*dispatcher.Handle
	for i := range groups {
		h, err := disp.Publish(ctx, "crowd-"+strconv.Itoa(i), slices.Values(jobs))
		if err != nil {
			return err
		}
		crowd = append(crowd, h)
	}
	total := uint64(groups * cfg.CrowdJobs)
	if err := d.WaitStatus(func(st *coordinator.Status) (bool, string) {
		return st.Totals.Admitted >= total, fmt.Sprintf("the crowd's %d jobs to be admitted", total)
	}); err != nil {
		return err
	}
	at := time.Now()
	urgent, _, err := disp.Submit(ctx, "urgent", dispatcher.Job{Payload: []byte("u")}, dispatcher.Priority(5))
	if err != nil {
		return err
	}
	plain, _, err := disp.Submit(ctx, "plain", dispatcher.Job{Payload: []byte("p")})
	if err != nil {
		return err
	}
	close(crowdGo)
	for g, h := range map[string]*dispatcher.Handle{"urgent": urgent, "plain": plain} {
		if _, err := h.WaitSummary(ctx); err != nil {
			return err
		}
		t, ok := started(g)
		if !ok {
			return fmt.Errorf("chains: the %s job ended without starting", g)
		}
		ms := float64(t.Sub(at)) / float64(time.Millisecond)
		if g == "urgent" {
			res.UrgentStartMS = ms
		} else {
			res.PlainStartMS = ms
		}
	}
	for _, h := range crowd {
		if err := h.Cancel(ctx); err != nil && !errors.Is(err, dispatcher.ErrGroupNotOpen) { // finished already
			return err
		}
	}
	return nil
}

// cpuShare is the process's CPU (and the external server's, if counted) over window, as a share
// of one core.
func cpuShare(env *Env, window time.Duration) float64 {
	c0, t0 := env.cpu(), time.Now()
	time.Sleep(window) // the measurement window itself, not a wait for a condition
	return float64(env.cpu()-c0) / float64(time.Since(t0))
}

// Section implements Result.
func (r *ChainsResult) Section() Section {
	c := r.Config
	s := Section{
		Scenario: r.Scenario(),
		Setup: fmt.Sprintf("1 worker × 8 slots, no-op jobs. %d groups of one job, each published with a follow-up of one job, %v apart, each followed by a single job as the reference; then %d single jobs waiting on a group not published yet, which is then published; then groups of %d jobs of 1 ms, %d more than the feeder slots, and two single jobs submitted together, of priority 5 and 0.",
			c.FollowUps, c.Interval, c.Waiting, c.CrowdJobs, c.Crowd),
		Checks: r.Checks,
	}
	s.Tables = append(s.Tables, Table{
		Title:  "follow-up delay",
		Header: []string{"measure", "p50", "p90", "p99", "max"},
		Rows: [][]string{
			quantileRow("group's job end → follow-up's job start", r.FollowUpDelay),
			quantileRow("reference: single job submit → start", r.SingleStart),
		},
	}, Table{
		Title:  fmt.Sprintf("%s waiting groups", count(c.Waiting)),
		Header: []string{"coordinator heap per waiting group", "CPU idle", "CPU while waiting", "all released and done after", "rate"},
		Rows: [][]string{{fmt.Sprintf("%.0f B", r.HeapPerWaiting), fmt.Sprintf("%.3f", r.IdleCPU), fmt.Sprintf("%.3f", r.WaitingCPU),
			fmt.Sprintf("%.2f s", r.ReleaseAllS), fmt.Sprintf("%.0f groups/s", r.ReleasedPerSec)}},
	}, Table{
		Title:  fmt.Sprintf("urgent work: %d groups of %d jobs hold the %d feeder slots, %d more wait", r.Feeders+c.Crowd, c.CrowdJobs, r.Feeders, c.Crowd),
		Header: []string{"single job of priority 5: submit → start", "single job of priority 0, submitted with it"},
		Rows:   [][]string{{fmt.Sprintf("%.1f ms", r.UrgentStartMS), fmt.Sprintf("%.1f ms", r.PlainStartMS)}},
	})
	s.Notes = []string{
		"A follow-up waits for its group's summary to be stored, then for the ready record the coordinator stores and reads back: about two JetStream round trips more than a single job's release.",
		"Heap per waiting group counts the coordinator's packages' live allocations (group record, edges, job index entry), not the server's; CPU is the whole process's, server included, as a share of one core.",
	}
	return s
}

// quantileRow is one table row of a latency distribution in milliseconds.
func quantileRow(name string, q Quantiles) []string {
	return []string{name, fmt.Sprintf("%.2f ms", q.P50), fmt.Sprintf("%.2f ms", q.P90), fmt.Sprintf("%.2f ms", q.P99), fmt.Sprintf("%.2f ms", q.Max)}
}
