package coordinator

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/weavejobs/weave/internal/transient"
)

// TestRetryLogsAnOutageOnce: requests that fail for a while and then go through (a NATS node
// lost and the cluster mending) log one line when the first fails and one summary when the last
// goes through, at info, and no warning per failed try.
func TestRetryLogsAnOutageOnce(t *testing.T) {
	t.Parallel()
	var (
		mu  sync.Mutex
		buf bytes.Buffer
	)
	log := zerolog.New(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	})).Level(zerolog.InfoLevel)
	r := &run{cfg: Config{LeaseTTL: time.Minute}, log: log, outage: transient.New(log, "requests to NATS"), fail: func(error) {}}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			tries := 0
			err := r.retry(context.Background(), "write", func(context.Context) error {
				if tries++; tries < 4 {
					return errors.New("nats: no responders available for request")
				}
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if strings.Contains(buf.String(), `"level":"warn"`) || len(lines) < 2 || len(lines)%2 != 0 ||
		!strings.Contains(lines[0], "requests to NATS failing") || !strings.Contains(lines[len(lines)-1], "requests to NATS go through again") {
		t.Fatalf("log of 8 requests failing 3 times each:\n%s", buf.String())
	}
	if len(lines) > 4 {
		t.Fatalf("%d lines for one outage of overlapping requests:\n%s", len(lines), buf.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
