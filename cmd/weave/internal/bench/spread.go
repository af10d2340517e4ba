package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/weavejobs/weave/cmd/weave/internal/sim"
	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/worker"
)

// SpreadConfig configures the spread scenario. Zero fields take the defaults.
type SpreadConfig struct {
	Jobs        int           `json:"jobs"`        // default 5,000
	Groups      int           `json:"groups"`      // default 200
	Zipf        float64       `json:"zipf"`        // exponent of the group sizes; default 1.0
	Workers     int           `json:"workers"`     // default 3
	Concurrency int           `json:"concurrency"` // slots per worker; default 4 (12 slots)
	MinTask     time.Duration `json:"min_task_ns"` // task durations are uniform in [MinTask, MaxTask]; default 1ms
	MaxTask     time.Duration `json:"max_task_ns"` // default 4ms
	Seed        uint64        `json:"seed"`        // default 1
}

func (c *SpreadConfig) defaults() error {
	setDefault(&c.Jobs, 5000)
	setDefault(&c.Groups, 200)
	setDefault(&c.Zipf, 1.0)
	setDefault(&c.Workers, 3)
	setDefault(&c.Concurrency, 4)
	setDefault(&c.MinTask, time.Millisecond)
	setDefault(&c.MaxTask, 4*time.Millisecond)
	setDefault(&c.Seed, 1)
	switch {
	case c.Jobs < 1 || c.Groups < 1 || c.Workers < 1 || c.Concurrency < 1 || c.Zipf < 0:
		return fmt.Errorf("spread: jobs, groups, workers and concurrency must be positive")
	case c.Groups > c.Jobs:
		return fmt.Errorf("spread: %d groups need at least as many jobs (%d)", c.Groups, c.Jobs)
	case c.MinTask <= 0 || c.MaxTask < c.MinTask:
		return fmt.Errorf("spread: task durations %v..%v", c.MinTask, c.MaxTask)
	}
	return nil
}

// spreadWorkload is the spread scenario's jobs: group sizes by rank (largest first), the order
// the groups are published in, and each job's duration.
type spreadWorkload struct {
	sizes []int
	order []int             // ranks in publish order
	tasks [][]time.Duration // by rank, then job index
}

func newSpreadWorkload(c SpreadConfig) spreadWorkload {
	r := rand.New(rand.NewPCG(c.Seed, 0x5eed))
	w := spreadWorkload{sizes: zipfSizes(c.Jobs, c.Groups, c.Zipf)}
	w.order = r.Perm(c.Groups)
	w.tasks = make([][]time.Duration, c.Groups)
	span := int64(c.MaxTask - c.MinTask)
	for g, n := range w.sizes {
		w.tasks[g] = make([]time.Duration, n)
		for i := range n {
			w.tasks[g][i] = c.MinTask + time.Duration(r.Int64N(span+1))
		}
	}
	return w
}

// queue returns the jobs in the order a FIFO queue holds them: publish order.
func (w spreadWorkload) queue() []sim.Job {
	var q []sim.Job
	for _, g := range w.order {
		for _, d := range w.tasks[g] {
			q = append(q, sim.Job{Group: g, Dur: d})
		}
	}
	return q
}

// SpreadSide is how one scheduler ran the workload.
type SpreadSide struct {
	MaxPeak         int       `json:"max_peak"`           // the most jobs of one group running at once, over all groups
	P90Peak         int       `json:"p90_peak"`           // 90th percentile of the groups' peaks
	GroupsOver1     int       `json:"groups_peak_over_1"` // groups that ever had two or more jobs running
	LargestPeak     int       `json:"largest_group_peak"`
	CrowdedStarts   int       `json:"crowded_starts"`   // starts while at least Feeders groups had jobs never started
	CrowdedOverlaps int       `json:"crowded_overlaps"` // of those, starts that found their group already running
	OverlapShare    float64   `json:"overlap_share"`
	Gaps            Quantiles `json:"gaps"` // between consecutive starts of the same group
	MakespanS       float64   `json:"makespan_s"`
}

// SpreadResult is what the spread scenario measured.
type SpreadResult struct {
	Config      SpreadConfig `json:"config"`
	Slots       int          `json:"slots"`
	Feeders     int          `json:"feeders"` // the most feeder slots the coordinator used during the run
	LargestSize int          `json:"largest_group"`
	MedianSize  int          `json:"median_group"`
	Weave       SpreadSide   `json:"weave"`
	FIFO        SpreadSide   `json:"fifo"` // simulated: same jobs, same slots, publish order, no overhead
	Checks      []Check      `json:"checks"`
}

// Scenario implements Result.
func (r *SpreadResult) Scenario() string { return "spread" }

func spreadSide(runs []sim.Run, sizes []int, feeders int) SpreadSide {
	c := sim.Measure(runs, len(sizes), feeders)
	peaks := slices.Clone(c.Peaks)
	slices.Sort(peaks)
	s := SpreadSide{
		MaxPeak: percentile(peaks, 100), P90Peak: percentile(peaks, 90),
		LargestPeak:   c.Peaks[slices.Index(sizes, slices.Max(sizes))],
		CrowdedStarts: c.CrowdedStarts, CrowdedOverlaps: c.CrowdedOverlaps,
		Gaps: summarize(c.Gaps), MakespanS: c.Makespan.Seconds(),
	}
	for _, p := range c.Peaks {
		if p > 1 {
			s.GroupsOver1++
		}
	}
	if c.CrowdedStarts > 0 {
		s.OverlapShare = float64(c.CrowdedOverlaps) / float64(c.CrowdedStarts)
	}
	return s
}

// RunSpread publishes groups of Zipf-distributed sizes (all before the workers start), runs them
// on Workers × Concurrency slots with tasks of random durations, and measures from the handlers'
// side each group's peak concurrency and the gaps between consecutive starts of a group. A plain
// FIFO queue is simulated on the same jobs in publish order, with the same slots and no overhead:
// it runs a group's jobs back to back.
func RunSpread(ctx context.Context, env *Env, cfg SpreadConfig) (res *SpreadResult, err error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	wl := newSpreadWorkload(cfg)
	slots := cfg.Workers * cfg.Concurrency
	d, err := env.deploy(ctx, "spread")
	if err != nil {
		return nil, err
	}
	defer d.closeInto(&err)
	if err := d.Coordinator(coordinator.Config{}); err != nil {
		return nil, err
	}
	disp, err := d.Dispatcher()
	if err != nil {
		return nil, err
	}
	env.progressf("spread: publishing %s jobs in %d groups", count(cfg.Jobs), cfg.Groups)
	handles := make([]*dispatcher.Handle, 0, cfg.Groups)
	for _, g := range wl.order {
		h, err := disp.Publish(ctx, fmt.Sprint("g", g), func(yield func(dispatcher.Job) bool) {
			for i := range wl.sizes[g] {
				p := make([]byte, 8)
				binary.LittleEndian.PutUint32(p, uint32(g))
				binary.LittleEndian.PutUint32(p[4:], uint32(i))
				if !yield(dispatcher.Job{Payload: p}) {
					return
				}
			}
		})
		if err != nil {
			return nil, err
		}
		handles = append(handles, h)
	}
	if err := d.WaitStatus(func(st *coordinator.Status) (bool, string) {
		return st.Totals.Admitted >= uint64(cfg.Jobs), fmt.Sprintf("%d of %d jobs admitted", st.Totals.Admitted, cfg.Jobs)
	}); err != nil {
		return nil, err
	}

	log := newRunLog()
	handler := func(ctx context.Context, j *worker.Job) ([]byte, error) {
		if len(j.Payload) != 8 {
			return nil, worker.Permanent(fmt.Errorf("payload of %d bytes", len(j.Payload)))
		}
		g, i := int(binary.LittleEndian.Uint32(j.Payload)), int(binary.LittleEndian.Uint32(j.Payload[4:]))
		if g >= len(wl.tasks) || i >= len(wl.tasks[g]) {
			return nil, worker.Permanent(fmt.Errorf("no job %d of group %d", i, g))
		}
		return nil, log.work(ctx, g, wl.tasks[g][i])
	}
	for i := range cfg.Workers {
		if _, _, err := d.Worker(worker.Config{ID: fmt.Sprint("w", i), Concurrency: cfg.Concurrency}, handler); err != nil {
			return nil, err
		}
	}
	// The coordinator's feeder count follows the fleet and the adaptive prefetch: sample it.
	var mu sync.Mutex // guards feeders
	feeders := slots + 1
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			if st, err := d.Status(); err == nil {
				mu.Lock()
				feeders = max(feeders, st.Feeders)
				mu.Unlock()
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	})
	env.progressf("spread: running on %d × %d slots", cfg.Workers, cfg.Concurrency)
	for _, h := range handles {
		sum, err := h.WaitSummary(ctx)
		if err == nil && sum.Done != sum.Jobs {
			err = fmt.Errorf("group %s: summary %+v", h.GroupID(), sum)
		}
		if err != nil {
			close(stop)
			sampler.Wait()
			return nil, err
		}
	}
	close(stop)
	sampler.Wait()

	mu.Lock()
	defer mu.Unlock()
	sizes := slices.Clone(wl.sizes)
	slices.Sort(sizes)
	res = &SpreadResult{
		Config: cfg, Slots: slots, Feeders: feeders,
		LargestSize: slices.Max(sizes), MedianSize: percentile(sizes, 50),
		Weave: spreadSide(log.intervals(), wl.sizes, feeders),
		FIFO:  spreadSide(sim.FIFO(wl.queue(), slots), wl.sizes, feeders),
	}
	res.Checks = []Check{atMost("starts finding their group running while ≥ F groups wait (%)", 100*res.Weave.OverlapShare, 1, "%.2f")}
	return res, nil
}

// Section implements Result.
func (r *SpreadResult) Section() Section {
	c := r.Config
	row := func(name string, w, f string) []string { return []string{name, w, f} }
	t := Table{
		Header: []string{"", "Weave (measured)", "FIFO (simulated)"},
		Rows: [][]string{
			row("peak concurrency of a group: max", fmt.Sprint(r.Weave.MaxPeak), fmt.Sprint(r.FIFO.MaxPeak)),
			row("peak concurrency of a group: p90", fmt.Sprint(r.Weave.P90Peak), fmt.Sprint(r.FIFO.P90Peak)),
			row(fmt.Sprintf("peak of the largest group (%s jobs)", count(r.LargestSize)), fmt.Sprint(r.Weave.LargestPeak), fmt.Sprint(r.FIFO.LargestPeak)),
			row("groups that ever ran 2+ jobs at once", fmt.Sprintf("%d of %d", r.Weave.GroupsOver1, c.Groups), fmt.Sprintf("%d of %d", r.FIFO.GroupsOver1, c.Groups)),
			row(fmt.Sprintf("starts while ≥ %d groups wait that found their group running", r.Feeders),
				fmt.Sprintf("%d of %d", r.Weave.CrowdedOverlaps, r.Weave.CrowdedStarts), fmt.Sprintf("%d of %d", r.FIFO.CrowdedOverlaps, r.FIFO.CrowdedStarts)),
			row("gap between starts of a group, ms: p10", msec(r.Weave.Gaps.P10), msec(r.FIFO.Gaps.P10)),
			row("p50", msec(r.Weave.Gaps.P50), msec(r.FIFO.Gaps.P50)),
			row("p90", msec(r.Weave.Gaps.P90), msec(r.FIFO.Gaps.P90)),
			row("max", msec(r.Weave.Gaps.Max), msec(r.FIFO.Gaps.Max)),
			row("makespan, s", fmt.Sprintf("%.2f", r.Weave.MakespanS), fmt.Sprintf("%.2f", r.FIFO.MakespanS)),
		},
	}
	return Section{
		Scenario: r.Scenario(),
		Setup: fmt.Sprintf("%s jobs in %d groups of Zipf sizes (exponent %g: largest %s, median %d), published in random order before %d workers × %d slots start; tasks uniform in %v–%v.",
			count(c.Jobs), c.Groups, c.Zipf, count(r.LargestSize), r.MedianSize, c.Workers, c.Concurrency, c.MinTask, c.MaxTask),
		Tables: []Table{t},
		Notes: []string{
			"Weave is measured from the handlers' side; FIFO is simulated on the same jobs in publish order with the same slots and no overhead (each free slot takes the next job), so its makespan is a lower bound.",
			"Once fewer groups than feeder slots remain, the remaining groups take all the slots: the largest group, last to finish, ends with every slot; the peaks show that tail, the overlap row the time before it.",
			fmt.Sprintf("F = %d is the most feeder slots the coordinator used during the run (slots + adaptive prefetch); while at least F groups wait, the spread rule says a group should not have two jobs running.", r.Feeders),
		},
		Checks: r.Checks,
	}
}
