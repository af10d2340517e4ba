package worker

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/weavejobs/weave/internal/wire"
)

func TestRetryDelay(t *testing.T) {
	cases := map[time.Duration]time.Duration{
		-time.Second:             0,
		0:                        0,
		time.Nanosecond:          time.Millisecond,
		1500 * time.Microsecond:  2 * time.Millisecond,
		time.Second:              time.Second,
		wire.MaxTimeout + 1:      wire.MaxTimeout,
		time.Duration(1<<63 - 1): wire.MaxTimeout,
	}
	for in, want := range cases {
		if got := retryDelay(in); got != want {
			t.Errorf("retryDelay(%v) = %v, want %v", in, got, want)
		}
	}
	if got := clampDuration(wire.MaxTimeout * 2); got != wire.MaxTimeout {
		t.Errorf("clampDuration = %v", got)
	}
}

func TestResolveDefaults(t *testing.T) {
	r, err := resolve(Config{Resources: []string{"b", "a", "b"}}, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		Namespace: wire.DefaultNamespace, Concurrency: runtime.GOMAXPROCS(0),
		HeartbeatInterval: DefaultHeartbeatInterval, Lease: DefaultLease, TimeoutGrace: DefaultTimeoutGrace,
		DrainTimeout: DefaultDrainTimeout, ReportLinger: DefaultReportLinger,
		MaxReportBatch: DefaultMaxReportBatch, MaxResultSize: DefaultMaxResultSize,
	}
	got := r.Config
	got.ID, got.Resources = "", nil
	if got.Namespace != want.Namespace || got.Concurrency != want.Concurrency || got.HeartbeatInterval != want.HeartbeatInterval ||
		got.Lease != want.Lease || got.TimeoutGrace != want.TimeoutGrace || got.DrainTimeout != want.DrainTimeout ||
		got.ReportLinger != want.ReportLinger || got.MaxReportBatch != want.MaxReportBatch ||
		got.MaxResultSize != want.MaxResultSize || got.DefaultTimeout != 0 {
		t.Errorf("defaults %+v", got)
	}
	if strings.Join(r.resources, ",") != "a,b" || r.pool != wire.PoolKey([]string{"a", "b"}) {
		t.Errorf("resources %v pool %s", r.resources, r.pool)
	}
	if _, err := resolve(Config{MaxResultSize: 1 << 20}, 1<<20); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("result larger than the max payload: %v", err)
	}
	// Heartbeat periods while idle and while dormant, in HeartbeatIntervals: by default 5 and
	// 30s; a configured IdleHeartbeatInterval applies to both.
	for _, c := range []struct {
		cfg           Config
		idle, dormant int
	}{
		{Config{}, 5, 30},
		{Config{HeartbeatInterval: 10 * time.Second}, 5, 5},
		{Config{IdleHeartbeatInterval: 2 * time.Second}, 2, 2},
	} {
		r, err := resolve(c.cfg, 1<<20)
		if err != nil || r.idleBeats != c.idle || r.dormantBeats != c.dormant {
			t.Errorf("%+v: idle %d, dormant %d (%v); want %d, %d", c.cfg, r.idleBeats, r.dormantBeats, err, c.idle, c.dormant)
		}
	}
}

// The default report linger follows the handlers' run time (a tenth of it, within 1ms..10ms); a
// configured one stays as configured.
func TestAdaptiveReportLinger(t *testing.T) {
	def, err := resolve(Config{}, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	fixed, err := resolve(Config{ReportLinger: 3 * time.Millisecond}, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cfg  *resolved
		runs time.Duration // every report's run time
		want time.Duration
	}{
		{&def, 0, time.Millisecond},
		{&def, 50 * time.Microsecond, time.Millisecond},
		{&def, 20 * time.Millisecond, 2 * time.Millisecond},
		{&def, time.Second, maxAdaptiveLinger},
		{&fixed, time.Second, 3 * time.Millisecond},
	} {
		c := &completer{cfg: tc.cfg}
		for range 200 {
			c.noteRun(tc.runs)
		}
		if got := c.lingerTime(); got < tc.want*95/100 || got > tc.want*105/100 {
			t.Errorf("linger %v after runs of %v (adaptive %v), want %v", got, tc.runs, tc.cfg.adaptiveLinger, tc.want)
		}
	}
}

// TestCancelRegistryForce: forceAll cancels the context of every job running, and of every job
// starting after it, with the plain cause a canceled parent would have given; a cancellation
// request's cause stays ErrJobCanceled; and end forgets the job.
func TestCancelRegistryForce(t *testing.T) {
	r := newCancelRegistry()
	base := context.WithoutCancel(context.WithValue(context.Background(), ctxKeyTest{}, "v"))
	a, cancelA, _ := r.start(base, 1)
	defer cancelA(nil)
	b, cancelB, _ := r.start(base, 2)
	defer cancelB(nil)
	r.cancel([]uint64{2}, time.Now())
	if a.Err() != nil || !errors.Is(context.Cause(b), ErrJobCanceled) || a.Value(ctxKeyTest{}) != "v" {
		t.Fatalf("before forceAll: a %v, b's cause %v, a's value %v", a.Err(), context.Cause(b), a.Value(ctxKeyTest{}))
	}
	if _, ok := r.startedAt(1); !ok {
		t.Fatal("a running job has no start time")
	}
	r.forceAll()
	c, cancelC, canceled := r.start(base, 3)
	defer cancelC(nil)
	if canceled || !errors.Is(a.Err(), context.Canceled) || !errors.Is(context.Cause(a), context.Canceled) || c.Err() == nil {
		t.Fatalf("after forceAll: a %v (cause %v), a job starting after it: %v, canceled before start %v", a.Err(), context.Cause(a), c.Err(), canceled)
	}
	r.end(1)
	if _, ok := r.startedAt(1); ok {
		t.Fatal("an ended job is still running")
	}
}

type ctxKeyTest struct{}

// ackCounter is a work message that counts its acks.
type ackCounter struct {
	workMsg
	acks int
}

func (m *ackCounter) Ack() error { m.acks++; return nil }

// TestAckHeldWhileLatest: the ack of the latest batch received is held until a later batch came
// (so that WORK's last message is not the one acked), or holdAck; then, like the others, it is
// handed to the shepherd's next pull, or goes alone once it waited ackWait; the end of the run
// sends what is held.
func TestAckHeldWhileLatest(t *testing.T) {
	c := &completer{cfg: &resolved{Config: Config{Lease: time.Minute}}, leases: newLeaseKeeper(time.Minute, time.Now),
		log: zerolog.Nop(), acks: new(ackQueue)}
	defer c.leases.stop()
	msgs := make([]*ackCounter, 4)
	batches := make([]*batch, 4)
	for i := range batches {
		msgs[i] = &ackCounter{}
		batches[i] = &batch{msg: msgs[i], jobs: 1}
	}
	receive := func(b *batch) { c.add(completerEvent{batch: b}) }
	acks := func() (n []int) {
		for _, m := range msgs {
			n = append(n, m.acks)
		}
		return n
	}
	want := func(w ...int) {
		t.Helper()
		if got := acks(); !slices.Equal(got, w) {
			t.Fatalf("acks %v, want %v", got, w)
		}
	}

	receive(batches[0])
	c.ack(batches[0]) // the latest received: held
	want(0, 0, 0, 0)
	if c.acks.take() != nil {
		t.Fatal("the latest batch's ack was handed to the next pull")
	}
	receive(batches[1]) // a later batch: the held ack is handed over, for the next pull
	want(0, 0, 0, 0)
	if m := c.acks.take(); m != msgs[0] { // the shepherd's pull takes it (and sends it: +NXT)
		t.Fatalf("the next pull took %v, want batch 0's ack", m)
	}
	receive(batches[2])
	c.ack(batches[1]) // not the latest: handed over
	c.ack(batches[2]) // the latest: held
	want(0, 0, 0, 0)
	c.sendQueued(time.Now()) // no pull took batch 1's ack within ackWait (the run loop does this)
	want(0, 1, 0, 0)
	if c.held == nil || c.heldTimer == nil {
		t.Fatal("no held ack, or no timer for it")
	}
	<-c.heldTimer.C // holdAck passed (the run loop does this)
	c.releaseHeld()
	want(0, 1, 1, 0)
	receive(batches[3])
	c.ack(batches[3]) // held again, on the same timer
	want(0, 1, 1, 0)
	if c.held != batches[3] {
		t.Fatal("the latest batch's ack is not held")
	}
	c.releaseHeld() // the run ends
	want(0, 1, 1, 1)
	if len(c.leases.live) != 0 {
		t.Fatalf("%d batches still leased after their acks", len(c.leases.live))
	}
}

// fakeAck is a workMsg for the ack queue's tests: only its identity matters.
type fakeAck struct{ workMsg }

// TestAckQueue: acks come out oldest first, to the shepherd (take) or as they fall due; a
// full queue gives back its oldest for the caller to send.
func TestAckQueue(t *testing.T) {
	t0 := time.Now()
	var q ackQueue
	a := make([]*fakeAck, maxQueuedAcks+1)
	for i := range a {
		a[i] = &fakeAck{}
	}
	for i := range maxQueuedAcks {
		if over := q.push(a[i], t0.Add(time.Duration(i)*time.Millisecond)); over != nil {
			t.Fatalf("push %d gave back %v", i, over)
		}
	}
	if over := q.push(a[maxQueuedAcks], t0.Add(time.Second)); over != a[0] {
		t.Fatalf("a full queue gave back %v, want the oldest", over)
	}
	if got := q.take(); got != a[1] {
		t.Fatalf("take: %v, want the oldest left", got)
	}
	due, next := q.due(t0.Add(2 * time.Millisecond)) // a[2] was queued at +2ms, a[3] at +3ms
	if len(due) != 1 || due[0] != a[2] || !next.Equal(t0.Add(3*time.Millisecond)) {
		t.Fatalf("due: %v, next %v", due, next.Sub(t0))
	}
	due, next = q.due(t0.Add(time.Hour))
	if len(due) != 2 || due[0] != a[3] || due[1] != a[maxQueuedAcks] || !next.IsZero() || q.take() != nil {
		t.Fatalf("the rest due: %v, next %v", due, next)
	}
}
