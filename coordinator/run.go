package coordinator

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/weavejobs/weave/coordinator/internal/engine"
	"github.com/weavejobs/weave/internal/asyncpub"
	"github.com/weavejobs/weave/internal/transient"
	"github.com/weavejobs/weave/internal/wire"
)

// run is one term of coordination under one lease epoch. The loop goroutine owns the engine;
// every other goroutine talks to it through the channels below.
type run struct {
	c        *Coordinator
	fail     context.CancelCauseFunc // ends the term with an error (see retry)
	epoch    uint64                  // this term's lease epoch (immutable; the writers' message IDs)
	cfg      Config
	names    wire.Names
	log      zerolog.Logger
	outage   *transient.Outage // requests to NATS failing for a while: logged at its start and end
	e        *engine.Engine
	key      wire.ReleaseKey // signs releases, verifies proofs (set before replay, then immutable)
	payloads *payloads
	pub      *asyncpub.Publisher // the term's async publishes: work batches, outcomes, summaries
	// msgBytes bounds the body of an outcome message or a journal record: the server's max
	// payload less room for headers (see msgLimit).
	msgBytes int

	// Written by consumer callbacks and subscriptions, read by the loop.
	feedCh   chan streamMsg   // JOBS feed, headers only
	eventsCh chan streamMsg   // EVENTS: reports and journal
	jobs     *follower        // reads JOBS into feedCh
	events   *follower        // reads EVENTS into eventsCh
	limits   *follower        // reads LIMITS into limitsCh
	hbCh     chan heartbeatIn // heartbeats and joins
	limitsCh chan streamMsg   // LIMITS: changes of the limits
	statusCh chan chan *Status
	insp     *inspector // inspection requests and standbys heard
	alarms   *alarms    // the alarms' state (owned by the loop)

	// Written by release pipelines (never blocking them), read by the loop.
	learnMu      sync.Mutex
	learnPending []learned
	learnNotify  chan struct{} // capacity 1: "learnPending is not empty"

	// Written by purgeComplete and the outcome acker, read by the loop.
	forgetCh  chan completedGroup
	storedCh  chan []uint64 // EVENTS sequences of reports whose outcomes are now stored
	trimming  bool          // a trim of EVENTS is on its way (owned by the loop)
	trimmedTo uint64        // EVENTS is trimmed below this (owned by the loop)
	trimmedCh chan uint64   // written by the trim goroutine: how far it trimmed, 0 on failure

	redriveEnds chan engine.RedriveEnd // written by redrive goroutines, read by the loop
	schedReject chan engine.Rejection  // written by the schedules goroutine, read by the loop

	// Written by the loop, read by the release pipelines and the writer.
	releaseQ chan releaseReq
	writeQ   chan writeOp
	// Written (and closed) by the writer, read by the acker.
	acks chan written
	// Written (and closed) by the acker, read by the summarizer.
	summaries chan storedSummary
	// Written by the writer, the acker and the summarizer (which closes it), read by the deleter.
	deletes chan jobDelete
	// The newest JOBS sequence the loop has read (written by the loop, read by the deleter).
	jobsFed atomic.Uint64
	// The single packs in JOBS (registered by the loop, released by the deleter and expiries).
	shared sharedMsgs

	rescues map[string]context.CancelFunc // running rescues by pool (owned by the loop)
	// Pools whose lost batches are being taken back.
	lostMu     sync.Mutex
	recovering map[string]bool

	streamsMu sync.Mutex
	streams   map[string]jetstream.Stream // handles on the streams purged (run.stream)

	done chan struct{} // closed at shutdown: callbacks stop handing messages to the loop
	stop []func()      // consumers and subscriptions to stop, in order
	wg   sync.WaitGroup
}

const chanSize = 4096

func newRun(ctx context.Context, c *Coordinator, epoch uint64, fail context.CancelCauseFunc) (*run, error) {
	ecfg := c.cfg.engineConfig()
	ecfg.OutcomesExpire = c.outcomesExpire
	e, err := engine.New(ecfg, c.names, epoch)
	if err != nil {
		return nil, err
	}
	r := &run{
		c: c, fail: fail, epoch: epoch, cfg: c.cfg, names: c.names, log: c.cfg.Logger, e: e,
		outage:      transient.New(c.cfg.Logger, "requests to NATS"),
		payloads:    newPayloads(c.directGet(c.names.JobsStream()), c.cfg.PayloadCacheBytes),
		pub:         asyncpub.New(c.nc, requestTimeout), // every publish resolves: a lost ack times out
		msgBytes:    max(int(c.nc.MaxPayload())-64<<10, int(c.nc.MaxPayload())/2),
		feedCh:      make(chan streamMsg, chanSize),
		eventsCh:    make(chan streamMsg, chanSize),
		hbCh:        make(chan heartbeatIn, chanSize),
		limitsCh:    make(chan streamMsg, 64),
		statusCh:    make(chan chan *Status),
		alarms:      newAlarms(c.cfg.Alarms),
		insp:        newInspector(),
		learnNotify: make(chan struct{}, 1),
		forgetCh:    make(chan completedGroup, chanSize),
		storedCh:    make(chan []uint64, chanSize),
		trimmedCh:   make(chan uint64, 1),
		redriveEnds: make(chan engine.RedriveEnd, 16),
		schedReject: make(chan engine.Rejection, 16),
		acks:        make(chan written, chanSize),
		summaries:   make(chan storedSummary, chanSize),
		deletes:     make(chan jobDelete, chanSize),
		releaseQ:    make(chan releaseReq, chanSize),
		done:        make(chan struct{}),
		writeQ:      make(chan writeOp, chanSize),
		rescues:     map[string]context.CancelFunc{},
		recovering:  map[string]bool{},
	}
	// One outcome, with a summary beside it, fits any outcome message (see outcomesFitting).
	e.SetMaxOutcome(r.msgLimit() - outcomeRoom)
	if err := r.replay(ctx); err != nil {
		r.shutdown()
		return nil, err
	}
	return r, nil
}

// shutdown stops the inputs, then lets the pipelines carry out what the loop handed them.
func (r *run) shutdown() {
	defer r.pub.Close()
	defer r.payloads.get.Close()
	close(r.done)
	for _, stop := range r.stop {
		stop()
	}
	r.stop = nil
	for _, cancel := range r.rescues {
		cancel()
	}
	close(r.releaseQ)
	close(r.writeQ)
	r.wg.Wait()
}
