// Package demo is weave demo's crawl of a simulated web: a workload of sites (groups) and pages
// (jobs) of very skewed sizes, crawled by an in-process coordinator and workers on an embedded
// JetStream server, measured from the handlers' side next to a FIFO queue simulated on the same
// workload. Run does it all and returns a Result, which Print renders; the command in cmd/weave
// only parses the flags into Options.
package demo

import (
	"context"
	"fmt"
	"io"
	"iter"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/weavejobs/weave/cmd/weave/internal/dashboard"
	"github.com/weavejobs/weave/cmd/weave/internal/inproc"
	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/internal/wire"
	"github.com/weavejobs/weave/spreader"
	"github.com/weavejobs/weave/worker"
)

// Options configure Run.
type Options struct {
	Jobs, Sites, Workers, Concurrency int
	MaxPerSite                        int
	// SiteConcurrency and SiteRate are each site's politeness: a limit (weave limit) on its
	// group of at most SiteConcurrency fetches at once and SiteRate starts per second; 0: none.
	SiteConcurrency, SiteRate int
	FailRate                  float64
	Seed                      uint64
	Policy                    spreader.Policy
	Namespace                 string

	// Progress receives the live progress; nil for none. Live redraws one line in place (a
	// terminal); otherwise a line is written every second.
	Progress io.Writer
	Live     bool
	// Log receives the components' logs.
	Log zerolog.Logger

	// Dashboard, if not empty, is the address where Run serves weave dashboard of the demo's
	// namespace, from before the crawl until ctx ends: Run waits (at most DashboardWait) for a
	// page to open before it crawls, calls Crawled with the result when the crawl is over, and
	// keeps everything running until ctx ends.
	Dashboard string
	// DashboardOpen is called with the dashboard's URL once it serves.
	DashboardOpen func(url string)
	// Crawled receives the result with Dashboard set, while the dashboard still serves.
	Crawled func(*Result)
}

// DashboardWait bounds how long Run waits for a dashboard page to open before it crawls.
const DashboardWait = 30 * time.Second

func (o *Options) Validate() error {
	switch {
	case o.Workers < 1 || o.Workers > 64:
		return fmt.Errorf("--workers %d outside 1..64", o.Workers)
	case o.Concurrency < 1 || o.Concurrency > 256:
		return fmt.Errorf("--concurrency %d outside 1..256", o.Concurrency)
	case o.Sites < 1:
		return fmt.Errorf("--sites %d: need at least 1", o.Sites)
	case o.Jobs < o.Sites:
		return fmt.Errorf("--jobs %d: need at least one page per site (--sites %d)", o.Jobs, o.Sites)
	case o.Jobs > 1_000_000:
		return fmt.Errorf("--jobs %d: at most 1,000,000", o.Jobs)
	case o.FailRate < 0 || o.FailRate > 0.5:
		return fmt.Errorf("--fail-rate %v outside 0..0.5", o.FailRate)
	case o.MaxPerSite < 0:
		return fmt.Errorf("--max-per-site %d is negative", o.MaxPerSite)
	case o.SiteConcurrency < 0 || o.SiteConcurrency > wire.MaxLimitConcurrency:
		return fmt.Errorf("--site-concurrency %d outside 0..%d", o.SiteConcurrency, wire.MaxLimitConcurrency)
	case o.SiteRate < 0 || o.SiteRate > wire.MaxLimitRate:
		return fmt.Errorf("--site-rate %d outside 0..%d", o.SiteRate, wire.MaxLimitRate)
	}
	return nil
}

// workerRegions are the regions workers hold, in turn; "" is a worker holding none.
var workerRegions = []string{"eu", "us", ""}

// workerFleet returns each worker's ID and held resources.
func workerFleet(n int) (ids []string, held [][]string) {
	for i := range n {
		r := workerRegions[i%len(workerRegions)]
		name := r
		if name == "" {
			name = "any"
		}
		if i >= len(workerRegions) {
			name += strconv.Itoa(i/len(workerRegions) + 1)
		}
		ids = append(ids, "worker-"+name)
		if r == "" {
			held = append(held, nil)
		} else {
			held = append(held, []string{r})
		}
	}
	return ids, held
}

// Result is what Run measured.
type Result struct {
	Options  Options
	Workload *workload
	Workers  []string
	Held     [][]string
	Slots    int
	Wall     time.Duration
	Summary  dispatcher.Summary // summed over the sites' outcomes, as the dispatcher reports them
	Weave    trackerResult
	FIFO     fifoResult
	Status   *coordinator.Status // the coordinator's view at the end
}

// retryAfter503 is how long a site that answered 503 asks the crawler to wait.
const retryAfter503 = 20 * time.Millisecond

// waiters is how many groups' outcomes the demo waits for at once.
const waiters = 8

// Run runs the whole demo in-process and returns its measurements. It stops everything it
// started before returning.
func Run(ctx context.Context, o Options) (*Result, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	ids, held := workerFleet(o.Workers)
	var regions []string
	for _, h := range held {
		for _, r := range h {
			if !slices.Contains(regions, r) {
				regions = append(regions, r)
			}
		}
	}
	w, err := generateWorkload(workloadConfig{Jobs: o.Jobs, Sites: o.Sites, Seed: o.Seed, Regions: regions, FailRate: o.FailRate})
	if err != nil {
		return nil, err
	}
	slots := o.Workers * o.Concurrency
	res := &Result{Options: o, Workload: w, Workers: ids, Held: held, Slots: slots}
	// Weave's auto feeder count is slots + 1: with at least that many sites waiting, no site
	// needs a second slot.
	crowded := slots + 1
	res.FIFO = simulateFIFO(w.publishOrder(), len(w.Sites), slots, crowded)
	tr := newTracker(w, crowded)

	// The server's info log is its banner; show it only when debugging.
	srvLog := o.Log
	if lvl := o.Log.GetLevel(); lvl > zerolog.DebugLevel && lvl < zerolog.WarnLevel {
		srvLog = o.Log.Level(zerolog.WarnLevel)
	}
	// Components run until the crawl is over; the deployment stops the workers first, so that
	// their last reports reach the coordinator, then the coordinator.
	dep, err := inproc.New(ctx, inproc.Options{
		Namespace: o.Namespace,
		Name:      "demo",
		InProcess: true,
		Log:       o.Log,
		ServerLog: srvLog.With().Str("component", "nats-server").Logger(),
	})
	if err != nil {
		return nil, err
	}
	defer dep.Close() // on the way out after a failure; after the crawl it is closed below
	if err := dep.Coordinator(coordinator.Config{
		Policy: o.Policy,
		// F = slots + 1, the spreader's setting: at most one job released beyond the slots, so
		// a site alone at the start cannot queue a run of its pages ahead of the sites published
		// just after it. (The default adapts F to the jobs, for throughput.)
		Feeders:             o.Workers*o.Concurrency + 1,
		MaxInFlightPerGroup: o.MaxPerSite,
		// The crawl is published at once, by design: a burst that pending_growth (1,000 by
		// default) would report as a warning in the middle of the demo's output, intermittently
		// (it depends on how fast the crawl drains). Above the crawl's size it cannot fire.
		Alarms: coordinator.AlarmConfig{PendingGrowth: o.Jobs + 1},
	}); err != nil {
		return nil, err
	}
	// Workers announce themselves at once with a heartbeat; a coordinator that is ready to
	// listen sees them without waiting for the next one.
	for i, id := range ids {
		cfg := worker.Config{ID: id, Resources: held[i], Concurrency: o.Concurrency}
		if _, _, err := dep.Worker(cfg, crawlHandler(w, tr, held[i])); err != nil {
			return nil, err
		}
	}
	if err := dep.WaitStatus(inproc.FleetReady(len(ids), slots)); err != nil {
		return nil, err
	}
	d, err := dep.Dispatcher()
	if err != nil {
		return nil, err
	}
	if err := politeness(ctx, dep, d, w, o); err != nil {
		return nil, err
	}
	if o.Dashboard != "" {
		if err := serveDashboard(ctx, dep, o); err != nil {
			return nil, err
		}
	}

	stopProgress := startProgress(o, w.Jobs, tr)
	start := time.Now()
	sum, err := crawl(ctx, d, w, tr)
	res.Wall = time.Since(start)
	stopProgress()
	if err != nil {
		return nil, err
	}
	res.Summary = sum
	if st, err := dep.Status(); err == nil {
		res.Status = st
	}
	if o.Dashboard != "" {
		// The crawl is over; the dashboard shows its end until ctx ends.
		res.Weave = tr.result()
		if o.Crawled != nil {
			o.Crawled(res)
		}
		<-ctx.Done()
	}
	// Stop in order and check how each component ended.
	if err := dep.Close(); err != nil {
		return nil, err
	}
	res.Weave = tr.result()
	return res, nil
}

// politeness sets each site's limit (its group's), and waits until the coordinator applies them
// all, so that none of a site's pages starts before its limit holds.
func politeness(ctx context.Context, dep *inproc.Deployment, d *dispatcher.Dispatcher, w *workload, o Options) error {
	if o.SiteConcurrency == 0 && o.SiteRate == 0 {
		return nil
	}
	for _, s := range w.Sites {
		l := dispatcher.Limit{Kind: dispatcher.LimitGroup, Name: s.Name, Concurrency: o.SiteConcurrency, Rate: o.SiteRate}
		if o.SiteRate > 0 {
			l.Per = time.Second
		}
		if err := d.SetLimit(ctx, l); err != nil {
			return fmt.Errorf("politeness of %s: %w", s.Name, err)
		}
	}
	return dep.WaitStatus(func(st *coordinator.Status) (bool, string) {
		return len(st.Limits) == len(w.Sites), fmt.Sprintf("%d of %d sites' limits applied", len(st.Limits), len(w.Sites))
	})
}

// serveDashboard starts weave dashboard on o.Dashboard, on a connection of its own, as one of
// dep's components, and waits for a page to open (or DashboardWait, or ctx's end).
func serveDashboard(ctx context.Context, dep *inproc.Deployment, o Options) error {
	nc, err := dep.Connect("dashboard")
	if err != nil {
		return err
	}
	d, err := dispatcher.New(nc, dispatcher.Config{Namespace: dep.Namespace(), Logger: o.Log})
	if err != nil {
		return err
	}
	backend, err := dashboard.NewBackend(nc, dep.Namespace(), d)
	if err != nil {
		return err
	}
	srv, err := dashboard.New(dashboard.Config{Backend: backend, Namespace: dep.Namespace(), Log: o.Log})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.Dashboard)
	if err != nil {
		return fmt.Errorf("dashboard: %w", err)
	}
	dep.Run("dashboard", func(ctx context.Context) error {
		defer d.Close()
		return srv.Serve(ctx, ln)
	})
	if o.DashboardOpen != nil {
		o.DashboardOpen("http://" + ln.Addr().String() + "/")
	}
	select {
	case <-srv.Watched():
	case <-time.After(DashboardWait):
	case <-ctx.Done():
	}
	return nil
}

// crawl publishes every site as a group, in workload order, and waits for all of their
// outcomes, a few groups at a time. It returns the sum of the groups' summaries.
func crawl(ctx context.Context, d *dispatcher.Dispatcher, w *workload, tr *tracker) (dispatcher.Summary, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	handles := make(chan *dispatcher.Handle, len(w.Sites))
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(handles)
		for i := range w.Sites {
			s := &w.Sites[i]
			h, err := d.Publish(ctx, s.Name, siteJobs(s))
			if err != nil {
				cancel(fmt.Errorf("publish site %s: %w", s.Name, err))
				return
			}
			tr.announce(s.Rank)
			handles <- h
		}
	})
	var (
		mu    sync.Mutex
		total dispatcher.Summary
	)
	for range waiters {
		wg.Go(func() {
			for h := range handles {
				s, err := h.WaitSummary(ctx)
				if err != nil {
					cancel(fmt.Errorf("wait for site %s: %w", h.GroupID(), err))
					return
				}
				mu.Lock()
				total.Jobs += s.Jobs
				total.Done += s.Done
				total.Failed += s.Failed
				total.Canceled += s.Canceled
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return total, err
	}
	return total, nil
}

// siteJobs yields a site's pages as jobs, with the site's region affinity.
func siteJobs(s *site) iter.Seq[dispatcher.Job] {
	return func(yield func(dispatcher.Job) bool) {
		for _, p := range s.Pages {
			j := dispatcher.Job{Key: p.Path, Payload: []byte("GET https://" + s.Name + p.Path)}
			switch s.Affinity {
			case requireRegion:
				j.Require = []string{s.Region}
			case preferRegion:
				j.Prefer = []string{s.Region}
			}
			if !yield(j) {
				return
			}
		}
	}
}

// crawlHandler simulates fetching a page, on a worker holding regions: it takes the page's
// latency, and its first attempts fail with a 503 if the page is flaky.
func crawlHandler(w *workload, tr *tracker, regions []string) worker.HandlerFunc {
	sites := map[string]*site{}
	for i := range w.Sites {
		sites[w.Sites[i].Name] = &w.Sites[i]
	}
	return func(ctx context.Context, j *worker.Job) ([]byte, error) {
		s := sites[j.Group]
		i, ok := pageIndex(j.Key)
		if s == nil || !ok || i >= len(s.Pages) {
			return nil, worker.Permanent(fmt.Errorf("no page %q on site %q", j.Key, j.Group))
		}
		p := s.Pages[i]
		began := tr.start(s.Rank, j.Attempt, regions)
		t := time.NewTimer(p.Latency)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			tr.finish(s.Rank, began, false)
			return nil, ctx.Err()
		}
		if j.Attempt <= p.Flaky {
			tr.finish(s.Rank, began, false)
			return nil, worker.RetryAfter(retryAfter503, fmt.Errorf("GET https://%s%s: 503 Service Unavailable", s.Name, p.Path))
		}
		tr.finish(s.Rank, began, true)
		return []byte("200 OK"), nil
	}
}

// pageIndex inverts page.Path: "/" is page 0, "/page/N" page N.
func pageIndex(path string) (int, bool) {
	if path == "/" {
		return 0, true
	}
	n, ok := strings.CutPrefix(path, "/page/")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(n)
	return i, err == nil && i > 0
}
