package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weavejobs/weave/internal/wire"
)

// TestLookAlikeNamesRejected: a group opened, or a job stored, under a name holding a bidi
// override or a zero-width character is refused whole by the coordinator and recorded as a
// rejection saying why, whatever the producer's client checked.
func TestLookAlikeNamesRejected(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, Config{Prefetch: -1})
	te.open("g")
	for _, tc := range []struct {
		subject string
		header  func() nats.Header
	}{
		{te.e.names.GroupSubject(wire.GroupToken("invoice\u202efdp.exe")), func() nats.Header {
			return wire.GroupControl{Group: "invoice\u202efdp.exe", Op: wire.OpOpen}.Header()
		}},
		{te.e.names.JobSubject(wire.GroupToken("zw\u200bend")), func() nats.Header {
			return wire.JobMeta{Group: "zw\u200bend"}.Header()
		}},
		{te.e.names.JobSubject("g"), func() nats.Header {
			return wire.JobMeta{Group: "g", Key: "a\u2066b"}.Header()
		}},
	} {
		before := len(te.e.out.Rejections)
		te.seq++
		jobs, _ := te.e.Feed(tc.subject, te.seq, tc.header(), nil, time.Time{})
		if len(jobs) != 0 || len(te.e.out.Rejections) != before+1 {
			t.Fatalf("%s: admitted %d jobs, %d new rejections: want the message rejected", tc.subject, len(jobs), len(te.e.out.Rejections)-before)
		}
		r := te.e.out.Rejections[before]
		if r.Seq != te.seq || !strings.Contains(r.Reason, "bidi") && !strings.Contains(r.Reason, "zero-width") {
			t.Errorf("rejection %+v does not say which rule", r)
		}
	}
	if st := te.e.Status(); st.OpenGroups != 1 {
		t.Errorf("%d open groups, want only g", st.OpenGroups)
	}
}
