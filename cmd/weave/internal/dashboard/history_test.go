package dashboard

import (
	"slices"
	"testing"
	"time"

	"github.com/weavejobs/weave/coordinator"
)

func status(epoch, admitted, done uint64, inFlight map[string]int) *Status {
	st := &Status{Status: coordinator.Status{Epoch: epoch, Jobs: map[string]uint64{"pending": admitted - done}, Totals: coordinator.Totals{Admitted: admitted, Done: done}}}
	for g, n := range inFlight {
		st.Groups = append(st.Groups, coordinator.GroupStatus{ID: g, InFlight: n})
	}
	return st
}

// TestHistoryRates: rates average the window before each sample, restart with a new coordinator
// (whose totals start again), and old samples fall out of the history.
func TestHistoryRates(t *testing.T) {
	h := &history{keep: time.Minute}
	t0 := time.Unix(1000, 0)
	for i, st := range []*Status{
		status(1, 0, 0, nil),
		status(1, 10, 0, nil), // +10 in 1s
		status(1, 10, 4, nil), // +4 out in 1s
		status(2, 3, 1, nil),  // a new coordinator: totals restart
		status(2, 9, 1, nil),
	} {
		h.add(sampleOf(t0.Add(time.Duration(i)*time.Second), st))
	}
	ser := h.series()
	rates := func(r []*float64) []float64 {
		var out []float64
		for _, v := range r {
			if v == nil {
				out = append(out, -1)
			} else {
				out = append(out, *v)
			}
		}
		return out
	}
	wantIn := []float64{-1, 10, 5, -1, 6}
	wantOut := []float64{-1, 0, 2, -1, 0}
	if got := rates(ser.RateIn); !slices.Equal(got, wantIn) {
		t.Errorf("rates in %v, want %v", got, wantIn)
	}
	if got := rates(ser.RateOut); !slices.Equal(got, wantOut) {
		t.Errorf("rates out %v, want %v", got, wantOut)
	}
	if ser.States["pending"][1] != 10 || len(ser.Times) != 5 {
		t.Errorf("series %+v", ser)
	}
	h.add(sampleOf(t0.Add(2*time.Minute), status(2, 9, 9, nil)))
	if ser := h.series(); len(ser.Times) != 1 || ser.RateIn[0] != nil {
		t.Errorf("after two minutes: %+v", ser)
	}
}

// TestHistoryShares: the groups in flight now and those that held the most over the window
// are drawn apart, the others summed.
func TestHistoryShares(t *testing.T) {
	h := &history{keep: time.Minute}
	t0 := time.Unix(1000, 0)
	inFlight := map[string]int{"big": 50, "small": 1}
	for i := range maxShareGroups {
		inFlight[string(rune('a'+i))] = 10 + i
	}
	h.add(sampleOf(t0, status(1, 1000, 0, inFlight)))
	h.add(sampleOf(t0.Add(time.Second), status(1, 1000, 0, map[string]int{"small": 3})))
	ser := h.series()
	if len(ser.Shares) != maxShareGroups+1 {
		t.Fatalf("%d shares, want %d apart and the others", len(ser.Shares), maxShareGroups)
	}
	// small is in flight now: first; then big, which held the most.
	if s := ser.Shares[0]; s.Group != "small" || s.InFlight[0] != 1 || s.InFlight[1] != 3 {
		t.Errorf("first share %+v, want small", s)
	}
	if s := ser.Shares[1]; s.Group != "big" || s.InFlight[0] != 50 || s.InFlight[1] != 0 {
		t.Errorf("second share %+v, want big", s)
	}
	// "a" (10) and "b" (11) held the least: summed as the others.
	if s := ser.Shares[maxShareGroups]; s.Group != otherGroups || s.InFlight[0] != 21 || s.InFlight[1] != 0 {
		t.Errorf("other groups %+v", s)
	}
}
