package coordinator

import "github.com/weavejobs/weave/coordinator/internal/engine"

// The status a running coordinator answers (QueryStatus, `weave status`, the dashboard). The
// engine builds it from its state; each type documents its fields.
type (
	Status         = engine.Status
	Totals         = engine.Totals
	GroupStatus    = engine.GroupStatus
	ResourceStatus = engine.ResourceStatus
	LimitStatus    = engine.LimitStatus
	PoolStatus     = engine.PoolStatus
	WorkerStatus   = engine.WorkerStatus
	StandbyStatus  = engine.StandbyStatus
	Alarm          = engine.Alarm
)
