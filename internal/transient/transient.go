// Package transient logs an outage that the system mends by itself, such as requests failing
// while a NATS cluster elects new stream leaders after losing a node: once, at info, when the
// first request fails, and once, at info, with a summary, when the last one failing goes
// through. The failures in between are counted, not logged: a warning per failed try told an
// operator again and again about an outage that needed nothing from them. What does not mend
// (a request failing for longer than its owner accepts) is its owner's to report, as an error.
package transient

import (
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Outage tracks the requests failing at once. Its methods are safe for concurrent use: the
// requests it tracks run in several goroutines. A nil Outage logs nothing.
type Outage struct {
	log  zerolog.Logger
	what string // the kind of request, in its messages: "requests to NATS"

	mu       sync.Mutex
	failing  int       // requests failing now (Begin without End)
	since    time.Time // when the first of them failed; zero when none fails
	tries    int       // failed tries since then
	requests int       // requests that failed since then
	firstErr error     // the first failure's error
	lastErr  error     // the latest failure's error
}

// New returns an Outage logging on log; what names the requests ("requests to NATS").
func New(log zerolog.Logger, what string) *Outage {
	return &Outage{log: log, what: what}
}

// Begin records that a request, op, failed for the first time with err, at now: it is failing
// until End. The first request failing while none does starts an outage, logged at info.
func (o *Outage) Begin(op string, err error, now time.Time) {
	if o == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.failing++
	o.requests++
	o.tries++
	o.lastErr = err
	if o.failing == 1 && o.since.IsZero() {
		o.since, o.firstErr = now, err
		o.log.Info().Err(err).Str("op", op).Msgf("%s failing; trying them again until they go through", o.what)
	}
}

// Again records another failed try, with err, of a request that has begun failing.
func (o *Outage) Again(err error) {
	if o == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.tries++
	o.lastErr = err
}

// End records that a request that had begun failing went through (or was given up, by its
// owner), at now. The last one ending ends the outage, logged at info with its summary.
func (o *Outage) End(now time.Time) {
	if o == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.failing == 0 {
		return
	}
	if o.failing--; o.failing > 0 {
		return
	}
	e := o.log.Info().Stringer("lasted", now.Sub(o.since).Round(time.Millisecond)).Int("requests", o.requests).Int("failed_tries", o.tries)
	if o.lastErr != nil {
		e = e.AnErr("first_error", o.firstErr).AnErr("last_error", o.lastErr)
	}
	e.Msgf("%s go through again", o.what)
	o.since, o.tries, o.requests, o.firstErr, o.lastErr = time.Time{}, 0, 0, nil, nil
}

// Once records a request that failed once, with err, and needs no further try from its caller
// (it is handled otherwise: a job put back to be released again, say): Begin and End at once.
func (o *Outage) Once(op string, err error, now time.Time) {
	o.Begin(op, err, now)
	o.End(now)
}
