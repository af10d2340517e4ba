package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestBenchUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "warp"}, `unknown scenario "warp"`},
		{[]string{"bench", "--json", "--markdown"}, "exclude each other"},
		{[]string{"bench", "throughput", "--jobs", "-5"}, "throughput"},
		{[]string{"bench", "throughput", "--jobs", "10", "--groups", "20"}, "20 groups"},
		{[]string{"bench", "scale", "--scale-sizes", "10"}, "at least 100"},
		{[]string{"bench", "--namespace", "a-namespace-prefix-too-long"}, "at most 18"},
		{[]string{"bench", "--namespace", "bad.prefix"}, "--namespace"},
		{[]string{"bench", "fleet", "--fleet-parts", "workers,nope"}, `unknown part "nope"`},
		{[]string{"bench", "fleet", "--fleet-submitters", "0"}, "submitters 1..20000"},
		{[]string{"bench", "fleet", "--fleet-shapes", "4by8"}, "want workers x slots"},
		{[]string{"bench", "throughput", "--shapes", "0x8"}, "must be positive"},
		{[]string{"bench", "throughput", "--replicas", "7"}, "--replicas is 7"},
	} {
		code, out, errOut := runCLI(t, "", tc.args...)
		if code != exitUsage || !strings.Contains(out+errOut, tc.want) {
			t.Errorf("weave %q: exit %d, want %d with %q\nstdout: %s\nstderr: %s", tc.args, code, exitUsage, tc.want, out, errOut)
		}
	}
}

// TestBenchJSON runs a tiny throughput scenario through the command and decodes its JSON.
// With --memprofile it writes the run's allocation profile (gzipped protobuf); a path in a
// missing directory is refused before the run.
func TestBenchJSON(t *testing.T) {
	mem := filepath.Join(t.TempDir(), "a.mem")
	code, out, errOut := runCLI(t, "", "bench", "throughput", "--jobs", "300", "--groups", "5", "--rounds", "1", "--concurrency", "8", "--json", "--memprofile", mem)
	if code != exitOK {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	var got struct {
		Command   string
		Scenarios []struct {
			Scenario string
			Checks   []struct{ Name string }
			Result   struct {
				Fleets []struct {
					WeaveJobsPerSec float64 `json:"weave_jobs_per_s"`
				}
			}
		}
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(got.Scenarios) != 1 || got.Scenarios[0].Scenario != "throughput" || len(got.Scenarios[0].Result.Fleets) != 1 || got.Scenarios[0].Result.Fleets[0].WeaveJobsPerSec <= 0 || len(got.Scenarios[0].Checks) != 2 {
		t.Errorf("decoded %+v", got)
	}
	if !strings.HasPrefix(got.Command, "weave bench throughput --") || !strings.Contains(got.Command, "--jobs=300") {
		t.Errorf("command %q", got.Command)
	}
	if !strings.Contains(errOut, "throughput 1 × 8: round 1/1") {
		t.Errorf("no progress on stderr: %s", errOut)
	}
	if b, err := os.ReadFile(mem); err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Errorf("allocation profile: %d bytes, %v; want a gzipped profile", len(b), err)
	}
	code, out, errOut = runCLI(t, "", "bench", "throughput", "--memprofile", filepath.Join(t.TempDir(), "missing", "a.mem"))
	if code != exitError || !strings.Contains(errOut, "no such file or directory") || strings.Contains(errOut, "round 1/") {
		t.Errorf("memprofile in a missing directory: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
}

// TestStatCPU: the cluster's CPU is read from /proc/<pid>/stat, whose command name may hold
// spaces and parentheses.
func TestStatCPU(t *testing.T) {
	t.Parallel()
	line := "4242 (nats (server) x) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 31 0 0 20 0 12 0 100 0 0\n"
	if d, ok := statCPU([]byte(line)); !ok || d != 281*clockTick {
		t.Errorf("statCPU = %v, %v; want %v", d, ok, 281*clockTick)
	}
	for _, bad := range []string{"", "4242 nats S 1", "4242 (nats) S 1 2 3"} {
		if _, ok := statCPU([]byte(bad)); ok {
			t.Errorf("statCPU(%q) accepted", bad)
		}
	}
	if runtime.GOOS == "linux" {
		if _, ok := procCPU(os.Getpid()); !ok {
			t.Error("procCPU of this process failed")
		}
	}
}
