package journal

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	at := time.UnixMilli(time.Now().UnixMilli())
	for _, r := range []Record{
		{Kind: KindEpoch, Epoch: 7, Entries: []Entry{}},
		{Kind: KindRetry, Epoch: 7, Entries: []Entry{{ID: 1 << 40, Attempt: 1, At: at}, {ID: 2, Attempt: 3, At: at}}},
		{Kind: KindRetry, Epoch: 8, Entries: []Entry{{ID: 5, Attempt: 2, At: at}}},
		{Kind: KindRefused, Epoch: 9, Entries: []Entry{{ID: 5, Attempt: 0, Seq: 77}, {ID: 6, Attempt: 1<<32 - 1, Seq: 1 << 40}}},
		{Kind: KindRefusedOpen, Epoch: 9, Entries: []Entry{{Seq: 12}, {Seq: 1 << 46}}},
	} {
		got, err := Decode(Append(nil, r))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, r) {
			t.Fatalf("round trip: got %+v, want %+v", got, r)
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	t.Parallel()
	good := Append(nil, Record{Kind: KindRetry, Epoch: 1, Entries: []Entry{{ID: 1, Attempt: 1, At: time.UnixMilli(5)}}})
	for name, b := range map[string][]byte{
		"empty":     nil,
		"version":   append([]byte{2}, good[1:]...),
		"kind":      append([]byte{version, 99}, good[2:]...),
		"truncated": good[:len(good)-1],
		"trailing":  append(append([]byte{}, good...), 1),
		"attempt0":  Append(nil, Record{Kind: KindRetry, Epoch: 1, Entries: []Entry{{ID: 1}}}),
	} {
		if _, err := Decode(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: got %v, want ErrMalformed", name, err)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(Append(nil, Record{Kind: KindRetry, Epoch: 3, Entries: []Entry{{ID: 9, Attempt: 1, At: time.UnixMilli(1)}}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Decode(b)
		if err != nil {
			return
		}
		if _, err := Decode(Append(nil, r)); err != nil {
			t.Fatalf("re-encode of accepted record failed: %v", err)
		}
	})
}
