package dispatcher

import (
	"context"
	"fmt"
	"math"

	"github.com/weavejobs/weave/internal/directget"
	"github.com/weavejobs/weave/internal/wire"
)

// groupState is what a group ID's control messages stored in JOBS say, read as the coordinator
// applies them: an open starts an incarnation unless one is open and not sealed (then it
// resumes it: a producer publishing the group again after a crash); a seal, or a cancel of the
// whole group, ends the open one. Messages that do not parse were refused and changed nothing;
// refused opens and seals were deleted by the coordinator.
type groupState struct {
	open   uint64 // the incarnation open and not sealed, by its open's sequence, or 0
	sealed uint64 // the last incarnation sealed, by its open's sequence, or 0
}

// controlState reads the group's control messages stored before sequence upTo (one batch direct
// get per 256 of them).
func (d *Dispatcher) controlState(ctx context.Context, gtok string, upTo uint64) (groupState, error) {
	get := d.jobs
	subject := d.names.GroupSubject(gtok)
	var st groupState
	for from := uint64(1); from < upTo; {
		msgs, err := d.nextControls(ctx, get, subject, from)
		if err != nil {
			return st, fmt.Errorf("weave: read the control messages of group token %q: %w", gtok, err)
		}
		if len(msgs) == 0 {
			break
		}
		for _, m := range msgs {
			if m.Seq >= upTo {
				return st, nil
			}
			c, err := wire.ParseGroupControl(m.Header)
			if err != nil {
				continue
			}
			switch {
			case c.Op == wire.OpOpen && st.open == 0:
				st.open = m.Seq
			case st.open != 0 && (c.Op == wire.OpSeal || c.Op == wire.OpCancel && len(c.Jobs) == 0):
				st.open, st.sealed = 0, st.open
			}
		}
		from = msgs[len(msgs)-1].Seq + 1
	}
	return st, nil
}

// nextControls reads up to 256 control messages from sequence from, trying again within
// RequestTimeout while the stream cannot answer (a new or re-elected stream leader), as the
// dispatcher's other requests do.
func (d *Dispatcher) nextControls(ctx context.Context, get *directget.Client, subject string, from uint64) (msgs []*directget.Msg, err error) {
	err = d.retry(ctx, func(ctx context.Context) (err error) {
		msgs, err = get.Next(ctx, subject, from, 256)
		return err
	})
	return msgs, err
}

// running returns the open sequence of the group's incarnation that is sealed and still
// running (its summary is not stored yet), or 0. The coordinator refuses an open of such a
// group, and every job published with it: Publish checks first (see Publish).
func (d *Dispatcher) running(ctx context.Context, groupID string) (uint64, error) {
	gtok := wire.GroupToken(groupID)
	st, err := d.controlState(ctx, gtok, math.MaxUint64)
	if err != nil || st.open != 0 || st.sealed == 0 {
		return 0, err // an open group is resumed; a new one, or one purged, starts afresh
	}
	h := &Handle{d: d, group: groupID, gtok: gtok, openSeq: st.sealed, resolvedAt: st.sealed}
	if _, finished, err := h.storedSummary(ctx); err != nil || finished {
		return 0, err
	}
	// Before saying it runs, ask the leader: the replica that answered may lag behind (a
	// producer publishing the group again the moment its Wait saw the summary), and taken for
	// running the group would not be published again: its Handle would wait on the old one.
	if finished, err := h.leaderSummary(ctx); err != nil || finished {
		return 0, err
	}
	return st.sealed, nil
}

// resolveIncarnation sets h.openSeq to the incarnation the Handle's open joined, once: an open
// that resumed a group left unsealed joined that group's incarnation, and its outcomes carry the
// first open's sequence, not this one's. Waiting for this open's sequence would wait for ever.
// It costs one request per page of 256 control messages, at the first wait only.
func (h *Handle) resolveIncarnation(ctx context.Context) error {
	h.resolveMu.Lock()
	defer h.resolveMu.Unlock()
	if h.openSeq == 0 || h.resolvedAt == h.openSeq {
		return nil
	}
	st, err := h.d.controlState(ctx, h.gtok, h.openSeq)
	if err != nil {
		return err
	}
	if st.open != 0 {
		h.openSeq = st.open
	}
	h.resolvedAt = h.openSeq
	return nil
}
