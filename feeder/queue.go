package feeder

import "iter"

// minQueueCap is the smallest buffer a Queue keeps once it has one. It stops a
// queue that swings between empty and a few items from reallocating each time.
const minQueueCap = 8

// Queue is a first-in, first-out queue on a ring buffer. Its memory follows its
// length: the buffer doubles when full and halves when a quarter full, so a
// queue that held a large backlog gives the memory back as it drains. Push and
// Pop are amortised O(1). The zero value is an empty queue ready to use.
type Queue[T any] struct {
	buf  []T // ring; len(buf) is zero or a power of two
	head int // index of the first item in buf
	n    int // number of items
}

// Len returns the number of items in the queue.
func (q *Queue[T]) Len() int { return q.n }

// Push appends v at the back.
func (q *Queue[T]) Push(v T) {
	if q.n == len(q.buf) {
		q.resize(max(2*len(q.buf), minQueueCap))
	}
	q.buf[(q.head+q.n)&(len(q.buf)-1)] = v
	q.n++
}

// Peek returns the item at the front without removing it.
func (q *Queue[T]) Peek() (T, bool) {
	if q.n == 0 {
		var zero T
		return zero, false
	}
	return q.buf[q.head], true
}

// Pop removes and returns the item at the front.
func (q *Queue[T]) Pop() (T, bool) {
	var zero T
	if q.n == 0 {
		return zero, false
	}
	v := q.buf[q.head]
	q.buf[q.head] = zero // let the garbage collector have it
	q.head = (q.head + 1) & (len(q.buf) - 1)
	q.n--
	q.shrink()
	return v, true
}

// All returns the items from front to back, without removing them. The queue
// must not change while the range is running.
func (q *Queue[T]) All() iter.Seq[T] {
	return func(yield func(T) bool) {
		for i := range q.n {
			if !yield(q.buf[(q.head+i)&(len(q.buf)-1)]) {
				return
			}
		}
	}
}

// DeleteFunc removes every item for which del returns true. It keeps the order
// of the rest and shrinks the buffer if they fill no more than a quarter of it.
// It costs O(Len), so the live scheduler uses it for bulk clean-up, not per
// item.
func (q *Queue[T]) DeleteFunc(del func(T) bool) {
	mask := len(q.buf) - 1
	kept := 0
	for i := range q.n {
		// The write index never passes the read index, so compacting in
		// place is safe.
		if v := q.buf[(q.head+i)&mask]; !del(v) {
			q.buf[(q.head+kept)&mask] = v
			kept++
		}
	}
	var zero T
	for i := kept; i < q.n; i++ {
		q.buf[(q.head+i)&mask] = zero
	}
	q.n = kept
	q.shrink()
}

// shrink halves the buffer while the items fill no more than a quarter of it.
// Shrinking at a quarter, not at a half, leaves room between growing and
// shrinking, so a queue hovering at a power of two does not copy on every
// call.
func (q *Queue[T]) shrink() {
	size := len(q.buf)
	for size > minQueueCap && q.n <= size/4 {
		size /= 2
	}
	if size != len(q.buf) {
		q.resize(size)
	}
}

// resize moves the items into a new buffer of the given power-of-two size,
// starting at index 0.
func (q *Queue[T]) resize(size int) {
	buf := make([]T, size)
	if q.n > 0 {
		if end := q.head + q.n; end <= len(q.buf) {
			copy(buf, q.buf[q.head:end])
		} else {
			k := copy(buf, q.buf[q.head:])
			copy(buf[k:], q.buf[:q.n-k])
		}
	}
	q.buf, q.head = buf, 0
}
