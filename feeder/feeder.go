package feeder

import "iter"

// Feed returns one feeder's jobs in push form. It takes a group from src,
// yields the group's jobs, and takes the next group the moment that group runs
// dry, until src is empty. Groups and jobs are pulled only as the range asks for
// them. Breaking out of the range stops the group being read, but not src,
// because src is shared.
//
// Ranging over Feed costs one coroutine switch pair per group, to pull it from
// the shared source, and nothing extra per job. spreader.Spread runs its first
// feeder this way and pulls only the others through a [Feeder].
func Feed[T any](src *Source[T]) iter.Seq[T] {
	return func(yield func(T) bool) {
		for {
			g, ok := src.Next()
			if !ok {
				return
			}
			for job := range g {
				if !yield(job) {
					return
				}
			}
		}
	}
}

// Feeder is [Feed] in pull form. Each feeder of a round keeps its place in its
// group between calls to Next.
//
// Behind a Feeder is a single coroutine (iter.Pull) that lasts for the feeder's
// whole life. The feeder's groups are ranged over inside that coroutine, so
// switching groups costs nothing extra. Each job costs one coroutine switch
// there and one back.
type Feeder[T any] struct {
	src  *Source[T]
	next func() (T, bool) // nil until the first Next
	stop func()
	done bool
}

// New returns a feeder that takes its groups from src. It takes its first group
// on the first call to Next, not before.
func New[T any](src *Source[T]) *Feeder[T] {
	return &Feeder[T]{src: src}
}

// Next returns the feeder's next job. If the current group has run dry, Next
// takes groups from the source until one yields a job. It reports false once
// the source is empty. After that the feeder is finished.
func (f *Feeder[T]) Next() (T, bool) {
	if f.next != nil {
		// Once the coroutine has ended, next keeps reporting false, so the hot
		// path needs no bookkeeping of its own.
		return f.next()
	}
	return f.start()
}

// start starts the coroutine on the first call to Next.
func (f *Feeder[T]) start() (T, bool) {
	if f.done || f.src.done {
		// Nothing is left to take, so a coroutine is not worth starting.
		f.done = true
		var zero T
		return zero, false
	}
	f.next, f.stop = iter.Pull(f.feed)
	return f.next()
}

// feed is the coroutine's body: Feed, except that each group is handed the
// coroutine's yield itself rather than a loop body that calls it, which saves
// a call and the range-over-func bookkeeping on every job. A group whose yield
// returned false returns (iter.Seq's contract); done, set by Stop before it
// resumes the coroutine, then ends the loop without taking another group.
func (f *Feeder[T]) feed(yield func(T) bool) {
	for !f.done {
		g, ok := f.src.Next()
		if !ok {
			return
		}
		g(yield)
	}
}

// Stop releases the group the feeder holds. That group's yield returns false.
// The shared source is left alone. Stop is idempotent.
func (f *Feeder[T]) Stop() {
	f.done = true
	if f.stop != nil {
		f.stop()
	}
}
