package coordinator

import (
	"strconv"
	"sync"

	"github.com/weavejobs/weave/internal/wire"
)

// sharedMsgs tracks the JOBS messages that hold jobs of several groups: single packs
// (wire.AppendSinglePack). Such a message is deleted once every job in it is done with it
// (complete and not kept for its failure, or refused), not when the first one is. Each job says
// so once per term, but may say it again (a summary written again, a refusal after an admission
// that failed), so a job's share is a bit, not a count. Replay registers each message again as
// it feeds it, and the jobs that replay finds complete say so again.
type sharedMsgs struct {
	mu   sync.Mutex
	msgs map[uint64]*sharedMsg // by JOBS sequence
}

type sharedMsg struct {
	jobs, done uint32 // a bit per job of the message: all of them, those done with it
}

// hold registers the message at seq if it is a single pack (its headers h).
func (s *sharedMsgs) hold(seq uint64, h map[string][]string) {
	hh := wire.Header(h)
	if hh.Get(wire.HdrSingle) == "" {
		return
	}
	n, err := strconv.Atoi(hh.Get(wire.HdrPack))
	if err != nil || n < 2 || n > wire.MaxPack {
		return // not a pack: rejected whole, or one job alone
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.msgs == nil {
		s.msgs = map[uint64]*sharedMsg{}
	}
	if _, ok := s.msgs[seq]; !ok {
		s.msgs[seq] = &sharedMsg{jobs: uint32(1<<n - 1)}
	}
}

// release records that the job with packed ID id is done with its message, and returns the
// message's sequence and whether it can now be deleted: every job in it is done with it. A
// message not registered is never deleted here (the next term's replay registers it).
func (s *sharedMsgs) release(id uint64) (seq uint64, last bool) {
	seq = wire.JobSeq(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.msgs[seq]
	if m == nil {
		return seq, false
	}
	m.done |= 1 << wire.JobIndex(id)
	if m.done&m.jobs != m.jobs {
		return seq, false
	}
	delete(s.msgs, seq)
	return seq, true
}

// forget drops the message at seq, deleted whole (refused as a whole).
func (s *sharedMsgs) forget(seq uint64) {
	s.mu.Lock()
	delete(s.msgs, seq)
	s.mu.Unlock()
}
