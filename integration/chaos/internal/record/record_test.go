package record_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/weavejobs/weave/integration/chaos/internal/record"
)

func TestWriteRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "records.jsonl")
	if got, err := record.Read[record.Exec](path); err != nil || got != nil {
		t.Fatalf("missing file: %v, %v; want nothing", got, err)
	}
	at := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	run := []record.Exec{
		{Event: "start", Job: 7, Group: "g", Key: "k", Attempt: 1, Worker: "w1", PID: 10, At: at},
		{Event: "end", Job: 7, Group: "g", Key: "k", Attempt: 1, Worker: "w1", PID: 10, At: at.Add(time.Millisecond)},
	}
	for range 2 { // a second Create appends, as a restarted process does
		w, err := record.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range run {
			if err := w.Write(e); err != nil {
				t.Fatal(err)
			}
		}
		w.Close()
	}
	want := slices.Concat(run, run)
	// A line cut short (not written by Write) is not returned.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"ev":"sta`)
	f.Close()
	got, err := record.Read[record.Exec](path)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(got, want, func(a, b record.Exec) bool { return a == b }) {
		t.Fatalf("read %+v\nwant %+v", got, want)
	}
}

func TestWorkload(t *testing.T) {
	a, b := record.Workload(1, 20, 10, 90), record.Workload(1, 20, 10, 90)
	if len(a) != 20 {
		t.Fatalf("%d groups, want 20", len(a))
	}
	again, singles, batched := 0, 0, 0
	for i := range a {
		if a[i].ID != b[i].ID || !slices.Equal(a[i].Keys, b[i].Keys) || !slices.Equal(a[i].Again, b[i].Again) {
			t.Fatalf("group %d differs between two calls with the same seed", i)
		}
		switch n := len(a[i].Keys); {
		case a[i].Single && (n != 1 || len(a[i].Again) > 1):
			t.Fatalf("single job %d has %d jobs (%d again), want 1", i, n, len(a[i].Again))
		case a[i].Batched && (n != 1 || len(a[i].Again) > 0 || a[i].Single || a[i].Packed):
			t.Fatalf("batched single job %d: %+v, want one job, once, neither Single nor Packed", i, a[i])
		case a[i].Batched:
			batched++
		case a[i].Single:
			singles++
			if a[i].Packed {
				t.Fatalf("group %d is packed and single", i)
			}
		case n < 10 || n > 90:
			t.Fatalf("group %d has %d jobs, want 10..90", i, n)
		}
		incs := a[i].Incarnations()
		if len(a[i].Again) > 0 {
			again++
			if len(incs) != 2 || incs[1][0][0] != 'r' {
				t.Fatalf("group %d: incarnations %v", i, incs)
			}
		} else if len(incs) != 1 {
			t.Fatalf("group %d: %d incarnations, want 1", i, len(incs))
		}
	}
	if want := 20/record.AgainEvery - 1; again != want { // one of them (group 14) is batched
		t.Fatalf("%d groups published again, want %d", again, want)
	}
	if singles == 0 || batched == 0 {
		t.Fatalf("%d single jobs and %d batched ones in the workload, want some of each", singles, batched)
	}
}
