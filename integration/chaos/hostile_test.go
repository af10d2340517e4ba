//go:build linux

package chaos

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/weavejobs/weave/integration/chaos/internal/record"
)

// hostileFile is where the hostile worker records the forged report messages stored.
func (r *run) hostileFile() string { return filepath.Join(r.dir, "records-hostile.jsonl") }

// stopHostile ends the hostile worker once the work is done, so what it stored is final.
func (r *run) stopHostile(ctx context.Context) {
	done, err := r.hostile.signal(syscall.SIGTERM)
	if err != nil || done == nil {
		return
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// checkForgeries adds the checks on the hostile worker's forged reports: they were stored
// throughout, also while no coordinator ran (between a kill and the takeover), and no outcome
// stored carries a forged result or error.
func (r *run) checkForgeries(rep *report, stored storedGroups) {
	forgeries, err := record.Read[record.Forgery](r.hostileFile())
	if err != nil {
		rep.fail("hostile records readable", err.Error())
		return
	}
	reports, duringTakeover, takeovers := 0, 0, 0
	for _, f := range r.faults {
		if f.kind == faultCoordinator && f.takeover > 0 {
			takeovers++
		}
	}
	for _, fg := range forgeries {
		reports += fg.Reports
		for _, f := range r.faults {
			if f.kind == faultCoordinator && f.takeover > 0 && !fg.At.Before(f.at) && fg.At.Before(f.at.Add(f.takeover)) {
				duringTakeover++
			}
		}
	}
	var carried []string
	for _, o := range stored.outcomes {
		forged := strings.Contains(string(o.Data), record.Forged)
		for _, a := range o.History {
			forged = forged || strings.Contains(a.Error, record.Forged)
		}
		if forged {
			carried = append(carried, fmt.Sprintf("job %d %s/%s: %s after %d attempts", o.ID, o.group, o.Key, o.State, o.Attempts))
		}
	}
	rep.add("forged reports stored throughout", len(forgeries) > 0 && (takeovers == 0 || duringTakeover > 0),
		fmt.Sprintf("%d forged report messages stored (%d reports), %d of them during the %d takeovers", len(forgeries), reports, duringTakeover, takeovers), nil)
	rep.add("no outcome carries a forged result", len(carried) == 0,
		fmt.Sprintf("%d outcome records with %q in their result or history", len(carried), record.Forged), carried)
	rep.figure("forgeries", fmt.Sprintf("%d messages of %d forged reports by a worker of another pool, %d while no coordinator ran", len(forgeries), reports, duringTakeover))
}

// hostileEvery is the hostile worker's pause between two forged report messages: often enough
// that every takeover sees several, seldom enough to leave the short form's load as it was.
const hostileEvery = 100 * time.Millisecond
