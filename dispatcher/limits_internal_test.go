package dispatcher

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weavejobs/weave/internal/wire"
)

// TestHeaderRoomFitsLargestJob checks that headerRoom covers the headers of the largest valid job,
// so that any payload within MaxPayload fits under the server's max_payload.
func TestHeaderRoomFitsLargestJob(t *testing.T) {
	t.Parallel()
	resources := func(c string) []string {
		rs := make([]string, wire.MaxResources)
		for i := range rs {
			rs[i] = fmt.Sprintf("%03d", i) + strings.Repeat(c, wire.MaxResourceLen-3)
		}
		return rs
	}
	m := wire.JobMeta{
		// Multi-byte and not a subject token: the longest base64 group token.
		Group:       strings.Repeat("é", wire.MaxGroupIDLen/2),
		Key:         strings.Repeat("k", wire.MaxKeyLen),
		Require:     resources("r"),
		Prefer:      resources("p"),
		MaxAttempts: wire.MaxAttemptsLimit,
		Timeout:     wire.MaxTimeout - time.Nanosecond,
		RunAt:       time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC),
	}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	size := len("NATS/1.0\r\n\r\n")
	for k, vs := range m.Header() {
		for _, v := range vs {
			size += len(k) + len(": ") + len(v) + len("\r\n")
		}
	}
	if size > headerRoom {
		t.Fatalf("largest job headers take %d bytes, headerRoom is %d", size, headerRoom)
	}
	t.Logf("largest job headers: %d bytes", size)
}

func TestPayloadLimit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		configured int
		server     int64
		want       int
		wantErr    bool
	}{
		{0, 1 << 20, DefaultMaxPayload, false},                   // default server max_payload 1 MiB
		{0, 64 << 10, 64<<10 - headerRoom, false},                // small server: default shrinks
		{0, 0, DefaultMaxPayload, false},                         // server limit unknown
		{1000, 1 << 20, 1000, false},                             // explicit
		{1<<20 - headerRoom, 1 << 20, 1<<20 - headerRoom, false}, // explicit, at the bound
		{1<<20 - headerRoom + 1, 1 << 20, 0, true},               // explicit, above the bound
		{-1, 1 << 20, 0, true},
		{0, headerRoom, 0, true}, // no room left for payloads
	} {
		got, err := payloadLimit(tc.configured, tc.server)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("payloadLimit(%d, %d) = %d, %v; want %d, error %v", tc.configured, tc.server, got, err, tc.want, tc.wantErr)
		}
		if err != nil && !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("payloadLimit(%d, %d): error %v does not wrap ErrInvalidConfig", tc.configured, tc.server, err)
		}
	}
}

func TestGroupOptionsValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		w  int
		ok bool
	}{{0, true}, {1, true}, {1000, true}, {-1, false}, {1001, false}} {
		o := groupOptions{}
		Weight(tc.w)(&o)
		if err := o.validate("g"); (err == nil) != tc.ok {
			t.Errorf("Weight(%d): %v", tc.w, err)
		}
	}
}
