//go:build unix

package bench

import (
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
