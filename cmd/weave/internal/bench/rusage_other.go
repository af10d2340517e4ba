//go:build !unix

package bench

import "time"

func rusageCPU() time.Duration { return 0 }
