package engine

import (
	"time"

	"github.com/weavejobs/weave/internal/wire"
)

// Write is one order to the coordinator's writer, in the order the engine decided them: a
// group's outcomes, its summary (with its last outcomes), its completion (summary stored: purge
// its jobs unless kept, forget it), or a retained group's expiry. Values only: the writer runs
// on goroutines of its own.
type Write struct {
	Group   string // the group's ID
	Tok     string // its token (wire.GroupToken)
	Reply   string // with outcomes: the producer's reply token they are published to
	OpenSeq uint64 // its incarnation
	// Outcomes not written yet, and the EVENTS sequence of the report behind each (or 0).
	Outcomes []wire.Outcome
	EvSeqs   []uint64
	// Summary, when set, is the complete group's summary: Outcomes are its last ones.
	Summary *wire.GroupSummary
	// Complete, alone: the group's summary is stored; purge its job messages (if Purge) up to
	// LastSeq (a later incarnation of the group ID shares its subjects), and forget it.
	Complete bool
	Purge    bool
	LastSeq  uint64
	Single   bool // the group is a single job: LastSeq is its one message in JOBS
	// TTL, with Summary: its messages carry ResultRetention as their TTL (Config.OutcomesExpire).
	TTL bool
	// Retention is a retained group whose retention expired: delete its outcomes.
	Retention *Purge
}

// Abandon asks for the seal of an unsealed group whose producer went silent, with the jobs it
// has.
type Abandon struct {
	Group, Tok string
	Count      uint64
}

// lingerAbove is the outcome writes per OutcomeLinger above which outcomes linger: 16 per 10ms,
// 1,600 messages a second, a few percent of a core; below it, writing at once costs little.
const lingerAbove = 16

// maxLinger bounds how long a group's outcomes linger however many groups wait.
const maxLinger = time.Second

// outcomeLinger is the state of Config.OutcomeLinger: the groups whose outcomes wait and the
// earliest time one is due, and the outcome writes of the current OutcomeLinger period and of
// the one before, from window on: the load that decides whether outcomes linger.
type outcomeLinger struct {
	lingering        []*group
	due              time.Time
	window           time.Time
	thisRun, prevRun int
}

// TakeEffects returns the effects of the steps since the last call, for the run to carry out,
// with the writes of outcomes whose time has come.
//
// Under load (more than lingerAbove outcome writes per OutcomeLinger), a group's outcomes wait
// while its previous outcome message is less than OutcomeLinger old, unless the group is
// complete: groups interleave, so writing each step's outcomes at once stores about one message
// per job when many groups run (see Config.OutcomeLinger). Under a light load nothing waits.
func (e *Engine) TakeEffects(now time.Time) Effects {
	out := e.out
	e.out = Effects{}
	busy := e.outcomeLoad(now) > lingerAbove
	linger := e.linger()
	for _, g := range out.outcomes {
		if len(g.outcomes) == 0 || g.lingering || g.complete {
			continue // a complete group's go with its summary, below
		}
		if due := g.outcomesAt.Add(linger); busy && now.Before(due) {
			g.lingering = true
			e.ol.lingering = append(e.ol.lingering, g)
			if e.ol.due.IsZero() || due.Before(e.ol.due) {
				e.ol.due = due
			}
			continue
		}
		out.Writes = e.writeGroupOutcomes(out.Writes, g, now)
	}
	out.Writes = e.writeLingering(out.Writes, now)
	for i := range out.retentionPurges {
		out.Writes = append(out.Writes, Write{Retention: &out.retentionPurges[i]})
	}
	for _, g := range out.summaries {
		g.keepJobs = e.keepsJobs(g)
		w := Write{Group: g.id, Tok: g.tok, Reply: g.reply, OpenSeq: g.openSeq, Purge: !g.keepJobs, LastSeq: g.lastSeq, Single: g.single(), TTL: e.outcomesExpire(g)}
		if len(g.outcomes) > 0 {
			e.outcomeLoad(now)
			e.ol.thisRun++
			w.Outcomes, w.EvSeqs = g.outcomes, g.outcomeSeqs
			g.outcomes, g.outcomeSeqs, g.lingering = nil, nil, false // (writeLingering drops it)
		}
		sum := g.summary()
		w.Summary = &sum
		out.Writes = append(out.Writes, w)
	}
	for _, g := range out.purges {
		g.keepJobs = e.keepsJobs(g)
		out.Writes = append(out.Writes, Write{Group: g.id, Complete: true, Tok: g.tok, OpenSeq: g.openSeq, Purge: !g.keepJobs, LastSeq: g.lastSeq, Single: g.single()})
	}
	for _, g := range out.abandons {
		out.Abandons = append(out.Abandons, Abandon{Group: g.id, Tok: g.tok, Count: g.admitted})
	}
	for _, rel := range out.releases {
		out.Releases = append(out.Releases, e.releaseOf(rel))
	}
	out.outcomes, out.summaries, out.purges, out.abandons, out.releases, out.retentionPurges = nil, nil, nil, nil, nil, nil
	return out
}

// outcomesExpire reports whether g's outcome messages carry a TTL: a single job's, all written
// when it completes, once RESULTS expires messages by their TTL.
func (e *Engine) outcomesExpire(g *group) bool { return e.cfg.OutcomesExpire && g.alone }

// writeGroupOutcomes appends the write of the group's outcomes not yet written, if any.
func (e *Engine) writeGroupOutcomes(ws []Write, g *group, now time.Time) []Write {
	g.lingering = false // if it was, writeLingering drops it from the list
	if len(g.outcomes) == 0 {
		return ws
	}
	e.outcomeLoad(now)
	e.ol.thisRun++
	ws = append(ws, Write{Group: g.id, Tok: g.tok, Reply: g.reply, OpenSeq: g.openSeq, Outcomes: g.outcomes, EvSeqs: g.outcomeSeqs})
	g.outcomes, g.outcomeSeqs, g.outcomesAt = nil, nil, now
	return ws
}

// linger is how long a group's outcomes wait after its previous outcome message under load:
// OutcomeLinger, stretched so the groups lingering share about lingerAbove messages per
// OutcomeLinger (with 1,000 groups running at once each group's outcomes go about every 0.6 s
// instead of every 10 ms, and a job costs a fraction of an outcome message instead of one),
// and at most maxLinger.
func (e *Engine) linger() time.Duration {
	shares := time.Duration(max(1, (len(e.ol.lingering)+lingerAbove-1)/lingerAbove))
	return min(e.cfg.OutcomeLinger*shares, max(e.cfg.OutcomeLinger, maxLinger))
}

// outcomeLoad moves the load window on to now's OutcomeLinger period and returns the outcome
// writes of the busier of the current period and the one before.
func (e *Engine) outcomeLoad(now time.Time) int {
	if e.cfg.OutcomeLinger <= 0 {
		return 0
	}
	if since := now.Sub(e.ol.window); since >= e.cfg.OutcomeLinger {
		e.ol.prevRun, e.ol.thisRun = e.ol.thisRun, 0
		if since >= 2*e.cfg.OutcomeLinger {
			e.ol.prevRun = 0 // a whole period without a write
		}
		e.ol.window = now
	}
	return max(e.ol.thisRun, e.ol.prevRun)
}

// writeLingering appends the writes of the lingering outcomes whose time has come, if any has.
func (e *Engine) writeLingering(ws []Write, now time.Time) []Write {
	if len(e.ol.lingering) == 0 || now.Before(e.ol.due) {
		return ws
	}
	keep := e.ol.lingering[:0]
	e.ol.due = time.Time{}
	linger := e.linger()
	for _, g := range e.ol.lingering {
		if !g.lingering {
			continue // written with its summary
		}
		if due := g.outcomesAt.Add(linger); now.Before(due) {
			keep = append(keep, g)
			if e.ol.due.IsZero() || due.Before(e.ol.due) {
				e.ol.due = due
			}
			continue
		}
		ws = e.writeGroupOutcomes(ws, g, now)
	}
	clear(e.ol.lingering[len(keep):])
	e.ol.lingering = keep
	return ws
}
