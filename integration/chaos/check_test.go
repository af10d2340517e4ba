//go:build linux

package chaos

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/weavejobs/weave/integration/chaos/internal/record"
	"github.com/weavejobs/weave/internal/wire"
)

// execution is one run of a handler, from a worker's start and end records.
type execution struct {
	record.Exec
	end time.Time // zero: it never ended (its process was killed)
}

// analyse gathers the records and the streams' contents and runs the checks.
func (r *run) analyse(ctx context.Context) *report {
	rep := &report{faults: r.faults, elapsed: time.Since(r.start)}
	r.mon.readRecords()
	recs := r.mon.snapshot()
	execs := executions(recs)
	prod, err := record.Read[record.Producer](r.producerFile())
	if err != nil {
		rep.fail("records readable", err.Error())
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	stored, err := r.readResults(rctx)
	if err != nil {
		rep.fail("RESULTS readable", err.Error())
	}
	rejections, err := r.readRejections(rctx)
	if err != nil {
		rep.notes = append(rep.notes, "reading "+r.names.RejectedStream()+": "+err.Error())
	}
	r.checkForgeries(rep, stored)

	// What the handlers saw: every execution per job, and each job's group and key.
	byJob := map[uint64][]execution{}
	keyOf := map[uint64]string{} // group + "/" + key
	for _, e := range execs {
		byJob[e.Job] = append(byJob[e.Job], e)
		keyOf[e.Job] = e.Group + "/" + e.Key
	}
	// What RESULTS holds, and what the producer recorded.
	packed := map[string]bool{} // groups published without keys, in packs
	for _, g := range r.workload {
		packed[g.ID] = g.Packed || g.Batched
	}
	res := indexResults(stored, keyOf, packed)
	pv := readProducer(prod)

	var lost, conflicting, notDone, unsummarised, unwaited, wrongWait, twice, neverPublished []string
	planned, skipped := 0, 0
	for _, g := range r.workload {
		published := 0
		for i, keys := range g.Incarnations() {
			planned += len(keys)
			inc := incarnation{g.ID, i + 1}
			p, ok := pv.lastPublish[inc]
			if !ok {
				neverPublished = append(neverPublished, fmt.Sprintf("%s#%d", g.ID, inc.n))
				continue
			}
			published++
			if p.Event == record.Published && p.Err == "" {
				for _, k := range keys {
					if len(res.jobsOfKey[g.ID+"/"+k]) == 0 {
						lost = append(lost, fmt.Sprintf("%s#%d/%s (no outcome)", g.ID, inc.n, k))
					}
				}
			}
			switch w, ok := pv.waited[inc]; {
			case ok && w.Skipped:
				skipped++
			case ok:
				if bad := foreignOutcomes(w, keys); bad != "" {
					wrongWait = append(wrongWait, fmt.Sprintf("%s#%d: %s", g.ID, inc.n, bad))
				}
			case len(stored.summaries[g.ID]) >= inc.n:
				unwaited = append(unwaited, fmt.Sprintf("%s#%d", g.ID, inc.n))
			}
		}
		if len(stored.summaries[g.ID]) < published {
			unsummarised = append(unsummarised, fmt.Sprintf("%s (%d of %d incarnations)", g.ID, len(stored.summaries[g.ID]), published))
		}
	}
	followUps := checkFollowUps(r.workload, pv, stored.summaries, res.jobsOfKey, execs)
	for id, ex := range byJob {
		if len(res.states[id]) == 0 {
			lost = append(lost, fmt.Sprintf("job %d %s (ran %d×, no outcome)", id, keyOf[id], len(ex)))
		}
	}
	for id, s := range res.states {
		if len(s) > 1 {
			conflicting = append(conflicting, fmt.Sprintf("job %d %s: %s", id, keyOf[id], strings.Join(slices.Sorted(maps.Keys(s)), " and ")))
		}
		for st := range s {
			if st != wire.FinalDone.String() {
				notDone = append(notDone, fmt.Sprintf("job %d %s (ran %d×): %s, %s", id, keyOf[id], len(byJob[id]), st, res.lastError[id]))
			}
		}
	}
	for key, ids := range res.jobsOfKey {
		// A packed group published again after a crash stores its jobs again: nothing
		// deduplicates jobs without a key. Each publication stores a job once.
		group, k, _ := strings.Cut(key, "/")
		allowed := 1
		if packed[group] {
			inc := incarnation{group, 1}
			if strings.HasPrefix(k, "r") {
				inc.n = 2
			}
			allowed = max(1, pv.publishes[inc])
		}
		if len(ids) > allowed {
			twice = append(twice, fmt.Sprintf("%s: jobs %v (published %d×)", key, slices.Sorted(maps.Keys(ids)), allowed))
		}
	}

	// Executions beyond the first of each job, against the executions the faults interrupted.
	duplicates, stale := 0, []string{}
	for id, ex := range byJob {
		duplicates += len(ex) - 1
		for _, e := range ex {
			if r.startedAtStop(e) {
				continue // in flight at the fault: counted against the bound
			}
			for _, o := range ex {
				if o.Attempt > e.Attempt && o.At.Before(e.At) {
					stale = append(stale, fmt.Sprintf("job %d attempt %d on %s at %s, after attempt %d had started on %s",
						id, e.Attempt, e.Worker, e.At.Format("15:04:05.000"), o.Attempt, o.Worker))
					break
				}
			}
		}
	}
	bound := 0
	for _, f := range r.faults {
		f.inFlight = 0
		for w, n := range inFlightDuring(recs, f.at, f.at.Add(f.window)) {
			if slices.Contains(f.affected, w) {
				f.inFlight += n
			}
		}
		bound += f.inFlight
	}

	rep.add("no job lost", len(lost) == 0,
		fmt.Sprintf("%d published jobs or executed jobs without a terminal outcome", len(lost)), lost)
	rep.add("no job with two terminal outcomes", len(conflicting) == 0,
		fmt.Sprintf("%d jobs recorded with different final states", len(conflicting)), conflicting)
	rep.add("every key stored once", len(twice) == 0,
		fmt.Sprintf("%d keys stored as more than one job (a packed group's: more than once per publication)", len(twice)), twice)
	rep.add("every job done", len(notDone) == 0,
		fmt.Sprintf("%d outcomes not done (handlers always succeed; 50 attempts allowed)", len(notDone)), notDone)
	rep.add("outcomes carry their key", len(res.emptyKeys) == 0,
		fmt.Sprintf("%d outcome records with an empty key (packed groups' jobs have none)", len(res.emptyKeys)), res.emptyKeys)
	rep.add("duplicates within the bound", duplicates <= bound,
		fmt.Sprintf("%d executions beyond one per job; bound %d (executions in flight at the faults on the workers each could interrupt)", duplicates, bound), nil)
	rep.add("no stale attempt run", len(stale) == 0,
		fmt.Sprintf("%d executions of an attempt that a later attempt had superseded", len(stale)), stale)
	rep.add("every group published", len(neverPublished) == 0,
		fmt.Sprintf("%d of %d incarnations never published", len(neverPublished), r.incarnations()), neverPublished)
	rep.add("every group summarised", len(unsummarised) == 0,
		fmt.Sprintf("%d groups with fewer summaries in %s than incarnations published", len(unsummarised), r.names.ResultsStream()), unsummarised)
	rep.add("the producer saw every group finish", len(unwaited) == 0 && pv.done,
		fmt.Sprintf("%d summarised incarnations whose Handle.Wait never returned; producer finished: %v", len(unwaited), pv.done), unwaited)
	rep.add("Wait returned its own incarnation", len(wrongWait) == 0,
		fmt.Sprintf("%d incarnations whose Handle.Wait returned outcomes of jobs it did not publish", len(wrongWait)), wrongWait)
	rep.add("every follow-up ran once, after its group", len(followUps) == 0,
		fmt.Sprintf("%d follow-ups not summarised once, without an outcome, or started before their group's last job ended", len(followUps)), followUps)
	rep.add("no stall", len(r.stalls) == 0, fmt.Sprintf("%d", len(r.stalls)), r.stalls)
	var exits []string
	for _, p := range r.procs.list {
		exits = append(exits, p.exits()...)
	}
	rep.add("no process exited by itself", len(exits) == 0,
		fmt.Sprintf("%d failed exits the test did not cause (restarted after %v, as a service manager would)", len(exits), restartDelay), exits)

	// Figures.
	ended := 0
	for _, e := range execs {
		if !e.end.IsZero() {
			ended++
		}
	}
	rep.figure("form", fmt.Sprintf("%s: %d rounds of %s; %d faults injected", r.cfg.name, r.cfg.rounds, strings.Join(r.cfg.faults, ", "), len(r.faults)))
	nPacked, nSingle, nBatched, nFollow := 0, 0, 0, 0
	for _, g := range r.workload {
		if g.Packed {
			nPacked++
		}
		if g.Single {
			nSingle++
		}
		if g.Batched {
			nBatched++
		}
		if g.FollowUp {
			nFollow++
		}
	}
	rep.figure("workload", fmt.Sprintf("%d groups (%d incarnations; %d groups published in packs, without keys; %d single jobs submitted alone, %d in batches, in single packs; %d with a follow-up), %d jobs; %d workers × %d slots; jobs %v–%v",
		len(r.workload), r.incarnations(), nPacked, nSingle, nBatched, nFollow, planned, r.cfg.workers, r.cfg.slots, r.cfg.minJob, r.cfg.maxJob))
	if skipped > 0 {
		rep.figure("not waited for", fmt.Sprintf("%d later incarnations published before a producer restart (no Handle to attach to them)", skipped))
	}
	rep.figure("executions", fmt.Sprintf("%d started, %d ended, %d distinct jobs ran", len(execs), ended, len(byJob)))
	rep.figure("outcome records", fmt.Sprintf("%d (%d distinct jobs), %d summaries, %d undecodable", len(stored.outcomes), len(res.states), countSummaries(stored), stored.bad))
	rep.figure("duplicates / bound", fmt.Sprintf("%d / %d", duplicates, bound))
	rep.figure("run time", rep.elapsed.Round(time.Second).String())
	if d := rep.elapsed.Seconds(); d > 0 {
		rep.figure("throughput", fmt.Sprintf("%.0f executions/s over the whole run, faults included", float64(len(execs))/d))
	}
	r.measurePauses(execs, len(neverPublished) == 0 && len(unsummarised) == 0 && len(lost) == 0)

	if len(pv.publishErrors) > 0 {
		rep.notes = append(rep.notes, fmt.Sprintf("%d Publish calls returned an error, e.g.:", len(pv.publishErrors)))
		rep.notes = append(rep.notes, indent(head(pv.publishErrors, maxExamples))...)
	}
	if len(rejections) > 0 {
		rep.notes = append(rep.notes, "messages the coordinator rejected ("+r.names.RejectedStream()+"), by reason:")
		for _, reason := range slices.Sorted(maps.Keys(rejections)) {
			rep.notes = append(rep.notes, fmt.Sprintf("  %5d  %s", rejections[reason], reason))
		}
	}
	for _, p := range slices.Concat(r.coords, r.workers, []*proc{r.producer}) {
		if lines := logHighlights(p.log); len(lines) > 0 {
			rep.notes = append(rep.notes, p.name+": warnings and errors (count, first line):")
			rep.notes = append(rep.notes, indent(lines)...)
		}
	}
	return rep
}

// results indexes the outcome records RESULTS holds.
type results struct {
	states    map[uint64]map[string]bool // every final state recorded per job ID
	lastError map[uint64]string          // a failed or canceled job's attempts and error
	jobsOfKey map[string]map[uint64]bool // job IDs recorded per group + "/" + key
	emptyKeys []string                   // outcome records without a key
}

// indexResults indexes the stored outcomes. keyOf, the handlers' view of each job's group and key,
// places a record without a key; only the jobs of packed groups have none.
func indexResults(stored storedGroups, keyOf map[uint64]string, packed map[string]bool) results {
	res := results{states: map[uint64]map[string]bool{}, lastError: map[uint64]string{}, jobsOfKey: map[string]map[uint64]bool{}}
	for _, o := range stored.outcomes {
		if res.states[o.ID] == nil {
			res.states[o.ID] = map[string]bool{}
		}
		res.states[o.ID][o.State.String()] = true
		if o.State != wire.FinalDone {
			res.lastError[o.ID] = fmt.Sprintf("%d attempts, %q", o.Attempts, truncate(string(o.Data), 120))
		}
		key := o.group + "/" + o.Key
		if o.Key == "" {
			if !packed[o.group] {
				res.emptyKeys = append(res.emptyKeys, fmt.Sprintf("job %d (%s)", o.ID, keyOf[o.ID]))
			}
			if k, ok := keyOf[o.ID]; ok {
				key = k
			}
		}
		if res.jobsOfKey[key] == nil {
			res.jobsOfKey[key] = map[uint64]bool{}
		}
		res.jobsOfKey[key][o.ID] = true
	}
	return res
}

// incarnation names one publication of a group ID: 1 for the first, 2 for the next.
type incarnation struct {
	group string
	n     int
}

// producerView is what the producer's records say, per incarnation. One whose last Publish
// returned no error has every key stored; after an error, which keys were stored is not known, so
// only what ran is checked.
type producerView struct {
	lastPublish   map[incarnation]record.Producer // its last "published" record, else its "publishing"
	waited        map[incarnation]record.Producer // its successful "waited" record
	publishes     map[incarnation]int             // its "publishing" records: Publish calls begun
	done          bool                            // the producer finished
	publishErrors []string
}

func readProducer(prod []record.Producer) producerView {
	pv := producerView{lastPublish: map[incarnation]record.Producer{}, waited: map[incarnation]record.Producer{}, publishes: map[incarnation]int{}}
	for _, p := range prod {
		inc := incarnation{p.Group, p.Incarnation}
		switch p.Event {
		case record.Published:
			pv.lastPublish[inc] = p
			if p.Err != "" {
				pv.publishErrors = append(pv.publishErrors, fmt.Sprintf("%s#%d (handle %v, %d accepted): %s", p.Group, p.Incarnation, p.Handle, p.Accepted, p.Err))
			}
		case record.Publishing:
			pv.publishes[inc]++
			if _, ok := pv.lastPublish[inc]; !ok {
				pv.lastPublish[inc] = p
			}
		case record.Waited:
			if p.Err == "" {
				pv.waited[inc] = p
			}
		case record.Done:
			pv.done = true
		}
	}
	return pv
}

// foreignOutcomes describes the outcomes of a producer's Wait whose keys are not among keys, the
// keys of the incarnation it waited for; "" if there are none.
func foreignOutcomes(w record.Producer, keys []string) string {
	mine := map[string]bool{}
	for _, k := range keys {
		mine[k] = true
	}
	foreign, example := 0, ""
	for _, o := range w.Outcomes {
		if o.Key != "" && !mine[o.Key] { // an empty key is the check "outcomes carry their key"
			foreign++
			example = fmt.Sprintf("job %d key %q", o.Job, o.Key)
		}
	}
	if foreign == 0 {
		return ""
	}
	return fmt.Sprintf("%d of %d outcomes are not its jobs' (e.g. %s)", foreign, len(w.Outcomes), example)
}

// executions pairs start and end records into executions, in start order.
func executions(recs []record.Exec) []execution {
	type runKey struct {
		pid     int
		job     uint64
		attempt int
	}
	var out []execution
	open := map[runKey]int{}
	for _, e := range recs {
		k := runKey{e.PID, e.Job, e.Attempt}
		switch e.Event {
		case "start":
			open[k] = len(out)
			out = append(out, execution{Exec: e})
		case "end":
			if i, ok := open[k]; ok {
				out[i].end = e.At
				delete(open, k)
			}
		}
	}
	slices.SortStableFunc(out, func(a, b execution) int { return a.At.Compare(b.At) })
	return out
}

// inFlightAt counts, per worker, the executions started by t and not ended by t.
func inFlightAt(recs []record.Exec, t time.Time) map[string]int {
	return inFlightDuring(recs, t, t)
}

// inFlightDuring counts, per worker, the executions running at some moment from one time to
// another: started by to, and not ended before from.
func inFlightDuring(recs []record.Exec, from, to time.Time) map[string]int {
	counts := map[string]int{}
	for _, e := range executions(recs) {
		if !e.At.After(to) && (e.end.IsZero() || e.end.After(from)) {
			counts[e.Worker]++
		}
	}
	return counts
}

// measurePauses sets each fault's pause: the longest time without an execution starting, from
// the fault until the next fault; after the last fault, until the last execution if all the work
// got done, else until now (the run ended stalled).
func (r *run) measurePauses(execs []execution, workDone bool) {
	for i, f := range r.faults {
		until := time.Now()
		switch {
		case i+1 < len(r.faults):
			until = r.faults[i+1].at
		case workDone && len(execs) > 0 && execs[len(execs)-1].At.After(f.at):
			until = execs[len(execs)-1].At
		}
		prev, longest := f.at, time.Duration(0)
		for _, e := range execs {
			if e.At.Before(f.at) || e.At.After(until) {
				continue
			}
			longest = max(longest, e.At.Sub(prev))
			prev = e.At
		}
		f.pause = max(longest, until.Sub(prev)) // no start at all since prev counts too
	}
}

func countSummaries(st storedGroups) int {
	n := 0
	for _, s := range st.summaries {
		n += len(s)
	}
	return n
}

// resumeGrace is how soon after a stopped worker's SIGCONT a handler's start record may come and
// still be a start from before the SIGSTOP: the worker checks a job's lease right before its
// handler runs, and a stop that lands between that check and the handler's first write (its start
// record) shows the start only once the process runs again.
const resumeGrace = 100 * time.Millisecond

// startedAtStop reports whether e's start record came on a worker right after it was resumed from
// a SIGSTOP: it passed the worker's lease check before the stop, so it was in flight at the fault
// rather than a queued job run after its lease lapsed.
func (r *run) startedAtStop(e execution) bool {
	for _, f := range r.faults {
		if f.kind == faultStop && slices.Contains(f.affected, e.Worker) && !e.At.Before(f.end) && e.At.Sub(f.end) <= resumeGrace {
			return true
		}
	}
	return false
}

// checkFollowUps checks the follow-ups of the workload's groups whose first incarnation was
// published: each is summarised exactly once, its job has an outcome, and no execution of its job
// started before the latest attempt of every job of the group's first incarnation had ended (or
// been cut off).
func checkFollowUps(workload []record.Group, pv producerView, summaries map[string][]wire.GroupSummary, jobsOfKey map[string]map[uint64]bool, execs []execution) []string {
	// An attempt that lapsed (its worker stopped past its lease) can run on after its retry
	// decided the job: a group completes with the jobs' latest attempts, so only those count.
	latest := map[uint64]int{}
	for _, e := range execs {
		latest[e.Job] = max(latest[e.Job], e.Attempt)
	}
	lastOf := map[string]time.Time{}     // a group's first incarnation: its jobs' latest attempts' last end
	startsOf := map[string][]time.Time{} // a follow-up's executions' starts
	for _, e := range execs {
		startsOf[e.Group] = append(startsOf[e.Group], e.At)
		if e.Attempt < latest[e.Job] || strings.HasPrefix(e.Key, "r") {
			continue
		}
		at := e.end
		if at.IsZero() {
			at = e.At // cut off by a kill: it ended no later than its process
		}
		if at.After(lastOf[e.Group]) {
			lastOf[e.Group] = at
		}
	}
	var bad []string
	for _, g := range workload {
		if _, published := pv.lastPublish[incarnation{g.ID, 1}]; !g.FollowUp || !published {
			continue
		}
		f := record.FollowUpID(g.ID)
		switch n := len(summaries[f]); {
		case n != 1:
			bad = append(bad, fmt.Sprintf("%s: %d summaries", f, n))
		case len(jobsOfKey[f+"/"+record.FollowUpKey]) == 0:
			bad = append(bad, f+": its job has no outcome")
		}
		for _, s := range startsOf[f] {
			if s.Before(lastOf[g.ID]) {
				bad = append(bad, fmt.Sprintf("%s started at %s, before %s's last job ended at %s", f, s.Format("15:04:05.000"), g.ID, lastOf[g.ID].Format("15:04:05.000")))
				break
			}
		}
	}
	return bad
}
