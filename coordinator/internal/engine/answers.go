package engine

import (
	"github.com/weavejobs/weave/internal/wire"
)

// Answer is the coordinator's answer to a control message that asked for one (Weave-Reply), to
// publish on subject.
type Answer struct {
	Subject string
	Reply   wire.ControlAnswer
}

// answer records an answer to the control message c at JOBS sequence seq, if c asked for one.
// Messages read during replay are not answered: their producer asked a coordinator that has since
// stopped and gave up waiting (or a former coordinator answered), and the counts the state would
// give before replay ends are not final. Those stored lately are answered when replay ends (see
// applyCancel and bindAfterReplay).
func (e *Engine) answer(seq uint64, c wire.GroupControl, a wire.ControlAnswer) {
	if c.Reply == "" || e.Replaying() {
		return
	}
	a.Seq, a.Op, a.Group = seq, c.Op, c.Group
	e.out.Answers = append(e.out.Answers, Answer{Subject: e.names.ReplySubject(c.Reply), Reply: a})
}

// answerNotOpen refuses the control message c: its group has no open incarnation.
func (e *Engine) answerNotOpen(seq uint64, c wire.GroupControl) { e.answer(seq, c, notOpen(c.Group)) }

// notOpen is the answer to a control message whose group has no open incarnation.
func notOpen(id string) wire.ControlAnswer {
	return wire.ControlAnswer{Code: wire.AnswerNotOpen, Reason: "group " + id + " is not open: no such group, or it has finished"}
}
