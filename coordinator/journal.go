package coordinator

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/internal/journal"
	"github.com/weavejobs/weave/internal/wire"
)

func (r *run) journalMsg(rec journal.Record) *nats.Msg {
	m := nats.NewMsg(r.names.JournalSubject())
	m.Header.Set(wire.HdrEpoch, strconv.FormatUint(rec.Epoch, 10))
	m.Data = journal.Append(nil, rec)
	return m
}

func (r *run) appendJournal(ctx context.Context, rec journal.Record) error {
	if _, err := r.c.js.PublishMsg(ctx, r.journalMsg(rec)); err != nil {
		return fmt.Errorf("weave: journal: %w", err)
	}
	return nil
}

// trimEvents deletes the EVENTS messages the state no longer depends on (see Engine.LowWater).
// It first appends an epoch record, so the newest epoch mark always survives for fencing.
func (r *run) trimEvents(ctx context.Context) {
	low := r.e.LowWater()
	// Below trimmedTo+2 there is at most the epoch record the last trim appended: nothing to do.
	if r.trimming || low <= r.trimmedTo+2 {
		return
	}
	r.trimming = true
	epoch := r.e.Epoch()
	r.wg.Go(func() {
		defer func() {
			select {
			case r.trimmedCh <- low:
			case <-r.done:
			}
		}()
		if err := r.appendJournal(ctx, journal.Record{Kind: journal.KindEpoch, Epoch: epoch}); err != nil {
			// The next trim tries again: part of an outage, not a warning each time.
			r.log.Debug().Err(err).Msg("trim: epoch record")
			r.outage.Once("trim EVENTS", err, time.Now())
			low = 0
			return
		}
		s, err := r.c.js.Stream(ctx, r.names.EventsStream())
		if err == nil {
			err = s.Purge(ctx, jetstream.WithPurgeSequence(low))
		}
		if err != nil {
			r.log.Debug().Err(err).Msg("trim: purge EVENTS")
			r.outage.Once("trim EVENTS", err, time.Now())
			low = 0
		}
	})
}
