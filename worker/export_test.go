package worker

import "time"

// WithClock returns c with now as the clock the worker judges its batches' leases by, so a test
// can make a lease lapse (as a stopped process would find) without stopping the process.
func WithClock(c Config, now func() time.Time) Config {
	c.clock = now
	return c
}

// WithSiblingWait returns c with d as the longest a report waits for the other jobs of its work
// batch, so a test can tell waiting from not waiting whatever the machine's load.
func WithSiblingWait(c Config, d time.Duration) Config {
	c.siblingWait = d
	return c
}

// WithPullExpiries returns c with pull requests waiting at the server for active, and a dormant
// worker's for dormant, so a test sees a worker go dormant without waiting the default expiries.
func WithPullExpiries(c Config, active, dormant time.Duration) Config {
	c.pullExpiry, c.dormantExpiry = active, dormant
	return c
}
