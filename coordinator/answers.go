package coordinator

import (
	"encoding/json"

	"github.com/weavejobs/weave/internal/wire"
)

// answer is the coordinator's answer to a control message that asked for one (Weave-Reply), to
// publish on subject.
type answer struct {
	subject string
	a       wire.ControlAnswer
}

// answer records an answer to the control message c at JOBS sequence seq, if c asked for one.
// Messages read during replay are not answered: their producer asked a coordinator that has since
// stopped and gave up waiting (or a former coordinator answered), and the counts the state would
// give before replay ends are not final.
func (e *engine) answer(seq uint64, c wire.GroupControl, a wire.ControlAnswer) {
	if c.Reply == "" || e.replaying() {
		return
	}
	a.Seq, a.Op, a.Group = seq, c.Op, c.Group
	e.out.answers = append(e.out.answers, answer{subject: e.names.ReplySubject(c.Reply), a: a})
}

// answerNotOpen refuses the control message c: its group has no open incarnation.
func (e *engine) answerNotOpen(seq uint64, c wire.GroupControl) {
	e.answer(seq, c, wire.ControlAnswer{Code: wire.AnswerNotOpen,
		Reason: "group " + c.Group + " is not open: no such group, or it has finished"})
}

// publishAnswers publishes answers on core NATS. An answer nobody receives is dropped: the producer
// stopped waiting, and its message was applied (or refused) all the same.
func (r *run) publishAnswers(answers []answer) {
	for _, a := range answers {
		data, err := json.Marshal(a.a)
		if err == nil {
			err = r.c.nc.Publish(a.subject, data)
		}
		if err != nil {
			r.log.Warn().Err(err).Str("subject", a.subject).Msg("answering a control message failed")
		}
	}
}
