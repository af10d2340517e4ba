package coordinator

import (
	"testing"
	"time"

	"github.com/weavejobs/weave/internal/jobindex"
	"github.com/weavejobs/weave/internal/wire"
)

// A cancel stored while no coordinator ran (or before a restart) is applied when replay ends:
// during replay the group's pending jobs are not in the scheduler yet, and they used to be
// scheduled again as if the cancel had never been.
func TestCancelReadDuringReplayApplies(t *testing.T) {
	t.Parallel()
	r := newReplayEngine(t, 1)
	e, names := r.e, r.names
	seq := uint64(0)
	feed := func(subject string, h map[string][]string) uint64 {
		seq++
		e.feed(subject, seq, h, nil, time.Time{})
		return seq
	}
	control := func(c wire.GroupControl) uint64 { return feed(names.GroupSubject(c.Group), c.Header()) }
	job := func(g string) uint64 { return feed(names.JobSubject(g), wire.JobMeta{Group: g}.Header()) }

	control(wire.GroupControl{Group: "whole", Op: wire.OpOpen})
	w1, w2 := job("whole"), job("whole")
	control(wire.GroupControl{Group: "whole", Op: wire.OpSeal, Count: 2})
	control(wire.GroupControl{Group: "whole", Op: wire.OpCancel})

	control(wire.GroupControl{Group: "some", Op: wire.OpOpen})
	s1, s2 := job("some"), job("some")
	control(wire.GroupControl{Group: "some", Op: wire.OpSeal, Count: 2})
	control(wire.GroupControl{Group: "some", Op: wire.OpCancel, Jobs: []uint64{s1}})

	// A cancel before the group's seal seals it: a later job is refused, as live, and the
	// producer's own seal is accepted silently.
	control(wire.GroupControl{Group: "early", Op: wire.OpOpen})
	e0 := job("early")
	control(wire.GroupControl{Group: "early", Op: wire.OpCancel})
	late := job("early")
	control(wire.GroupControl{Group: "early", Op: wire.OpSeal, Count: 2})
	if len(e.out.rejections) != 1 || e.out.rejections[0].seq != late {
		t.Errorf("rejections %+v, want only the job after the cancel (%d)", e.out.rejections, late)
	}

	e.endReplay(nil, time.Unix(1_700_000_000, 0))
	for _, tc := range []struct {
		id   uint64
		want jobindex.State
	}{{w1, jobindex.Canceled}, {w2, jobindex.Canceled}, {s1, jobindex.Canceled}, {s2, jobindex.Pending}, {e0, jobindex.Canceled}} {
		if st, _ := e.idx.State(tc.id); st != tc.want {
			t.Errorf("job %d is %v, want %v", tc.id, st, tc.want)
		}
	}
	complete := map[string]bool{}
	for _, g := range e.out.summaries {
		complete[g.id] = true
	}
	if !complete["whole"] || !complete["early"] || complete["some"] {
		t.Errorf("groups complete: %v, want whole and early", complete)
	}
	if len(e.out.answers) != 0 {
		t.Errorf("answered cancels read during replay: %+v", e.out.answers)
	}
}
