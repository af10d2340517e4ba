package worker

import "time"

// WithClock returns c with now as the clock the worker judges its batches' leases by, so a test
// can make a lease lapse (as a stopped process would find) without stopping the process.
func WithClock(c Config, now func() time.Time) Config {
	c.clock = now
	return c
}
