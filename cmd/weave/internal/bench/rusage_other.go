//go:build !unix

package bench

import "time"

func rusageCPU() time.Duration { return 0 }

func rusageSwitches() uint64 { return 0 }

func ensureFDs(uint64) (limit, raisedFrom uint64, err error) { return 0, 0, nil }
