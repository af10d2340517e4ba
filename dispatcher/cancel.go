package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nuid"

	"github.com/weavejobs/weave/internal/wire"
)

// Errors of Handle.Cancel and Handle.CancelJobs (ErrNoAnswer also of Dispatcher.Redrive).
var (
	// ErrGroupNotOpen reports that the coordinator refused a cancel: no incarnation of the group
	// is open (the ID is unknown, or its group has finished). Nothing was canceled.
	ErrGroupNotOpen = errors.New("weave: group is not open")
	// ErrNoAnswer reports that a cancel or a redrive is stored in the JOBS stream but no
	// coordinator answered within Config.RequestTimeout: none is running, it is still replaying
	// the streams after a start, or it is older than the operation (a coordinator that does not
	// know redrive records it in NS_REJECTED without answering). The request is not lost: a
	// coordinator that knows it applies it (or refuses it) when it reads it. A limit change
	// (SetLimit, RemoveLimit, Pause, Resume) stored but not confirmed applied by the running
	// coordinator within Config.RequestTimeout wraps it too.
	ErrNoAnswer = errors.New("weave: stored, but no coordinator answered")
)

// CancelResult is what the coordinator did with a cancel of some jobs (Handle.CancelJobs).
type CancelResult struct {
	// Canceled counts the jobs that ended canceled at once (not started, delayed, or waiting
	// for a retry); Stopping the running jobs told to stop, each of which ends canceled when
	// its worker reports.
	Canceled, Stopping int
	// Final lists the jobs of the group that had ended already (done, failed or canceled), and
	// Unknown the IDs that are not jobs of the group's open incarnation: neither is canceled.
	// A coordinator older than these lists leaves both empty.
	Final, Unknown []uint64
}

// String describes the result: "2 canceled, 1 stopping; ended already: 7; not in the group: 9".
func (r CancelResult) String() string {
	s := fmt.Sprintf("%d canceled, %d stopping", r.Canceled, r.Stopping)
	for _, part := range []struct {
		what string
		ids  []uint64
	}{{"ended already", r.Final}, {"not in the group", r.Unknown}} {
		if len(part.ids) == 0 {
			continue
		}
		s += "; " + part.what + ": " + idList(part.ids, 20)
	}
	return s
}

// idList lists ids, comma-separated, the first max of them and how many more.
func idList(ids []uint64, max int) string {
	var b strings.Builder
	for i, id := range ids {
		if i == max {
			fmt.Fprintf(&b, " and %d more", len(ids)-max)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.FormatUint(id, 10))
	}
	return b.String()
}

// cancel publishes the cancel c and waits for the coordinator's answer (see ask).
func (d *Dispatcher) cancel(ctx context.Context, c wire.GroupControl) (CancelResult, error) {
	a, err := d.ask(ctx, c)
	if err != nil {
		return CancelResult{}, err
	}
	d.log.Debug().Str("group", c.Group).Bool("ok", a.OK).Int("canceled", a.Canceled).Int("stopping", a.Stopping).Msg("cancel answered")
	switch {
	case a.OK:
		return CancelResult{Canceled: a.Canceled, Stopping: a.Stopping, Final: a.Final, Unknown: a.Unknown}, nil
	case a.Code == wire.AnswerNotOpen:
		return CancelResult{}, fmt.Errorf("%w: cancel of group %q refused: %s", ErrGroupNotOpen, c.Group, a.Reason)
	default:
		return CancelResult{}, fmt.Errorf("weave: cancel of group %q refused by the coordinator: %s", c.Group, a.Reason)
	}
}

// ask publishes the control message c (a cancel or a redrive) with a reply token and waits for
// the coordinator's answer, at most RequestTimeout (and within ctx). The answer comes on core
// NATS (see wire.ControlAnswer): the subscription is made before the publish, on the same
// connection, so the server has it when the coordinator answers. Anyone allowed to publish on
// the reply subjects could publish there too: a message that is not the answer to c (another
// sequence, or not an answer) is skipped.
func (d *Dispatcher) ask(ctx context.Context, c wire.GroupControl) (wire.ControlAnswer, error) {
	c.Reply = nuid.Next()
	subject := d.names.ReplySubject(c.Reply)
	sub, err := d.nc.SubscribeSync(subject)
	if err != nil {
		return wire.ControlAnswer{}, fmt.Errorf("weave: %s of group %q: subscribe to %s: %w", c.Op, c.Group, subject, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	seq, err := d.publishControl(ctx, c)
	if err != nil {
		return wire.ControlAnswer{}, err
	}
	wctx, stop := context.WithTimeout(ctx, d.cfg.RequestTimeout)
	defer stop()
	for {
		msg, err := sub.NextMsgWithContext(wctx)
		if err != nil {
			why := err
			if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
				why = fmt.Errorf("no answer on %s within %v: is a coordinator running (one that knows %q), and may this connection subscribe to %s?",
					subject, d.cfg.RequestTimeout, c.Op, d.names.AllReplies())
			}
			return wire.ControlAnswer{}, fmt.Errorf("%w: %s of group %q (JOBS sequence %d): it is applied when a coordinator reads it: %w", ErrNoAnswer, c.Op, c.Group, seq, why)
		}
		var a wire.ControlAnswer
		if json.Unmarshal(msg.Data, &a) != nil || a.Seq != seq || a.Op != c.Op || a.Group != c.Group {
			d.log.Debug().Str("subject", subject).Msg("ignored a message that is not the answer to our request")
			continue
		}
		return a, nil
	}
}
