package integration

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/integration/jstest"
	"github.com/weavejobs/weave/spreader"
	"github.com/weavejobs/weave/worker"
)

// invalidConfigErrors are every public package's ErrInvalidConfig: one value, so an error from
// any constructor matches all of them.
var invalidConfigErrors = map[string]error{
	"coordinator": coordinator.ErrInvalidConfig,
	"worker":      worker.ErrInvalidConfig,
	"dispatcher":  dispatcher.ErrInvalidConfig,
	"spreader":    spreader.ErrInvalidConfig,
}

// TestInvalidConfigIsOneError: every public constructor that takes stream options refuses the
// same bad Replicas, naming the field, with an error that errors.Is matches against each
// package's ErrInvalidConfig; and the constructors without stream options refuse their own bad
// settings with that same error.
func TestInvalidConfigIsOneError(t *testing.T) {
	t.Parallel()
	srv := jstest.New(t)
	nc := jstest.NewConn(t, srv.ClientURL())
	ctx := context.Background()
	type call struct {
		name string
		err  error
		want string // a fragment of the message naming the field
	}
	var calls []call
	for _, replicas := range []int{-1, 6} {
		_, err := coordinator.New(nc, coordinator.Config{Streams: coordinator.StreamOptions{Replicas: replicas}})
		calls = append(calls, call{"coordinator.New", err, "Streams.Replicas is"})
		_, err = coordinator.InitNamespace(ctx, nc, "", coordinator.StreamOptions{Replicas: replicas})
		calls = append(calls, call{"coordinator.InitNamespace", err, "Replicas is"})
	}
	_, err := worker.New(nc, worker.Config{Concurrency: -1}, worker.HandlerFunc(func(context.Context, *worker.Job) ([]byte, error) { return nil, nil }))
	calls = append(calls, call{"worker.New", err, "Concurrency"})
	_, err = dispatcher.New(nc, dispatcher.Config{MaxPending: -1})
	calls = append(calls, call{"dispatcher.New", err, "MaxPending"})
	_, err = spreader.NewScheduler[string, int](spreader.Config{})
	calls = append(calls, call{"spreader.NewScheduler", err, "Feeders"})
	for _, c := range calls {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, c.err, c.want)
			continue
		}
		for pkg, target := range invalidConfigErrors {
			if !errors.Is(c.err, target) {
				t.Errorf("%s: %v does not match %s.ErrInvalidConfig", c.name, c.err, pkg)
			}
		}
	}
	// The refused InitNamespace calls created nothing.
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for name := range js.StreamNames(ctx).Name() {
		t.Errorf("stream %s exists after refused InitNamespace calls", name)
	}
}
