package spreader

import "fmt"

// Config configures a Scheduler.
type Config struct {
	// Feeders is the number of feeder slots, the F of the scheduling model:
	// how many groups are active at once. It must be at least 1. The
	// coordinator uses live worker slots plus one, so that a group rarely has
	// more than one job running until fewer than F groups remain.
	Feeders int
	// Policy orders the offers. The zero value is LeastInFlight.
	Policy Policy
	// MaxInFlightPerGroup caps a group's jobs in flight: a group at the cap is
	// not offered until one of its jobs is done. 0 means no cap. It must not be
	// negative.
	MaxInFlightPerGroup int
}

func (c Config) validate() error {
	switch {
	case c.Feeders < 1:
		return fmt.Errorf("%w: Feeders is %d, must be at least 1", ErrInvalidConfig, c.Feeders)
	case !c.Policy.valid():
		return fmt.Errorf("%w: %w: %d", ErrInvalidConfig, ErrUnknownPolicy, int(c.Policy))
	case c.MaxInFlightPerGroup < 0:
		return fmt.Errorf("%w: MaxInFlightPerGroup is %d, must be 0 (no cap) or more", ErrInvalidConfig, c.MaxInFlightPerGroup)
	}
	return nil
}
