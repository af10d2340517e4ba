package wire

// ControlAnswer is the coordinator's answer to a group control message that asked for one with
// the Weave-Reply header (a cancel or a redrive): JSON on the core NATS subject Names.ReplySubject, published
// when the coordinator applies or refuses the message. It is not stored: a producer that waits
// for it subscribes before publishing the message, and a message applied while nobody listens
// (read during the coordinator's replay, say) is not answered.
type ControlAnswer struct {
	// Seq is the control message's sequence in the JOBS stream.
	Seq   uint64  `json:"seq"`
	Op    GroupOp `json:"op"`
	Group string  `json:"group"`
	// OK is true if the coordinator applied the message.
	OK bool `json:"ok"`
	// Code names why the message was refused (AnswerNotOpen, AnswerRunning, AnswerNotFailed,
	// AnswerGone), with Reason in words.
	Code   string `json:"code,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Canceled counts the jobs that ended canceled at once (pending, or waiting for a retry).
	Canceled int `json:"canceled"`
	// Stopping counts the running jobs told to stop; each ends canceled when its worker reports.
	Stopping int `json:"stopping"`
	// Final lists, on a cancel of some jobs, those of the group that had ended already; Unknown
	// the IDs that are not jobs of the group's open incarnation. Neither is canceled.
	Final   []uint64 `json:"final,omitempty"`
	Unknown []uint64 `json:"unknown,omitempty"`
	// Incarnation, on a redrive, is the open sequence of the new incarnation (OK), or of the
	// incarnation still running (AnswerRunning; 0 if a redrive is starting one).
	Incarnation uint64 `json:"incarnation,omitempty"`
	// Jobs, on a redrive, counts the jobs of the new incarnation; Gone the failed jobs left out
	// because their stored message is gone.
	Jobs int `json:"jobs,omitempty"`
	Gone int `json:"gone,omitempty"`
}

// Codes of ControlAnswer.
const (
	// AnswerNotOpen: no incarnation of the group is open (the ID is unknown, or its group is
	// complete).
	AnswerNotOpen = "not-open"
	// AnswerRunning: a redrive of a group whose latest incarnation is not complete yet.
	AnswerRunning = "running"
	// AnswerNotFailed: a redrive with nothing to run again (no complete incarnation retained, none
	// of its jobs failed, or a job named is not one of its failed jobs).
	AnswerNotFailed = "not-failed"
	// AnswerGone: a redrive whose failed jobs' stored messages are all gone.
	AnswerGone = "gone"
	// AnswerCycle: an open whose group would run after itself through the groups it names.
	AnswerCycle = "cycle"
)
