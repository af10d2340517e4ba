package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/integration/jstest"
	"github.com/weavejobs/weave/internal/wire"
	"github.com/weavejobs/weave/worker"
)

// A worker holding one resource runs a job and drains when its context is canceled.
func Example() {
	srv, err := jstest.Start(context.Background(), jstest.Options{})
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
	// as 'weave init' does. A worker only checks that they exist.
	if _, err := coordinator.InitNamespace(context.Background(), nc, "", coordinator.StreamOptions{}); err != nil {
		log.Fatal(err)
	}

	ran := make(chan struct{})
	w, err := worker.New(nc, worker.Config{Resources: []string{"shard-7"}, Concurrency: 4},
		worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
			defer close(ran)
			fmt.Printf("job %d of group %s, attempt %d: %s\n", j.ID, j.Group, j.Attempt, j.Payload)
			return []byte(strings.ToUpper(string(j.Payload))), nil
		}))
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()

	// The coordinator releases jobs to the worker's pool; this example plays its part.
	release(nc, w.Pool(), wire.WorkJob{ID: 1, Attempt: 1, Group: "thumbnails", Payload: []byte("cat.png")})

	<-ran
	stop() // drain: the job's report is persisted and its batch acked before Run returns
	fmt.Println("Run returned:", <-done)
	// Output:
	// job 1 of group thumbnails, attempt 1: cat.png
	// Run returned: <nil>
}

// release publishes a work batch to a pool, as the coordinator does.
func release(nc *nats.Conn, pool string, jobs ...wire.WorkJob) {
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	names, _ := wire.NewNames("")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.Publish(ctx, names.WorkSubject(pool), wire.AppendWork(nil, jobs)); err != nil {
		log.Fatal(err)
	}
}

// Permanent fails a job at once when retrying cannot help, such as for a payload that does not
// parse.
func ExamplePermanent() {
	type resize struct {
		URL   string `json:"url"`
		Width int    `json:"width"`
	}
	h := worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
		var req resize
		if err := json.Unmarshal(j.Payload, &req); err != nil {
			return nil, worker.Permanent(fmt.Errorf("bad payload: %w", err))
		}
		if req.Width <= 0 {
			return nil, worker.Permanent(errors.New("width must be positive"))
		}
		return fmt.Appendf(nil, "resized %s to %dpx", req.URL, req.Width), nil
	})
	_ = h
}

// RetryAfter passes on a delay the remote side asked for, instead of the coordinator's back-off.
func ExampleRetryAfter() {
	h := worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://api.example.com/charge", strings.NewReader(string(j.Payload)))
		if err != nil {
			return nil, worker.Permanent(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err // retried with the coordinator's back-off
		}
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests {
			return nil, worker.RetryAfter(30*time.Second, errors.New("rate limited"))
		}
		return nil, nil
	})
	_ = h
}
