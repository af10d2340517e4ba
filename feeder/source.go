package feeder

import "iter"

// Source is the supply of groups that feeders share. It pulls a group from the
// underlying sequence only when a feeder asks for one, so the sequence may be
// endless.
type Source[T any] struct {
	groups iter.Seq[iter.Seq[T]]
	next   func() (iter.Seq[T], bool) // nil until the first Next
	stop   func()
	done   bool // exhausted or stopped: Next returns false from now on
}

// NewSource returns a Source over groups. Nothing is pulled until the first
// call to Next. The caller must call Stop once it is done, so that a partly
// consumed sequence can release what it holds.
func NewSource[T any](groups iter.Seq[iter.Seq[T]]) *Source[T] {
	return &Source[T]{groups: groups}
}

// Next pulls the next group, or reports false once the source is exhausted or
// stopped.
func (s *Source[T]) Next() (iter.Seq[T], bool) {
	if s.done {
		return nil, false
	}
	if s.next == nil {
		// The coroutine behind iter.Pull is created here and not in NewSource,
		// so a Source that is never asked for a group costs nothing.
		s.next, s.stop = iter.Pull(s.groups)
	}
	g, ok := s.next()
	if !ok {
		s.done = true
	}
	return g, ok
}

// Stop ends the source. The underlying sequence's yield returns false, and the
// sequence can run its cleanup. Stop is idempotent.
func (s *Source[T]) Stop() {
	s.done = true
	if s.stop != nil {
		s.stop()
	}
}
