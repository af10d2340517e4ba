//go:build linux

package chaos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/internal/testwait"
	"github.com/weavejobs/weave/internal/wire"
)

// drain waits, with no more faults, until the producer has seen every group finish and exited
// and the coordinator has no group open (the incarnations the producer could not wait for, see
// "not waited for" in the report, complete too); or until cfg.drain passes, or nothing moves (no
// execution starts, the producer records nothing) for cfg.stall.
func (r *run) drain(ctx context.Context) {
	dctx, cancel := context.WithTimeout(ctx, r.cfg.drain)
	defer cancel()
	lastStarts, moved := -1, time.Now()
	records := &tail{path: r.producerFile()}
	err := testwait.Until(dctx, 100*time.Millisecond, func() (string, error) {
		if r.producer.finished() && r.noGroupOpen(dctx) {
			return "", nil
		}
		if starts := r.mon.startCount(); starts != lastStarts || len(records.lines()) > 0 {
			lastStarts, moved = starts, time.Now()
		}
		if time.Since(moved) > r.cfg.stall {
			r.stalls = append(r.stalls, fmt.Sprintf("drain: for %v no execution started and the producer recorded nothing", r.cfg.stall))
			return "", nil
		}
		return "the producer to finish and no group to be open", nil
	})
	if err != nil {
		r.stalls = append(r.stalls, fmt.Sprintf("drain: the producer had not finished when the %v for it ran out", r.cfg.drain))
	}
}

// noGroupOpen reports whether the namespace's coordinator answers status with no group open.
func (r *run) noGroupOpen(ctx context.Context) bool {
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := coordinator.QueryStatus(qctx, r.nc, r.names.Namespace())
	return err == nil && len(st.Groups) == 0 && st.Unsealed == 0
}

// readStream calls fn with every message of the stream on subjects matching filter, from the
// first, with one ordered consumer; it returns once it has read up to the stream's end as it
// was when it began.
func (r *run) readStream(ctx context.Context, stream, filter string, fn func(jetstream.Msg)) error {
	s, err := r.js.Stream(ctx, stream)
	if err != nil {
		return err
	}
	if s.CachedInfo().State.Msgs == 0 {
		return nil
	}
	last := s.CachedInfo().State.LastSeq
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
	if err != nil {
		return err
	}
	msgs, err := cons.Messages()
	if err != nil {
		return err
	}
	defer msgs.Stop()
	for {
		m, err := msgs.Next(jetstream.NextContext(ctx))
		if err != nil {
			return err
		}
		fn(m)
		meta, err := m.Metadata()
		if err != nil {
			return err
		}
		if meta.Sequence.Stream >= last || meta.NumPending == 0 {
			return nil
		}
	}
}

// storedOutcome is one outcome record as stored in the RESULTS stream.
type storedOutcome struct {
	group, incarnation string
	wire.Outcome
}

// storedGroups is what the RESULTS stream holds: every outcome record (repeats included) and
// every summary, per group.
type storedGroups struct {
	outcomes  []storedOutcome
	summaries map[string][]wire.GroupSummary
	bad       int // messages that did not decode
}

// readResults reads every outcome message the RESULTS stream holds.
func (r *run) readResults(ctx context.Context) (storedGroups, error) {
	st := storedGroups{summaries: map[string][]wire.GroupSummary{}}
	err := r.readStream(ctx, r.names.ResultsStream(), r.names.AllOutcomes(), func(m jetstream.Msg) {
		// A follow-up's ID ("g00003.then.1") is not its own subject token (wire.GroupToken).
		group, err := wire.ParseGroupToken(strings.TrimPrefix(m.Subject(), r.names.OutcomeSubject("")))
		if err != nil {
			st.bad++
			return
		}
		outs, sum, err := wire.DecodeOutcomeMsg(m.Data())
		if err != nil {
			st.bad++
			return
		}
		// A message holds outcomes, a summary, or a group's last outcomes and its summary.
		for _, o := range outs {
			st.outcomes = append(st.outcomes, storedOutcome{group: group, incarnation: m.Headers().Get(wire.HdrGroupSeq), Outcome: o})
		}
		if sum != nil {
			st.summaries[group] = append(st.summaries[group], *sum)
		}
	})
	return st, err
}

// readRejections counts the messages the coordinator refused, by reason, with numbers (job IDs,
// attempts, sequences) left out: the hostile worker's forgeries differ only by those.
func (r *run) readRejections(ctx context.Context) (map[string]int, error) {
	reasons := map[string]int{}
	err := r.readStream(ctx, r.names.RejectedStream(), r.names.RejectSubject(), func(m jetstream.Msg) {
		reasons[logDigits.ReplaceAllString(m.Headers().Get(wire.HdrReason), "N")]++
	})
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return reasons, nil
	}
	return reasons, err
}
