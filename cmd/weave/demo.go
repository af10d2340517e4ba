package main

import (
	"fmt"
	"strings"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/weavejobs/weave/cmd/weave/internal/demo"
	"github.com/weavejobs/weave/spreader"
)

// newDemoCmd is weave demo: its flags and output; the crawl itself is package demo.
func newDemoCmd(g *globals) *cobra.Command {
	o := demo.Options{Jobs: 5000, Sites: 250, Workers: 3, Concurrency: 4, Seed: 1, FailRate: 0.01, SiteConcurrency: 4, SiteRate: 500}
	var (
		policy        string
		withDashboard bool
		listen        string
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Crawl a simulated web on an embedded server: spread versus a FIFO queue",
		Long: `Demo starts everything in this process: an embedded NATS JetStream server (in a temporary
directory, removed at the end), a coordinator and a few workers holding different regions. It
crawls a simulated web: each site is a group, each page a job. Site sizes are very skewed (one
huge site, a few large ones, many small ones); a polite crawler must not hammer a site, so Weave
spreads each site's pages apart. Some sites can only be reached from one region (the job
requires it), some are better crawled from one (it prefers it). Fetches take 1-4 ms and
rarely fail with a 503, which is retried.

At the end it prints what the handlers measured (per-site peak concurrency and average pages
in flight) next to what a plain FIFO queue would do with the same workload.

With --dashboard it serves weave dashboard of the demo's namespace (on --listen): the crawl
starts once the page is open (or after 30s), and everything keeps running after the crawl, for
the dashboard to show, until Ctrl-C. The default crawl takes a few seconds: --jobs 100000 gives
more time to watch.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := spreader.ParsePolicy(policy)
			if err != nil {
				return usageError{err}
			}
			o.Policy = p
			if err := o.Validate(); err != nil {
				return usageError{err}
			}
			o.Log = g.log
			if f := cmd.Flag("log-level"); f == nil || !f.Changed {
				// The components' info logs would drown the progress line.
				o.Log = g.log.Level(zerolog.WarnLevel)
			}
			o.Progress, o.Live = cmd.ErrOrStderr(), isTerminal(cmd.ErrOrStderr())
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			if withDashboard {
				o.Dashboard = listen
				o.DashboardOpen = func(url string) {
					fmt.Fprintf(cmd.OutOrStdout(), "Weave dashboard of the demo: %s\nThe crawl starts when the page is open (or in %v).\n", url, demo.DashboardWait)
				}
				o.Crawled = func(res *demo.Result) {
					res.Print(cmd.OutOrStdout())
					fmt.Fprintf(cmd.OutOrStdout(), "\nThe dashboard stays open; Ctrl-C to stop.\n")
				}
			}
			res, err := demo.Run(ctx, o)
			if err != nil {
				return err
			}
			if !withDashboard {
				res.Print(cmd.OutOrStdout())
			}
			if problems := res.Problems(); len(problems) > 0 {
				return fmt.Errorf("demo: %s", strings.Join(problems, "; "))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Jobs, "jobs", o.Jobs, "pages to crawl, in total")
	f.IntVar(&o.Sites, "sites", o.Sites, "sites (groups) the pages belong to")
	f.IntVar(&o.Workers, "workers", o.Workers, "workers; they hold regions eu, us, none, eu, us, none, ...")
	f.IntVar(&o.Concurrency, "concurrency", o.Concurrency, "slots (concurrent jobs) per worker")
	f.Uint64Var(&o.Seed, "seed", o.Seed, "seed of the workload (sizes, latencies, failures)")
	f.Float64Var(&o.FailRate, "fail-rate", o.FailRate, "share of pages whose first fetch fails with a 503 (retried)")
	f.StringVar(&policy, "policy", spreader.LeastInFlight.String(), "scheduling policy: least-in-flight or round-robin")
	f.IntVar(&o.MaxPerSite, "max-per-site", 0, "cap on the pages of one site fetched at once (0: none, spread only)")
	f.IntVar(&o.SiteConcurrency, "site-concurrency", o.SiteConcurrency, "politeness: at most this many fetches of one site at once, fleet-wide (a weave limit per site; 0: none)")
	f.IntVar(&o.SiteRate, "site-rate", o.SiteRate, "politeness: at most this many fetches of one site started per second (a weave limit per site; 0: none)")
	f.BoolVar(&withDashboard, "dashboard", false, "serve weave dashboard of the demo, and keep it open after the crawl until Ctrl-C")
	f.StringVar(&listen, "listen", "127.0.0.1:8080", "with --dashboard: the address to serve it on")
	registerNamespace(f, &o.Namespace)
	return cmd
}
