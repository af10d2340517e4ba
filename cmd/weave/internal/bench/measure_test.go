package bench

import (
	"math"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

func TestScaleHeapSample(t *testing.T) {
	t.Parallel()
	if got := scaleHeapSample(10, 1000, 1); got != 1000 {
		t.Errorf("rate 1: %v, want the bytes unscaled", got)
	}
	if got := scaleHeapSample(0, 0, 512); got != 0 {
		t.Errorf("nothing sampled: %v", got)
	}
	// Objects of the sampling rate's size are sampled with probability 1 − 1/e.
	got := scaleHeapSample(1, 512, 512)
	if want := 512 / (1 - math.Exp(-1)); math.Abs(got-want) > 1e-9 {
		t.Errorf("one object of the rate's size: %v, want %v", got, want)
	}
	// Large objects are always sampled.
	if got := scaleHeapSample(1, 1<<20, 512); math.Abs(got-(1<<20)) > 1 {
		t.Errorf("a large object: %v", got)
	}
}

// keep holds allocations for TestAttributedHeap.
var keep [][]byte

//go:noinline
func allocateForAttribution(n, size int) {
	for range n {
		keep = append(keep, make([]byte, size))
	}
}

// TestAttributedHeap allocates from a function of this package and finds it in the profile. Not
// parallel: it changes runtime.MemProfileRate.
func TestAttributedHeap(t *testing.T) {
	old := runtime.MemProfileRate
	runtime.MemProfileRate = 512
	defer func() { runtime.MemProfileRate = old }()
	prefixes := []string{"github.com/weavejobs/weave/cmd/weave/internal/bench.allocateForAttribution"}
	before := attributedHeap(prefixes)
	allocateForAttribution(4096, 256) // 1 MiB in small objects
	after := attributedHeap(prefixes)
	grew := float64(after) - float64(before)
	if grew < 0.8*(1<<20) || grew > 1.2*(1<<20) {
		t.Errorf("attributed growth %.0f bytes, want about %d", grew, 1<<20)
	}
	keep = nil
	if freed := attributedHeap(prefixes); freed > after/10 {
		t.Errorf("%d bytes still attributed after the objects were freed", freed)
	}
	if got := attributedHeap([]string{"no.such/package."}); got != 0 {
		t.Errorf("an unknown package: %d bytes", got)
	}
}

func TestProcessCPU(t *testing.T) {
	t.Parallel()
	c0 := processCPU()
	if c0 == 0 && runtime.GOOS != "linux" {
		t.Skip("no process CPU on " + runtime.GOOS)
	}
	deadline := time.Now().Add(50 * time.Millisecond)
	x := 0
	for time.Now().Before(deadline) {
		x++
	}
	if c1 := processCPU(); c1 <= c0 {
		t.Errorf("CPU did not advance over a busy loop: %v → %v (%d)", c0, c1, x)
	}
}

func TestPeakRSS(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("VmHWM is Linux only")
	}
	if peakRSS() == 0 {
		t.Error("no VmHWM")
	}
}

// TestOSCounts: the process's I/O system calls count each write (on Linux, where
// /proc/self/io exists), and never go down.
func TestOSCounts(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	before := readOSCounts()
	for range 20 {
		if _, err := f.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	d := readOSCounts().minus(before)
	if _, err := os.Stat("/proc/self/io"); err == nil && (d.ioSyscalls < 20 || d.ioSyscalls > 1<<40) {
		t.Errorf("20 writes counted as %d I/O system calls", d.ioSyscalls)
	}
	if d.switches > 1<<40 {
		t.Errorf("context switches went down: %d", int64(d.switches))
	}
}
