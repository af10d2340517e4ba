// Quickstart runs Weave end to end in one process: an embedded NATS JetStream server, a
// coordinator, a worker and a dispatcher that publishes a group of jobs and waits for its
// outcome.
//
//	go run ./examples/quickstart
//
// In production each part runs on its own (weave coordinator, your workers built with package
// worker, your producers with package dispatcher) against a NATS server or cluster.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/integration/jstest"
	"github.com/weavejobs/weave/worker"
)

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

// greet is the job handler: it greets the name in the payload. A busy name fails its first
// attempt (the coordinator retries it); an empty name can never succeed.
func greet(_ context.Context, j *worker.Job) ([]byte, error) {
	name := string(j.Payload)
	switch {
	case name == "":
		return nil, worker.Permanent(errors.New("empty name"))
	case name == "linus" && j.Attempt == 1:
		return nil, worker.RetryAfter(10*time.Millisecond, errors.New("busy, try again"))
	}
	return []byte("Hello, " + strings.ToUpper(name[:1]) + name[1:] + "!"), nil
}

func run(ctx context.Context, out io.Writer) (err error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()

	// An embedded JetStream server in a temporary directory, removed by Shutdown.
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

	// The namespace's streams: the coordinator creates them when it starts, but the worker and
	// the dispatcher only check that they exist, so create them first ('weave init' does this
	// for a deployment).
	if _, err := coordinator.InitNamespace(ctx, nc, "", coordinator.StreamOptions{}); err != nil {
		return err
	}

	// The coordinator and the worker run until the end of run.
	c, err := coordinator.New(nc, coordinator.Config{})
	if err != nil {
		return err
	}
	w, err := worker.New(nc, worker.Config{Concurrency: 4}, worker.HandlerFunc(greet))
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

	// Publish a group of jobs, streamed from an iterator, and wait for every job's outcome.
	d, err := dispatcher.New(nc, dispatcher.Config{})
	if err != nil {
		return err
	}
	names := []string{"ada", "grace", "linus", "margaret", ""}
	h, err := d.Publish(ctx, "greetings", func(yield func(dispatcher.Job) bool) {
		for i, name := range names {
			if !yield(dispatcher.Job{Key: fmt.Sprint("job-", i), Payload: []byte(name)}) {
				return
			}
		}
	})
	if err != nil {
		return err
	}
	res, err := h.Wait(ctx)
	if err != nil {
		return err
	}

	slices.SortFunc(res.Jobs, func(a, b dispatcher.JobOutcome) int { return strings.Compare(a.Key, b.Key) })
	for _, o := range res.Jobs {
		switch o.State {
		case dispatcher.StateDone:
			fmt.Fprintf(out, "%s: %s after %d attempt(s): %s\n", o.Key, o.State, o.Attempts, o.Result)
		default:
			fmt.Fprintf(out, "%s: %s after %d attempt(s): %s\n", o.Key, o.State, o.Attempts, o.Err)
		}
	}
	s := res.Summary
	fmt.Fprintf(out, "group %s: %d jobs, %d done, %d failed, %d canceled\n", h.GroupID(), s.Jobs, s.Done, s.Failed, s.Canceled)
	return nil
}
