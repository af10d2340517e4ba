package coordinator

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestConfigRejects checks that a Config that cannot work is refused with an error naming the
// field, not accepted and misbehaving later.
func TestConfigRejects(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Namespace: "ns", RetryBase: 10 * time.Second, RetryMax: time.Second}, "RetryBase 10s above RetryMax 1s"},
		{Config{Namespace: "ns", LeaseTTL: -time.Second}, "LeaseTTL is -1s, must not be negative"},
		{Config{Namespace: "ns", AbandonAfter: -time.Second}, "AbandonAfter is -1s"},
		{Config{Namespace: "ns", Prefetch: -2}, "Prefetch is -2, must be -1"},
		{Config{Namespace: "ns", QueueAhead: -2}, "QueueAhead is -2, must be -1"},
		// One rule for replicas (internal/config), refused rather than clamped.
		{Config{Namespace: "ns", Streams: StreamOptions{Replicas: -1}}, "Streams.Replicas is -1, must be 1 to 5"},
		{Config{Namespace: "ns", Streams: StreamOptions{Replicas: 6}}, "Streams.Replicas is 6, must be 1 to 5"},
		{Config{Namespace: "ns", Streams: StreamOptions{DedupWindow: -time.Second}}, "Streams.DedupWindow is -1s"},
	} {
		_, err := tc.cfg.withDefaults()
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want ErrInvalidConfig with %q", tc.cfg, err, tc.want)
		}
	}
	if _, err := (Config{Namespace: "ns", RetryBase: time.Second, RetryMax: time.Second}).withDefaults(); err != nil {
		t.Errorf("RetryBase == RetryMax: %v", err)
	}
}

// TestDefaultPrefetchIsTheDefault: DefaultPrefetch is what a zero Config runs with (the adaptive
// window), not a fixed window of one.
func TestDefaultPrefetchIsTheDefault(t *testing.T) {
	cfg, err := Config{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Prefetch != DefaultPrefetch {
		t.Fatalf("zero Config runs with Prefetch %d, DefaultPrefetch says %d", cfg.Prefetch, DefaultPrefetch)
	}
}
