package jobindex

// idPool hands out small integer IDs and takes released ones back, so the tables indexed by
// them (groups, resources, profiles) stay dense however many entries come and go.
type idPool struct {
	next uint32
	free []uint32
}

func (p *idPool) get() uint32 {
	if n := len(p.free); n > 0 {
		id := p.free[n-1]
		p.free = p.free[:n-1]
		return id
	}
	id := p.next
	p.next++
	return id
}

func (p *idPool) put(id uint32) { p.free = append(p.free, id) }
