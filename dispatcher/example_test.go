package dispatcher_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/integration/jstest"
	"github.com/weavejobs/weave/internal/wire"
)

// Publish a group from a generator and wait for its outcome.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := jstest.Start(ctx, jstest.Options{}) // an embedded JetStream server
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := srv.Connect()
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	// The coordinator creates the namespace's streams when it starts; here, with no coordinator,
	// as 'weave init' does. A dispatcher only checks that they exist.
	if _, err := coordinator.InitNamespace(ctx, nc, "", coordinator.StreamOptions{}); err != nil {
		log.Fatal(err)
	}

	d, err := dispatcher.New(nc, dispatcher.Config{})
	if err != nil {
		log.Fatal(err)
	}
	// Jobs are generated lazily; the key makes a job's publish idempotent.
	rows := func(yield func(dispatcher.Job) bool) {
		for i := range 3 {
			job := dispatcher.Job{
				Key:     fmt.Sprintf("row-%d", i),
				Payload: fmt.Appendf(nil, `{"row":%d}`, i),
				Require: []string{"db:shard-7"},
				Timeout: time.Minute,
			}
			if !yield(job) {
				return
			}
		}
	}
	h, err := d.Publish(ctx, "import-2024-06-01", rows)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("accepted", h.Accepted(), "jobs of", h.GroupID())

	// Workers run the jobs; the coordinator records their outcomes.
	standInCoordinator(ctx, nc, h.GroupID(), h.FirstID())

	res, err := h.Wait(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%+v\n", res.Summary)
	for _, o := range res.Jobs {
		switch o.State {
		case dispatcher.StateDone:
			fmt.Printf("%s done after %d attempts: %s\n", o.Key, o.Attempts, o.Result)
		default:
			fmt.Printf("%s %s after %d attempts: %s\n", o.Key, o.State, o.Attempts, o.Err)
		}
	}
	// Output:
	// accepted 3 jobs of import-2024-06-01
	// {Jobs:3 Done:2 Failed:1 Canceled:0 Abandoned:false}
	// row-0 done after 1 attempts: ok
	// row-1 failed after 3 attempts: shard is read-only
	// row-2 done after 2 attempts: ok
}

// Re-attach to a group from a fresh process, here a second connection, and read only its counts.
func ExampleDispatcher_Attach() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := jstest.Start(ctx, jstest.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := srv.Connect()
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	// The coordinator creates the namespace's streams when it starts; here, with no coordinator,
	// as 'weave init' does. A dispatcher only checks that they exist.
	if _, err := coordinator.InitNamespace(ctx, nc, "", coordinator.StreamOptions{}); err != nil {
		log.Fatal(err)
	}

	d, err := dispatcher.New(nc, dispatcher.Config{})
	if err != nil {
		log.Fatal(err)
	}
	h, err := d.Publish(ctx, "nightly", func(yield func(dispatcher.Job) bool) {
		_ = yield(dispatcher.Job{Key: "row-0"}) && yield(dispatcher.Job{Key: "row-1"}) && yield(dispatcher.Job{Key: "row-2"})
	})
	if err != nil {
		log.Fatal(err)
	}
	standInCoordinator(ctx, nc, h.GroupID(), h.FirstID())

	// After a restart: a new connection and Dispatcher know the group by its ID only.
	nc2, err := srv.Connect()
	if err != nil {
		log.Fatal(err)
	}
	defer nc2.Close()
	d2, err := dispatcher.New(nc2, dispatcher.Config{})
	if err != nil {
		log.Fatal(err)
	}
	sum, err := d2.Attach("nightly").WaitSummary(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%+v\n", sum)
	// Output:
	// {Jobs:3 Done:2 Failed:1 Canceled:0 Abandoned:false}
}

// Wait for one job of a group by its key: WaitKey returns once that job is final, whether or not
// the rest of the group is.
func ExampleHandle_WaitKey() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := jstest.Start(ctx, jstest.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := srv.Connect()
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	// The coordinator creates the namespace's streams when it starts; here, with no coordinator,
	// as 'weave init' does. A dispatcher only checks that they exist.
	if _, err := coordinator.InitNamespace(ctx, nc, "", coordinator.StreamOptions{}); err != nil {
		log.Fatal(err)
	}

	d, err := dispatcher.New(nc, dispatcher.Config{})
	if err != nil {
		log.Fatal(err)
	}
	h, err := d.Publish(ctx, "reindex", func(yield func(dispatcher.Job) bool) {
		_ = yield(dispatcher.Job{Key: "row-0"}) && yield(dispatcher.Job{Key: "row-1"}) && yield(dispatcher.Job{Key: "row-2"})
	})
	if err != nil {
		log.Fatal(err)
	}
	standInCoordinator(ctx, nc, h.GroupID(), h.FirstID())

	o, err := h.WaitKey(ctx, "row-1")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s %s after %d attempts: %s\n", o.Key, o.State, o.Attempts, o.Err)

	// The group has no such job: the answer comes with the group's summary.
	_, err = h.WaitKey(ctx, "row-3")
	fmt.Println(errors.Is(err, dispatcher.ErrJobNotFound))
	// Output:
	// row-1 failed after 3 attempts: shard is read-only
	// true
}

// standInCoordinator records the outcome of a three-job group the way Weave's coordinator does,
// so that these examples run without a coordinator and workers.
func standInCoordinator(ctx context.Context, nc *nats.Conn, group string, firstID uint64) {
	names, _ := wire.NewNames("")
	subject := names.OutcomeSubject(wire.GroupToken(group))
	batches := [][]byte{
		wire.AppendOutcomes(nil, []wire.Outcome{
			{ID: firstID, Key: "row-0", State: wire.FinalDone, Attempts: 1, Data: []byte("ok")},
			{ID: firstID + 1, Key: "row-1", State: wire.FinalFailed, Attempts: 3, Data: []byte("shard is read-only")},
		}),
		wire.AppendOutcomes(nil, []wire.Outcome{{ID: firstID + 2, Key: "row-2", State: wire.FinalDone, Attempts: 2, Data: []byte("ok")}}),
		wire.AppendSummary(nil, wire.GroupSummary{Jobs: 3, Done: 2, Failed: 1}),
	}
	for _, b := range batches {
		if _, err := nc.RequestWithContext(ctx, subject, b); err != nil { // JetStream acks the publish
			log.Fatal(err)
		}
	}
}
