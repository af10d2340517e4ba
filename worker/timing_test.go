package worker

import (
	"cmp"
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rs/zerolog"

	"github.com/weavejobs/weave/internal/tracing"
	"github.com/weavejobs/weave/internal/wire"
)

// The worker's timing units, tested on synctest's fake clock: every time below is exact. No
// NATS inside a bubble; worker_test.go keeps one live-server test per behaviour end to end.

// TestLeaseKeeperSchedule: a held batch's lease is extended every Lease/3 exactly (ticks every
// Lease/6, extension once Lease/4 has passed), a batch arriving between ticks at the first tick
// Lease/4 after its arrival, and a batch whose process stopped for a whole lease lapses at the
// next tick instead of being extended.
func TestLeaseKeeperSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const lease = 30 * time.Second // ticks every 5s; extension once 7.5s have passed
		start := time.Now()
		at := func() time.Duration { return time.Since(start) }
		k := newLeaseKeeper(lease, time.Now)
		a := &batch{received: start, leaseFrom: start}
		k.add(a)
		var b *batch
		type event struct {
			at     time.Duration
			batch  string
			lapsed bool
		}
		var got []event
		name := func(x *batch) string {
			if x == a {
				return "a"
			}
			return "b"
		}
		for range 9 { // 45s of ticks
			<-k.C()
			ext, lapsed := k.due()
			for _, x := range ext {
				got = append(got, event{at(), name(x.b), false})
				k.answer(x.token) // the server confirms at once
			}
			for _, x := range lapsed {
				got = append(got, event{at(), name(x), true})
			}
			if at() == 10*time.Second {
				time.Sleep(2 * time.Second) // b arrives at 12s
				b = &batch{received: time.Now(), leaseFrom: time.Now()}
				k.add(b)
			}
		}
		want := []event{
			{10 * time.Second, "a", false}, {20 * time.Second, "a", false}, {20 * time.Second, "b", false},
			{30 * time.Second, "a", false}, {30 * time.Second, "b", false},
			{40 * time.Second, "a", false}, {40 * time.Second, "b", false},
		}
		// Batches extended at the same tick come in map order.
		slices.SortStableFunc(got, func(x, y event) int { return cmp.Or(cmp.Compare(x.at, y.at), cmp.Compare(x.batch, y.batch)) })
		if !slices.Equal(got, want) {
			t.Fatalf("extensions %v, want %v", got, want)
		}
		if a.lapsed(time.Now(), lease) || b.lapsed(time.Now(), lease) {
			t.Fatal("a kept batch lapsed")
		}

		// The process stops for a lease (its goroutines do not run: no tick is served), from 45s
		// to 75s. The last extension was at 40s, so at the first tick after it resumes, 75s, the
		// lease has lapsed.
		k.forget(b)
		time.Sleep(lease)
		<-k.C()
		ext, lapsed := k.due()
		if at() != 75*time.Second || len(ext) != 0 || len(lapsed) != 1 || lapsed[0] != a {
			t.Fatalf("at %v: extended %d, lapsed %d; want a lapsed at 75s", at(), len(ext), len(lapsed))
		}
		if !a.lapsed(time.Now(), lease) || k.C() != nil {
			t.Fatal("a lapsed batch is still kept")
		}
	})
}

// TestBatchLapsesAfterExactlyOneLease: a batch's lease lapses when a whole lease has passed
// since its receipt or the sending of the latest extension the server confirmed in time, not a
// nanosecond before; a confirmation after that is refused, and a lapsed batch stays lapsed.
func TestBatchLapsesAfterExactlyOneLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const lease = time.Second
		b := &batch{received: time.Now(), leaseFrom: time.Now()}
		time.Sleep(lease / 2)
		sent := time.Now() // an extension sent at 0.5s
		time.Sleep(lease/2 - time.Nanosecond)
		if b.lapsed(time.Now(), lease) {
			t.Fatal("lapsed a nanosecond before its lease ran out")
		}
		if !b.confirm(sent, time.Now(), lease) {
			t.Fatal("a confirmation within the lease refused")
		}
		time.Sleep(lease / 2) // 1.5s - 1ns: a lease from the extension's sending, less 1ns
		if b.lapsed(time.Now(), lease) {
			t.Fatal("lapsed before a lease had passed since the confirmed extension was sent")
		}
		sent = time.Now()
		time.Sleep(time.Nanosecond)
		if !b.lapsed(time.Now(), lease) {
			t.Fatal("not lapsed a whole lease after the confirmed extension was sent")
		}
		if b.confirm(sent, time.Now(), lease) || !b.lapsed(time.Now(), lease) {
			t.Fatal("a confirmation after the lease lapsed revived it")
		}
	})
}

// TestUnansweredExtensionsLapse: extensions the server does not confirm (the worker is cut off:
// they wait in a buffer, or are lost) do not keep a lease. The keeper goes on sending them, and
// the batch lapses a lease after its receipt; an answer that comes after that changes nothing.
// An answer in time moves the lease to its extension's sending, not to the answer's arrival,
// even if a later extension has gone meanwhile.
func TestUnansweredExtensionsLapse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const lease = 6 * time.Second // ticks every 1s; extension once 1.5s have passed
		start := time.Now()
		at := func() time.Duration { return time.Since(start) }
		k := newLeaseKeeper(lease, time.Now)
		// tick runs the keeper's next tick and returns the extensions it sent and whether the
		// batch lapsed.
		tick := func() ([]extension, bool) {
			<-k.C()
			ext, lapsed := k.due()
			return ext, len(lapsed) == 1
		}

		a := &batch{received: start, leaseFrom: start}
		k.add(a)
		var sent []extension
		for at() < 5*time.Second {
			ext, lapsed := tick()
			if lapsed {
				t.Fatalf("lapsed at %v, before a lease", at())
			}
			sent = append(sent, ext...)
		}
		if len(sent) != 2 { // at 2s and 4s
			t.Fatalf("%d extensions sent in 5s, want 2 (at 2s and 4s)", len(sent))
		}
		if ext, lapsed := tick(); !lapsed || len(ext) != 0 || at() != lease {
			t.Fatalf("at %v: %d extended, lapsed %v; want lapsed a lease after its receipt", at(), len(ext), lapsed)
		}
		k.answer(sent[1].token) // too late
		if !a.lapsed(time.Now(), lease) {
			t.Fatal("a late answer revived a lapsed lease")
		}

		// b arrives at 6s; extensions at 8s and 10s; the 8s one is answered at 11s, after the
		// 10s one went: the lease runs from 8s, to 14s.
		start = time.Now()
		b := &batch{received: start, leaseFrom: start}
		k.add(b)
		sent = sent[:0]
		for at() < 5*time.Second {
			ext, lapsed := tick()
			if lapsed {
				t.Fatalf("b lapsed at %v", at())
			}
			sent = append(sent, ext...)
		}
		k.answer(sent[0].token)
		for {
			_, lapsed := tick()
			if lapsed {
				break
			}
		}
		if at() != 2*time.Second+lease {
			t.Fatalf("b lapsed %v after its receipt, want %v: a lease from its first extension's sending", at(), 2*time.Second+lease)
		}
	})
}

// TestPacerSchedule: a lone report goes at once; reports within the linger of the last message
// gather and go exactly when the linger has passed; while a message is on its way, reports wait
// even after the linger; a message sent early (full) restarts the linger.
func TestPacerSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const linger = 5 * time.Millisecond
		start := time.Now()
		at := func() time.Duration { return time.Since(start) }
		p := newPacer()
		if !p.added(linger, false) {
			t.Fatal("a lone report was held back")
		}
		p.sending()
		if p.C() != nil {
			t.Fatal("timer armed after a send")
		}
		time.Sleep(time.Millisecond)
		if p.added(linger, false) {
			t.Fatal("a report 1ms after a message went at once")
		}
		time.Sleep(time.Millisecond)
		if p.added(linger, false) {
			t.Fatal("a second gathering report went at once")
		}
		<-p.C()
		if at() != linger {
			t.Fatalf("gathered reports due at %v, want %v", at(), linger)
		}
		p.disarm()
		p.sending()

		// A message on its way holds a report back, and the linger that passed long ago sends it
		// at once as a timer tick, after the loop has heard from the message in flight.
		time.Sleep(15 * time.Millisecond)
		if p.added(linger, true) {
			t.Fatal("a report went while a message was on its way")
		}
		<-p.C()
		if at() != 20*time.Millisecond {
			t.Fatalf("held report due at %v, want 20ms", at())
		}
		p.disarm()
		p.sending()

		// A full message sent before the linger disarms the timer and restarts the linger.
		time.Sleep(time.Millisecond)
		if p.added(linger, false) {
			t.Fatal("report 1ms after a message went at once")
		}
		p.sending() // MaxReportBatch reached
		if p.C() != nil {
			t.Fatal("timer still armed after a full message went")
		}
		time.Sleep(time.Millisecond)
		p.added(linger, false)
		<-p.C()
		if at() != 26*time.Millisecond {
			t.Fatalf("report after a full message due at %v, want 26ms (the linger from 21ms)", at())
		}
	})
}

// TestHeartbeatLoopSchedule: a heartbeat at once, then one every interval exactly; a signal adds
// one at once without moving the period; none after stop.
func TestHeartbeatLoopSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval = time.Second
		start := time.Now()
		sent := make(chan time.Duration, 16)
		beat, stop := make(chan struct{}, 1), make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			heartbeatLoop(interval, beat, stop, func() int { sent <- time.Since(start); return 1 })
		}()
		time.Sleep(2500 * time.Millisecond)
		beat <- struct{}{}
		time.Sleep(time.Second)
		close(stop)
		<-done
		time.Sleep(5 * time.Second)
		close(sent)
		var got []time.Duration
		for d := range sent {
			got = append(got, d)
		}
		want := []time.Duration{0, time.Second, 2 * time.Second, 2500 * time.Millisecond, 3 * time.Second}
		if len(got) != len(want) {
			t.Fatalf("heartbeats at %v, want %v", got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("heartbeats at %v, want %v", got, want)
			}
		}
	})
}

// TestHeartbeatLoopIdle: while send says the worker is idle (3 intervals until the next), the
// loop sends one every 3 intervals; a signal sends one at once and its answer sets the pace
// again, from then.
func TestHeartbeatLoopIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval = time.Second
		start := time.Now()
		sent := make(chan time.Duration, 16)
		var every atomic.Int32
		every.Store(3)
		beat, stop := make(chan struct{}, 1), make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			heartbeatLoop(interval, beat, stop, func() int { sent <- time.Since(start); return int(every.Load()) })
		}()
		time.Sleep(7500 * time.Millisecond) // idle: at 0, 3s and 6s
		every.Store(1)
		beat <- struct{}{} // a job arrives: at 7.5s, then at 8.5s and 9.5s
		time.Sleep(2200 * time.Millisecond)
		close(stop)
		<-done
		close(sent)
		var got []time.Duration
		for d := range sent {
			got = append(got, d)
		}
		want := []time.Duration{0, 3 * time.Second, 6 * time.Second, 7500 * time.Millisecond, 8500 * time.Millisecond, 9500 * time.Millisecond}
		if !slices.Equal(got, want) {
			t.Fatalf("heartbeats at %v, want %v", got, want)
		}
	})
}

// TestPullWatch: the checks come every period unless only dormant pulls are open; then one comes
// a millisecond after the earliest is overdue and none before (the shepherd's next waits, which
// say the same, do not move it); when another pull opens, every period again.
func TestPullWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		at := func() time.Duration { return time.Since(start) }
		w := newPullWatch(time.Second)
		defer w.stop()
		check := func(want time.Duration) {
			t.Helper()
			<-w.C()
			w.fired()
			if at() != want {
				t.Fatalf("check at %v, want %v", at(), want)
			}
		}
		w.watch(time.Time{}, time.Now())
		check(time.Second)
		check(2 * time.Second)
		due := start.Add(63 * time.Second) // a dormant pull sent at 2s, expiring a minute later, plus a second
		w.watch(due, time.Now())
		time.Sleep(30 * time.Second)
		w.watch(due, time.Now())
		synctest.Wait()
		select {
		case <-w.C():
			t.Fatalf("check at %v, before the dormant pull is overdue", at())
		default:
		}
		check(63*time.Second + time.Millisecond)
		w.watch(time.Time{}, time.Now()) // the overdue pull given up, an active one sent
		check(64*time.Second + time.Millisecond)
	})
}

// TestDrainSchedule: the handlers' contexts are canceled exactly DrainTimeout after the drain
// began, and the attempts still running are reported exactly TimeoutGrace after that; then
// nothing more is due.
func TestDrainSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const drainTimeout, grace = 10 * time.Second, time.Second
		d := drainSchedule{drainTimeout: drainTimeout, grace: grace}
		if d.C() != nil {
			t.Fatal("a deadline before the drain began")
		}
		start := time.Now()
		d.begin()
		<-d.C()
		if step, at := d.fired(), time.Since(start); step != drainForce || at != drainTimeout {
			t.Fatalf("first deadline: step %d at %v, want force at %v", step, at, drainTimeout)
		}
		<-d.C()
		if step, at := d.fired(), time.Since(start); step != drainAbandon || at != drainTimeout+grace {
			t.Fatalf("second deadline: step %d at %v, want abandon at %v", step, at, drainTimeout+grace)
		}
		if d.C() != nil {
			t.Fatal("a third deadline")
		}
		d.stop()
	})
}

// testSlots returns slots that run h, for one attempt at a time called through execute.
func testSlots(h HandlerFunc, grace time.Duration) (*slots, chan *task, chan struct{}) {
	expired, quit := make(chan *task, 1), make(chan struct{})
	return &slots{
		handler: h, base: context.Background(), cancels: newCancelRegistry(), grace: grace,
		maxResult: DefaultMaxResultSize, log: zerolog.Nop(), stats: &counters{},
		lapsed:  func(*task) bool { return false },
		expired: expired, quit: quit, tracer: tracing.New(nil),
	}, expired, quit
}

func testTask(id uint64, timeout time.Duration) *task {
	return &task{job: Job{ID: id, Group: "g", Attempt: 1}, timeout: timeout, batch: &batch{}}
}

// TestAttemptDeadline: a handler's context ends exactly at the attempt's timeout, and the attempt
// that ran into it is reported failed with "timeout after", lasting exactly the timeout.
func TestAttemptDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 100 * time.Millisecond
		var deadline time.Time
		sl, _, quit := testSlots(func(ctx context.Context, j *Job) ([]byte, error) {
			deadline, _ = ctx.Deadline()
			<-ctx.Done()
			return nil, ctx.Err()
		}, time.Second)
		defer close(quit)
		start := time.Now()
		out := sl.execute(testTask(1, timeout), start)
		if !deadline.Equal(start.Add(timeout)) {
			t.Errorf("handler's deadline %v after its start, want %v", deadline.Sub(start), timeout)
		}
		if out.kind != kindTimeout || out.report.Status != wire.StatusError ||
			string(out.report.Data) != "timeout after 100ms: context deadline exceeded" {
			t.Errorf("outcome %v %v %q", out.kind, out.report.Status, out.report.Data)
		}
		if out.report.Duration != timeout || time.Since(start) != timeout {
			t.Errorf("attempt lasted %v (reported %v), want exactly %v", time.Since(start), out.report.Duration, timeout)
		}
	})
}

// TestWatchdogAfterGrace: a handler that ignores its deadline is handed to the shepherd (expired)
// exactly TimeoutGrace after the deadline, while it still runs; when it returns at last, its
// outcome is a timeout whatever it returned.
func TestWatchdogAfterGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout, grace = 50 * time.Millisecond, 30 * time.Millisecond
		release := make(chan struct{})
		sl, expired, quit := testSlots(func(ctx context.Context, j *Job) ([]byte, error) {
			<-release // ignores ctx
			return []byte("too late"), nil
		}, grace)
		defer close(quit)
		tk := testTask(2, timeout)
		start := time.Now()
		outc := make(chan outcome, 1)
		go func() { outc <- sl.execute(tk, start) }()
		if got := <-expired; got != tk || time.Since(start) != timeout+grace {
			t.Fatalf("watchdog fired at %v for job %d, want %v for job %d", time.Since(start), got.job.ID, timeout+grace, tk.job.ID)
		}
		time.Sleep(time.Second)
		close(release)
		if out := <-outc; out.kind != kindTimeout || out.report.Duration != timeout+grace+time.Second {
			t.Errorf("late handler's outcome %v lasting %v", out.kind, out.report.Duration)
		}
		select {
		case <-expired:
			t.Fatal("watchdog fired twice")
		default:
		}
	})
}

// TestWatchdogStopsWhenHandlerReturns: a handler that returns before its deadline leaves no
// watchdog behind (synctest fails a test whose bubble keeps a timer goroutine waiting).
func TestWatchdogStopsWhenHandlerReturns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sl, expired, quit := testSlots(func(ctx context.Context, j *Job) ([]byte, error) {
			time.Sleep(10 * time.Millisecond)
			return []byte("ok"), nil
		}, time.Second)
		defer close(quit)
		if out := sl.execute(testTask(3, time.Minute), time.Now()); out.kind != kindOK {
			t.Fatalf("outcome %v", out.kind)
		}
		time.Sleep(2 * time.Minute)
		select {
		case <-expired:
			t.Fatal("watchdog fired for an attempt that returned in time")
		default:
		}
	})
}

// TestCancelMemory: a cancellation of a job not running here is remembered for canceledMemory,
// so the job never starts if it was queued here; a day later the memory is gone.
func TestCancelMemory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newCancelRegistry()
		r.cancel([]uint64{7, 8}, time.Now())
		time.Sleep(canceledMemory)
		r.cancel(nil, time.Now()) // forgets only what is older than canceledMemory
		if _, cancel, canceled := r.start(context.Background(), 7); !canceled {
			t.Error("job 7 canceled exactly canceledMemory ago started")
		} else {
			cancel(nil)
		}
		time.Sleep(time.Nanosecond)
		r.cancel(nil, time.Now())
		ctx, cancel, canceled := r.start(context.Background(), 8)
		defer cancel(nil)
		if canceled || ctx.Err() != nil {
			t.Error("job 8 canceled longer than canceledMemory ago still counts as canceled")
		}
	})
}

// TestBackoff: the pause doubles from lo to hi and starts again after a success.
func TestBackoff(t *testing.T) {
	b := backoff{lo: minPullBackoff, hi: maxPullBackoff}
	var got []time.Duration
	for range 7 {
		got = append(got, b.next())
	}
	want := []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 2 * time.Second, 2 * time.Second, 2 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("pauses %v, want %v", got, want)
		}
	}
	b.reset()
	if d := b.next(); d != minPullBackoff {
		t.Fatalf("after a success the pause is %v, want %v", d, minPullBackoff)
	}
}
