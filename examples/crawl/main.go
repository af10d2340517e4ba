// Crawl runs a chain of groups in one process: each site is crawled as a group of its own, at
// most one page at a time per site (a group limit: politeness), and an index is built once
// every crawl group has succeeded, by a group that runs after them all. The index's job reads
// how each crawl ended from its job (worker.Job.After) without a lookup; a report follows the
// index whatever its outcome (a follow-up on completion).
//
//	go run ./examples/crawl
//
// The producer could exit once it has published: the chain is stored, and the coordinator runs
// it, also across its own restart.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/integration/jstest"
	"github.com/weavejobs/weave/worker"
)

var sites = map[string][]string{
	"go.dev":       {"/", "/doc", "/blog", "/play"},
	"nats.io":      {"/", "/docs", "/download"},
	"example.org":  {"/", "/about"},
	"pkg.go.dev":   {"/", "/search", "/about", "/license", "/badge"},
	"sqlite.org":   {"/", "/docs.html"},
	"postgres.org": {"/", "/docs", "/community"},
}

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "crawl:", err)
		os.Exit(1)
	}
}

// handle runs every job of the chain: a page fetch of a crawl group, the index, the report.
func handle(_ context.Context, j *worker.Job) ([]byte, error) {
	switch {
	case strings.HasPrefix(j.Group, "crawl:"):
		time.Sleep(2 * time.Millisecond) // a page fetch
		return []byte("<html>" + string(j.Payload) + "</html>"), nil
	case j.Group == "index":
		pages, sites := uint64(0), 0
		for _, r := range j.After {
			pages += r.Done
			sites++
		}
		return fmt.Appendf(nil, "indexed %d pages of %d sites", pages, sites), nil
	case j.Group == "report":
		if len(j.After) != 1 || j.After[0].Done != 1 {
			return nil, worker.Permanent(errors.New("the index did not succeed"))
		}
		return []byte("report sent"), nil
	}
	return nil, worker.Permanent(fmt.Errorf("unknown group %q", j.Group))
}

func run(ctx context.Context, out io.Writer) (err error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	srv, err := jstest.Start(ctx, jstest.Options{})
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	nc, err := srv.ConnectInProcess()
	if err != nil {
		return err
	}
	defer nc.Close()
	if _, err := coordinator.InitNamespace(ctx, nc, "", coordinator.StreamOptions{}); err != nil {
		return err
	}
	c, err := coordinator.New(nc, coordinator.Config{})
	if err != nil {
		return err
	}
	w, err := worker.New(nc, worker.Config{Concurrency: 8}, worker.HandlerFunc(handle))
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	wg.Go(func() { errs[0] = c.Run(runCtx) })
	wg.Go(func() { errs[1] = w.Run(runCtx) })
	defer func() {
		stop()
		wg.Wait()
		err = errors.Join(append([]error{err}, errs...)...)
	}()

	d, err := dispatcher.New(nc, dispatcher.Config{})
	if err != nil {
		return err
	}
	// The index runs after every crawl group has succeeded; the report after the index,
	// whatever its outcome.
	var deps []dispatcher.Dependency
	for site, pages := range sites {
		group := "crawl:" + site
		// Politeness: one page of a site at a time, across the whole fleet.
		if err := d.SetLimit(ctx, dispatcher.Limit{Kind: dispatcher.LimitGroup, Name: group, Concurrency: 1}); err != nil {
			return err
		}
		if _, err := d.Publish(ctx, group, func(yield func(dispatcher.Job) bool) {
			for _, p := range pages {
				if !yield(dispatcher.Job{Key: p, Payload: []byte(site + p)}) {
					return
				}
			}
		}); err != nil {
			return err
		}
		deps = append(deps, dispatcher.Dependency{Group: group})
	}
	index, err := d.Publish(ctx, "index", oneJob("build"), dispatcher.After(deps...),
		dispatcher.Then(dispatcher.FollowUp{When: dispatcher.OnCompletion, Group: "report", Jobs: []dispatcher.Job{{Payload: []byte("send")}}}))
	if err != nil {
		return err
	}
	for _, h := range append([]*dispatcher.Handle{index}, index.FollowUps()...) {
		res, err := h.Wait(ctx)
		if err != nil {
			return err
		}
		for _, o := range res.Jobs {
			fmt.Fprintf(out, "%s: %s: %s%s\n", h.GroupID(), o.State, o.Result, o.Err)
		}
	}
	return nil
}

func oneJob(payload string) func(yield func(dispatcher.Job) bool) {
	return func(yield func(dispatcher.Job) bool) { yield(dispatcher.Job{Payload: []byte(payload)}) }
}
