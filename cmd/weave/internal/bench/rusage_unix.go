//go:build unix

package bench

import (
	"fmt"
	"syscall"
	"time"
)

func rusageCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rusageSwitches is how many times the process's threads were switched out, voluntarily
// (blocked: a futex, a poll) or not.
func rusageSwitches() uint64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return uint64(ru.Nvcsw + ru.Nivcsw)
}

// ensureFDs raises the process's soft limit on open files to its hard limit if it is below need,
// and returns the limit and, if it raised it, the limit before. Need above the hard limit is an
// error that says so, rather than connections failing one by one.
func ensureFDs(need uint64) (limit, raisedFrom uint64, err error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, 0, nil
	}
	if rl.Cur >= need {
		return rl.Cur, 0, nil
	}
	if rl.Max < need {
		return rl.Cur, 0, fmt.Errorf("%d open files needed, and the hard limit is %d (ulimit -Hn)", need, rl.Max)
	}
	from := rl.Cur
	rl.Cur = rl.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return from, 0, fmt.Errorf("raise the open-file limit from %d to %d: %w", from, rl.Max, err)
	}
	return rl.Cur, from, nil
}
