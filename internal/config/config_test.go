package config_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/weavejobs/weave/internal/config"
)

func TestStreamOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   config.StreamOptions
		prefix string
		want   string // "" when valid, else a fragment of the error naming the field
	}{
		{name: "zero", opts: config.StreamOptions{}},
		{name: "one replica", opts: config.StreamOptions{Replicas: 1}},
		{name: "three replicas", opts: config.StreamOptions{Replicas: 3}},
		{name: "max replicas", opts: config.StreamOptions{Replicas: config.MaxReplicas}},
		{name: "negative replicas", opts: config.StreamOptions{Replicas: -1}, want: "Replicas is -1"},
		{name: "too many replicas", opts: config.StreamOptions{Replicas: 6}, want: "Replicas is 6"},
		{name: "prefixed", opts: config.StreamOptions{Replicas: 7}, prefix: "Streams.", want: "Streams.Replicas is 7"},
		{name: "durations", opts: config.StreamOptions{DedupWindow: time.Minute, ResultRetention: time.Hour}},
		{name: "negative dedup window", opts: config.StreamOptions{DedupWindow: -time.Second}, want: "DedupWindow is -1s"},
		{name: "negative retention", opts: config.StreamOptions{ResultRetention: -time.Second}, prefix: "Streams.", want: "Streams.ResultRetention is -1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opts.Validate(tc.prefix)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate: %v, want nil", err)
			case tc.want == "":
			case !errors.Is(err, config.ErrInvalid):
				t.Fatalf("Validate: %v, want an error wrapping ErrInvalid", err)
			case !strings.Contains(err.Error(), tc.want):
				t.Fatalf("Validate: %q, want it to say %q", err, tc.want)
			}
		})
	}
}

func TestReplicasRule(t *testing.T) {
	for n := -2; n <= config.MaxReplicas+2; n++ {
		err := config.Replicas("Replicas", n)
		if valid := n >= 0 && n <= config.MaxReplicas; valid != (err == nil) {
			t.Errorf("Replicas(%d) = %v, want valid %v", n, err, valid)
		}
		if err != nil && !errors.Is(err, config.ErrInvalid) {
			t.Errorf("Replicas(%d) = %v, not wrapping ErrInvalid", n, err)
		}
	}
}

func TestWithDefaults(t *testing.T) {
	got := config.StreamOptions{}.WithDefaults()
	want := config.StreamOptions{Replicas: 1, DedupWindow: config.DefaultDedupWindow, ResultRetention: config.DefaultResultRetention}
	if got != want {
		t.Fatalf("defaults %+v, want %+v", got, want)
	}
	set := config.StreamOptions{Replicas: 3, DedupWindow: time.Minute, ResultRetention: time.Hour, MemoryStorage: true}
	if got := set.WithDefaults(); got != set {
		t.Fatalf("WithDefaults changed set fields: %+v, want %+v", got, set)
	}
}
