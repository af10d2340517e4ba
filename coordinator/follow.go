package coordinator

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// A follower reads one stream for the whole term (JOBS: the feed; EVENTS: reports and journal;
// LIMITS) with an ordered consumer, handing each message to the loop through a channel, and mends the
// read when it stops delivering.
//
// nats.go's ordered consumer re-creates itself after most failures, but not all: when a NATS
// node is lost at the moment a pull fails with "no responders", a feed can stop delivering for
// good, with no error after the first (the coordinator would then hold a full window of jobs it
// never hears end, and release nothing). So the follower watches
// its own progress: when the loop has applied nothing for followStallAfter (half a second in
// the seconds after the connection reconnects, the consumer reports an error or a check fails)
// although the stream holds messages past the last one applied and none wait in the channel, it
// stops the consumer and starts a new one right after that message. Each consumer's messages
// carry its generation: once the loop has seen a message of the new consumer it ignores the old
// one's (a message the old consumer was handing over as it was stopped could otherwise come
// after the new one's and skip them), and it ignores a message at or below the last one it
// applied (see fresh), so the overlap of the two consumers is harmless.
type follower struct {
	r      *run
	stream string
	ch     chan<- streamMsg
	opts   []jetstream.PullConsumeOpt
	log    zerolog.Logger

	applied atomic.Uint64 // the sequence of the last message the loop applied (set by the loop)
	current uint32        // the newest consumer generation the loop has seen (owned by the loop)
	gens    atomic.Uint32 // consumers started
	errs    atomic.Uint64 // errors the consumers reported (read by watch)
	// reconnects is the connection's reconnect count when the follower started: alerts from
	// then on open watch's window, also those before its goroutine runs.
	reconnects uint64

	mu sync.Mutex
	cc jetstream.ConsumeContext // the current consumer's; guarded by mu
}

// streamMsg is a message a follower hands to the loop, with its consumer's generation.
type streamMsg struct {
	jetstream.Msg
	gen uint32
}

// followCheckEvery is how often a follower compares its progress with the stream;
// followStallAfter how long it lets the loop apply nothing while the stream holds more before
// it starts the consumer again. For followAlertWindow after the coordinator's connection
// reconnects, the consumer reports an error, or a check cannot reach the stream, it waits
// followStallAfterAlert instead: a consumer's pulls may be lost with the connection (a
// coordinator connected to a node that stopped), or the consumer with its node, and nats.go's
// ordered consumer does not always resume, so the read is checked sooner while messages written
// around the fault arrive and the stream elects a leader. Variables so that tests can shorten
// them.
var (
	followCheckEvery      = 250 * time.Millisecond
	followStallAfter      = 3 * time.Second
	followStallAfterAlert = 500 * time.Millisecond
	followAlertWindow     = 3 * time.Second
)

// follow starts a follower over a whole stream from its first message, delivering into ch, and
// returns it with the stream's last sequence at the start: replay reads up to it.
func (r *run) follow(ctx context.Context, stream string, ch chan<- streamMsg, opts ...jetstream.PullConsumeOpt) (*follower, uint64, error) {
	f := &follower{r: r, stream: stream, ch: ch, opts: opts, log: r.log.With().Str("stream", stream).Logger()}
	var last uint64
	err := r.retry(ctx, "follow "+stream, func(ctx context.Context) error {
		var err error
		last, err = f.lastHeld(ctx, 0)
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	if err := f.start(ctx, 0); err != nil {
		return nil, 0, err
	}
	r.stop = append(r.stop, f.stop)
	f.reconnects = r.c.nc.Stats().Reconnects
	r.wg.Go(f.watch)
	return f, last, nil
}

// fresh reports whether the loop should apply m, whose stream sequence is seq, and if so notes
// it as applied. Only the loop calls it.
func (f *follower) fresh(m streamMsg, seq uint64) bool {
	switch {
	case m.gen < f.current:
		return false // from a consumer already replaced: the new one delivers it, in order
	case m.gen > f.current:
		f.current = m.gen
	}
	switch {
	case seq == 0:
		return true // no stream metadata (never from JetStream): applied, not noted
	case seq <= f.applied.Load():
		return false // delivered again by the consumer that replaced a stalled one
	}
	f.applied.Store(seq)
	return true
}

// start creates an ordered consumer from sequence from (the stream's first message if 0) and
// consumes it into the follower's channel, replacing the current consumer.
func (f *follower) start(ctx context.Context, from uint64) error {
	cfg := jetstream.OrderedConsumerConfig{}
	if from > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from
	}
	var cons jetstream.Consumer
	err := f.r.retry(ctx, "follow "+f.stream, func(ctx context.Context) error {
		s, err := f.r.c.js.Stream(ctx, f.stream)
		if err != nil {
			return err
		}
		cons, err = s.OrderedConsumer(ctx, cfg)
		return err
	})
	if err != nil {
		return err
	}
	gen := f.gens.Add(1)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		select {
		case f.ch <- streamMsg{Msg: m, gen: gen}:
		case <-f.r.done:
		}
	}, append(f.opts, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		f.errs.Add(1)
		// The consumer recovers by itself (a stall is caught by watch): part of an outage.
		f.log.Debug().Err(err).Msg("reading the stream: the ordered consumer reported an error")
		f.r.outage.Once("read "+f.stream, err, time.Now())
	}))...)
	if err != nil {
		return err
	}
	f.mu.Lock()
	old := f.cc
	f.cc = cc
	f.mu.Unlock()
	if old != nil {
		old.Stop()
	}
	return nil
}

func (f *follower) stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cc != nil {
		f.cc.Stop()
	}
}

// watch checks the follower's progress every followCheckEvery until the term ends, and starts
// the consumer again after the last message applied when the loop applied nothing for
// followStallAfter (followStallAfterAlert within followAlertWindow of a reconnect, a consumer's
// error or a failed check), nothing waits in the channel and the stream holds more.
func (f *follower) watch() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-f.r.done
		cancel()
	}()
	tick := time.NewTicker(followCheckEvery)
	defer tick.Stop()
	// alerts counts what opens the alert window: the connection's reconnects and the
	// consumers' errors.
	alerts := func() uint64 { return f.r.c.nc.Stats().Reconnects + f.errs.Load() }
	// seen is the last sequence applied and since when (or since the last check while idle);
	// counted the alerts the watch last saw, and alert the end of the window they opened.
	seen, since, counted := f.applied.Load(), time.Now(), f.reconnects
	var alert time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now()
		if n := alerts(); n != counted {
			counted, alert = n, now.Add(followAlertWindow)
		}
		if a := f.applied.Load(); a != seen {
			seen, since = a, now
			continue
		}
		stallAfter := followStallAfter
		if now.Before(alert) {
			stallAfter = followStallAfterAlert
		}
		if now.Sub(since) < stallAfter || len(f.ch) > 0 {
			continue // recent progress, or messages wait for the loop (busy, or replaying another stream)
		}
		since = now // one check per stallAfter while idle
		rctx, rcancel := context.WithTimeout(ctx, requestTimeout)
		last, err := f.lastHeld(rctx, seen)
		rcancel()
		if err != nil {
			// The stream cannot say (no leader, during an election): look again soon.
			alert = time.Now().Add(followAlertWindow)
			continue
		}
		if last <= seen {
			continue // idle, not stalled
		}
		// Mended here: one line at info (if the restart fails, the term ends with an error).
		f.log.Info().Uint64("applied", seen).Uint64("stream_last", last).Stringer("idle", stallAfter).
			Msg("reading the stream stalled: starting its consumer again after the last message applied")
		if err := f.start(ctx, seen+1); err != nil && ctx.Err() == nil {
			f.log.Error().Err(err).Msg("starting the stream's consumer again failed; the term ends")
			f.r.fail(err)
			return
		}
	}
}

// lastHeld is the sequence of the last message the stream holds (see run.lastHeld), or its
// state's last sequence when that is not above after: asking for the last message per subject
// is then not needed, which keeps an idle coordinator's checks to one request each.
func (f *follower) lastHeld(ctx context.Context, after uint64) (uint64, error) {
	s, err := f.r.c.js.Stream(ctx, f.stream)
	if err != nil {
		return 0, err
	}
	info := s.CachedInfo() // js.Stream just asked the server for it
	if info.State.LastSeq <= after {
		return info.State.LastSeq, nil
	}
	return f.r.lastHeld(ctx, info)
}

// followLimits reads the namespace's limits into the engine, then follows the LIMITS stream:
// later changes reach the loop on limitsCh. Replay calls it first, so the limits hold from the
// first release of the term.
func (r *run) followLimits(ctx context.Context) error {
	var (
		last uint64
		err  error
	)
	r.limits, last, err = r.follow(ctx, r.names.LimitsStream(), r.limitsCh)
	if err != nil {
		return err
	}
	return drainUntil(ctx, r.limitsCh, last, r.applyLimit)
}
