package main

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rs/zerolog"

	"github.com/weavejobs/weave/coordinator"
)

// TestStandByAfterAnyFailure: whatever ends a term (not only a lost lease), weave coordinator
// runs another after a pause that doubles while terms keep failing, until its context ends.
func TestStandByAfterAnyFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		errs := []error{
			errors.New("weave: replay outcomes: nats: no responders available for request"),
			coordinator.ErrStalled,
			coordinator.ErrLeaseLost,
			nil, // a term that ends without an error is run again too
		}
		var starts []time.Time
		run := func(ctx context.Context) error {
			starts = append(starts, time.Now())
			if len(starts) <= len(errs) {
				return errs[len(starts)-1]
			}
			<-ctx.Done() // holds the lease until stopped
			return nil
		}
		done := make(chan struct{})
		go func() {
			if err := standBy(ctx, run, zerolog.Nop()); err != nil {
				t.Errorf("standBy = %v, want nil once its context ended", err)
			}
			close(done)
		}()
		time.Sleep(time.Minute) // the bubble's clock: every pause passes at once
		synctest.Wait()
		if len(starts) != len(errs)+1 {
			t.Fatalf("%d terms run, want %d", len(starts), len(errs)+1)
		}
		for i := 1; i < len(starts); i++ {
			if got, want := starts[i].Sub(starts[i-1]), termRetryFirst<<(i-1); got != want {
				t.Errorf("pause before term %d: %v, want %v", i+1, got, want)
			}
		}
		cancel()
		synctest.Wait()
		select {
		case <-done:
		default:
			t.Fatal("standBy did not return when its context ended")
		}
	})
}
