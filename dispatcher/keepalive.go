package dispatcher

import (
	"context"
	"sync"
	"time"

	"github.com/weavejobs/weave/internal/wire"
)

// keepAlive publishes a keep-alive for group every Config.KeepAlive until the returned stop is
// called, and stop returns once no keep-alive is in flight any more, so none can follow the
// seal. The coordinator seals a group whose producer it has not heard from for its AbandonAfter;
// jobs count as signs of life too, but a producer may spend a long time between two jobs (an
// iterator waiting on a crawl, say), and that must not look like a producer that died.
//
// A failed keep-alive is only logged: the next one, or the next job, makes up for it.
func (d *Dispatcher) keepAlive(group string) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(d.cfg.KeepAlive)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			rctx, rcancel := context.WithTimeout(ctx, d.cfg.RequestTimeout)
			_, err := d.publishControl(rctx, wire.GroupControl{Group: group, Op: wire.OpKeepAlive})
			rcancel()
			if err != nil && ctx.Err() == nil {
				d.log.Warn().Err(err).Str("group", group).Msg("keep-alive not stored")
			}
		}
	})
	return func() {
		cancel()
		wg.Wait()
	}
}
