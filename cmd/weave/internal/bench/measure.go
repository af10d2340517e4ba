package bench

import (
	"bufio"
	"bytes"
	"context"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// processCPU returns the user plus system CPU time this process has used so far, from getrusage
// (the counters /proc/self/stat shows, at microsecond instead of 10 ms resolution), or 0 where it
// is not available. It counts every goroutine of the process: with an embedded server, the
// server's work too.
func processCPU() time.Duration { return rusageCPU() }

// osCounts are counters the kernel keeps for the process, for what they say about its work
// beside its CPU time, with far less noise on a shared machine: the same work makes the same
// system calls.
type osCounts struct {
	ioSyscalls uint64 // read- and write-family system calls (syscr + syscw of /proc/self/io; Linux)
	switches   uint64 // context switches of its threads (getrusage; Unix)
}

// readOSCounts reads the process's osCounts; zero where not available.
func readOSCounts() osCounts {
	c := osCounts{switches: rusageSwitches()}
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return c
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		k, v, ok := strings.Cut(line, ": ")
		if !ok || k != "syscr" && k != "syscw" {
			continue
		}
		if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil {
			c.ioSyscalls += n
		}
	}
	return c
}

func (c osCounts) plus(o osCounts) osCounts {
	return osCounts{ioSyscalls: c.ioSyscalls + o.ioSyscalls, switches: c.switches + o.switches}
}

func (c osCounts) minus(o osCounts) osCounts {
	return osCounts{ioSyscalls: c.ioSyscalls - o.ioSyscalls, switches: c.switches - o.switches}
}

// waitQuiet waits until the process uses less than 0.5% of a core over a quarter of a second,
// at most maxWait, and returns how long it waited. Where process CPU is not available it returns
// at once.
func waitQuiet(ctx context.Context, maxWait time.Duration) time.Duration {
	start := time.Now()
	for time.Since(start) < maxWait && ctx.Err() == nil {
		c0 := processCPU()
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
		if processCPU()-c0 < 1250*time.Microsecond {
			break
		}
	}
	return time.Since(start)
}

// peakRSS returns the process's peak resident set size (VmHWM of /proc/self/status) in bytes, or
// 0 where that is not available (not Linux).
func peakRSS() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return 0
		}
		kb, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return 0
		}
		return kb << 10
	}
	return 0
}

// resetPeakRSS returns the memory the Go runtime holds but does not use to the OS, then resets the
// process's peak RSS to its current RSS (Linux 4.0 and later: "5" written to
// /proc/self/clear_refs), so that a following peakRSS measures from now. It reports whether the
// reset worked; if not, peakRSS keeps counting from the start of the process.
func resetPeakRSS() bool {
	debug.FreeOSMemory()
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}

// heapInUse returns the bytes of live heap objects after two full collections.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// coordinatorPackages are the packages whose allocations count as the coordinator's: the
// coordinator itself and the scheduling structures only it uses in a bench process.
var coordinatorPackages = []string{
	"github.com/weavejobs/weave/coordinator.",
	"github.com/weavejobs/weave/internal/jobindex.",
	"github.com/weavejobs/weave/spreader.",
}

// attributedHeap estimates the bytes of live heap objects allocated with a function of one of the
// packages (prefixes of fully qualified function names) on the allocating stack, from the Go heap
// profile, scaled for sampling the way pprof scales it. Set runtime.MemProfileRate low before the
// allocations of interest for a precise figure. Allocations made by other packages on behalf of
// these (a NATS client's message buffers) are not counted.
func attributedHeap(prefixes []string) uint64 {
	// The profile reflects the heap as of the last completed collection, and frees are accounted
	// a cycle late: collect three times.
	for range 3 {
		runtime.GC()
	}
	var recs []runtime.MemProfileRecord
	n, _ := runtime.MemProfile(nil, false)
	for {
		recs = make([]runtime.MemProfileRecord, n+64)
		var ok bool
		if n, ok = runtime.MemProfile(recs, false); ok {
			recs = recs[:n]
			break
		}
	}
	rate := int64(runtime.MemProfileRate)
	var total float64
	for i := range recs {
		r := &recs[i]
		if r.InUseBytes() <= 0 || !stackIn(r.Stack(), prefixes) {
			continue
		}
		total += scaleHeapSample(r.InUseObjects(), r.InUseBytes(), rate)
	}
	return uint64(total)
}

// stackIn reports whether a frame of the stack belongs to one of the packages.
func stackIn(stack []uintptr, prefixes []string) bool {
	frames := runtime.CallersFrames(stack)
	for {
		f, more := frames.Next()
		for _, p := range prefixes {
			if strings.HasPrefix(f.Function, p) {
				return true
			}
		}
		if !more {
			return false
		}
	}
}

// scaleHeapSample estimates the live bytes behind a heap profile record's sampled objects and
// bytes: an allocation of size s is sampled with probability 1 − e^(−s/rate), so each sampled
// byte stands for 1/(1 − e^(−avg/rate)) bytes, avg being the record's average object size (as
// runtime/pprof scales them).
func scaleHeapSample(objects, bytes, rate int64) float64 {
	if objects <= 0 || bytes <= 0 {
		return 0
	}
	if rate <= 1 {
		return float64(bytes)
	}
	avg := float64(bytes) / float64(objects)
	return float64(bytes) / (1 - math.Exp(-avg/float64(rate)))
}

// loadAverage returns the 1, 5 and 15 minute load averages (/proc/loadavg), or "" where not
// available.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// cpuModel returns the first CPU's model name (/proc/cpuinfo), or "".
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
