package dispatcher

import (
	"context"
	"fmt"

	"github.com/weavejobs/weave/internal/directget"
	"github.com/weavejobs/weave/internal/wire"
)

// resolveIncarnation sets h.openSeq to the incarnation the Handle's open joined, once. The
// coordinator resumes a group that is open and not sealed when it reads another open of it (a
// producer publishing the group again after a crash, as Publish's doc invites): the jobs join
// that incarnation, and its outcomes carry the first open's sequence, not this one's. Waiting
// for this open's sequence would then wait for ever.
//
// It reads the group's control messages stored before the Handle's open, as the coordinator
// applies them: an open starts an incarnation unless one is open and not sealed; a seal, or a
// cancel of the whole group, ends the open one. Messages that do not parse were refused and
// changed nothing; refused opens and seals were deleted by the coordinator. It costs one
// request per page of 256 control messages, at the first wait only.
func (h *Handle) resolveIncarnation(ctx context.Context) error {
	h.resolveMu.Lock()
	defer h.resolveMu.Unlock()
	if h.openSeq == 0 || h.resolvedAt == h.openSeq {
		return nil
	}
	get := directget.New(h.d.nc, h.d.names.JobsStream())
	defer get.Close()
	subject := h.d.names.GroupSubject(h.gtok)
	var open uint64 // the incarnation open and not sealed so far, or 0
scan:
	for from := uint64(1); from < h.openSeq; {
		rctx, cancel := context.WithTimeout(ctx, h.d.cfg.RequestTimeout)
		msgs, err := get.Next(rctx, subject, from, 256)
		cancel()
		if err != nil {
			return fmt.Errorf("weave: group %q: read its control messages: %w", h.group, err)
		}
		if len(msgs) == 0 {
			break
		}
		for _, m := range msgs {
			if m.Seq >= h.openSeq {
				break scan
			}
			c, err := wire.ParseGroupControl(m.Header)
			if err != nil {
				continue
			}
			switch {
			case c.Op == wire.OpOpen && open == 0:
				open = m.Seq
			case c.Op == wire.OpSeal, c.Op == wire.OpCancel && len(c.Jobs) == 0:
				open = 0
			}
		}
		from = msgs[len(msgs)-1].Seq + 1
	}
	if open != 0 {
		h.openSeq = open
	}
	h.resolvedAt = h.openSeq
	return nil
}
