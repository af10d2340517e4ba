package engine

import (
	"encoding/json"
	"fmt"
	"testing"
)

// TestStatusFit: an answer within the limit is left whole; a larger one loses the ends of its
// longest lists until it fits, says so (Cut), and keeps the lists' full counts and their order.
func TestStatusFit(t *testing.T) {
	t.Parallel()
	build := func() *Status {
		st := &Status{Namespace: "ns", Jobs: map[string]uint64{"pending": 1}}
		for i := range 3000 {
			st.Workers = append(st.Workers, WorkerStatus{ID: fmt.Sprintf("w%05d", i), Pool: "any", Concurrency: 8})
		}
		for i := range 500 {
			st.Resources = append(st.Resources, ResourceStatus{Name: fmt.Sprintf("r%05d", i), Required: map[string]uint64{"pending": 1}})
		}
		st.Pools = []PoolStatus{{Key: "any", Workers: 3000, Slots: 24000}}
		st.WorkerCount, st.ResourceCount, st.PoolCount = len(st.Workers), len(st.Resources), len(st.Pools)
		return st
	}
	whole := build().Marshal()
	st := build()
	if got := st.Fit(len(whole)); len(got) != len(whole) || st.Cut {
		t.Fatalf("an answer that fits: %d bytes (want %d), cut %v", len(got), len(whole), st.Cut)
	}
	for _, limit := range []int{len(whole) / 2, 20_000, 2_000} {
		st := build()
		data := st.Fit(limit)
		if len(data) > limit || !st.Cut {
			t.Fatalf("limit %d: %d bytes, cut %v", limit, len(data), st.Cut)
		}
		var back Status
		if err := json.Unmarshal(data, &back); err != nil {
			t.Fatal(err)
		}
		if back.WorkerCount != 3000 || back.ResourceCount != 500 || back.PoolCount != 1 || !back.Cut {
			t.Fatalf("limit %d: counts %d/%d/%d, cut %v", limit, back.WorkerCount, back.ResourceCount, back.PoolCount, back.Cut)
		}
		if len(back.Workers) >= 3000 || len(back.Workers) > 0 && back.Workers[0].ID != "w00000" {
			t.Fatalf("limit %d: %d workers from %+v", limit, len(back.Workers), back.Workers[:1])
		}
	}
}
