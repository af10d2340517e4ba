package dispatcher

import "testing"

// TestPublicationQueueGrows: the ring of messages in flight starts small and grows up to
// MaxPending, keeping them oldest first across wrap-arounds.
func TestPublicationQueueGrows(t *testing.T) {
	p := &publication{d: &Dispatcher{cfg: Config{MaxPending: 100}}, queue: make([]inflight, initialQueue)}
	next, oldest := 0, 0
	pop := func() {
		t.Helper()
		if got := p.queue[p.head].index; got != oldest {
			t.Fatalf("oldest in flight is %d, want %d", got, oldest)
		}
		p.queue[p.head] = inflight{}
		p.head = (p.head + 1) % len(p.queue)
		p.size--
		oldest++
	}
	for round := range 5 {
		for range 10 + round*20 { // more each round: wraps, then grows
			if p.size < 100 {
				p.push(inflight{index: next})
				next++
			}
		}
		for range 7 {
			pop()
		}
	}
	for p.size > 0 {
		pop()
	}
	if len(p.queue) > 100 || len(p.queue) < 64 {
		t.Fatalf("ring of %d after up to 100 in flight (MaxPending 100)", len(p.queue))
	}
}
