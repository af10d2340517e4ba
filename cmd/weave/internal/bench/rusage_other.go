//go:build !unix

package bench

import "time"

func rusageCPU() time.Duration { return 0 }

func rusageSwitches() uint64 { return 0 }
