package inproc

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/integration/jstest"
	"github.com/weavejobs/weave/internal/leakcheck"
	"github.com/weavejobs/weave/worker"
)

func TestMain(m *testing.M) {
	leakcheck.Main(m)
}

// TestFleet starts a coordinator and two workers on an embedded server, waits for the fleet and
// runs a group through it; Close stops everything, and again does nothing.
func TestFleet(t *testing.T) {
	t.Parallel()
	for _, inProcess := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		d, err := New(ctx, Options{Namespace: "fleet", Name: "test", InProcess: inProcess})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Coordinator(coordinator.Config{}); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"a", "b"} {
			if _, _, err := d.Worker(worker.Config{ID: id, Concurrency: 2}, func(context.Context, *worker.Job) ([]byte, error) { return nil, nil }); err != nil {
				t.Fatal(err)
			}
		}
		if err := d.WaitStatus(FleetReady(2, 4)); err != nil {
			t.Fatal(err)
		}
		disp, err := d.Dispatcher()
		if err != nil {
			t.Fatal(err)
		}
		h, err := disp.Publish(ctx, "g", func(yield func(dispatcher.Job) bool) {
			for range 10 {
				if !yield(dispatcher.Job{}) {
					return
				}
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if sum, err := h.WaitSummary(ctx); err != nil || sum.Done != 10 {
			t.Fatalf("summary %+v, %v", sum, err)
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		if err := d.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		if _, err := d.Connect("late"); err == nil {
			t.Fatal("Connect after Close succeeded")
		}
	}
}

// TestWaitStatusSeesFailure: a component that stops on its own ends WaitStatus at once with its
// error, rather than after WaitTimeout.
func TestWaitStatusSeesFailure(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	d, err := New(ctx, Options{Namespace: "failing", InProcess: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	boom := errors.New("boom")
	d.Run("doomed", func(context.Context) error { return boom })
	start := time.Now()
	err = d.WaitStatus(func(*coordinator.Status) (bool, string) { return false, "nothing" })
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "doomed stopped") {
		t.Fatalf("WaitStatus: %v, want doomed's error", err)
	}
	if took := time.Since(start); took >= WaitTimeout {
		t.Fatalf("WaitStatus took %v", took)
	}
	// Close reports how the component ended.
	if err := d.Close(); !errors.Is(err, boom) {
		t.Fatalf("Close: %v, want boom", err)
	}
}

// TestCloseDeletesNamespaceOnExternalServer: on a server the deployment did not start, Close
// deletes the namespace's streams, its lease bucket and the caller's streams, and nothing else.
func TestCloseDeletesNamespaceOnExternalServer(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	srv, err := jstest.Start(ctx, jstest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"ext_EXTRA", "OTHER"} {
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: s, Subjects: []string{strings.ToLower(s)}}); err != nil {
			t.Fatal(err)
		}
	}
	dial := func(context.Context, string) (*nats.Conn, error) { return nats.Connect(srv.ClientURL()) }
	d, err := New(ctx, Options{Namespace: "ext", Dial: dial, Streams: []string{"ext_EXTRA"}})
	if err != nil {
		t.Fatal(err)
	}
	if !d.External() {
		t.Fatal("a deployment with Dial is not external")
	}
	if err := d.Coordinator(coordinator.Config{}); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	var left []string
	for name := range js.StreamNames(ctx).Name() {
		left = append(left, name)
	}
	if len(left) != 1 || left[0] != "OTHER" {
		t.Errorf("streams left: %v, want [OTHER]", left)
	}
	if _, err := js.KeyValue(ctx, d.Names().LeaseBucket()); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Errorf("lease bucket: %v, want not found", err)
	}
}
