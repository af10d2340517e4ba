package wire

import (
	"strconv"
	"strings"
	"time"
)

// Trace context of jobs. A producer whose context carries a trace (an OpenTelemetry span)
// publishes each job with the W3C headers traceparent (and tracestate, if any) and
// Weave-Published, the time of the publish. The coordinator copies them into the work batch
// that releases the job, in one Weave-Trace header value per job, since a batch holds jobs of
// many traces: "<job ID> <published> <traceparent>[ <tracestate>]". Jobs without a trace
// context add nothing, so a batch of untraced jobs has no header at all.
const (
	HdrTraceParent = "traceparent"
	HdrTraceState  = "tracestate"
	HdrPublished   = "Weave-Published" // on a traced job: when it was published, Unix microseconds
	HdrTrace       = "Weave-Trace"     // on a work batch: one value per traced job
)

// maxTraceLen bounds a job's trace text (W3C: a traceparent is 55 bytes, a tracestate at most 32
// members of 256 bytes).
const maxTraceLen = 9000

// JobTrace returns the trace text of a stored job message, "<published> <traceparent>[
// <tracestate>]", or "" when it carries no (valid-looking) trace context.
func JobTrace(hm map[string][]string) string {
	h := Header(hm)
	tp := h.Get(HdrTraceParent)
	if tp == "" || len(tp) > 64 || strings.ContainsAny(tp, " \r\n") {
		return ""
	}
	pub := h.Get(HdrPublished)
	if _, err := strconv.ParseInt(pub, 10, 64); err != nil {
		pub = "0"
	}
	s := pub + " " + tp
	if ts := h.Get(HdrTraceState); ts != "" && !strings.ContainsAny(ts, "\r\n") && len(s)+len(ts) < maxTraceLen {
		s += " " + ts
	}
	return s
}

// SetWorkTraces adds the Weave-Trace values of the batch's traced jobs to the headers h, and
// returns h (made if it was nil and a job was traced).
func SetWorkTraces(h map[string][]string, jobs []WorkJob) map[string][]string {
	for i := range jobs {
		if jobs[i].Trace == "" {
			continue
		}
		if h == nil {
			h = map[string][]string{}
		}
		h[HdrTrace] = append(h[HdrTrace], strconv.FormatUint(jobs[i].ID, 10)+" "+jobs[i].Trace)
	}
	return h
}

// WorkTraces sets the Trace of the batch's jobs from its Weave-Trace values. Values that do not
// parse, or name no job of the batch, are ignored: a trace is never a reason to refuse work.
func WorkTraces(hm map[string][]string, jobs []WorkJob) {
	h := Header(hm)
	vals := h[HdrTrace]
	if len(vals) == 0 {
		return
	}
	for _, v := range vals {
		idText, rest, ok := strings.Cut(v, " ")
		if !ok || len(rest) > maxTraceLen {
			continue
		}
		id, err := strconv.ParseUint(idText, 10, 64)
		if err != nil {
			continue
		}
		for i := range jobs {
			if jobs[i].ID == id {
				jobs[i].Trace = rest
				break
			}
		}
	}
}

// ParseTrace splits a job's trace text into the time it was published (zero when unknown), its
// traceparent and its tracestate.
func ParseTrace(s string) (published time.Time, parent, state string) {
	pub, rest, ok := strings.Cut(s, " ")
	if !ok {
		return time.Time{}, "", ""
	}
	parent, state, _ = strings.Cut(rest, " ")
	if us, err := strconv.ParseInt(pub, 10, 64); err == nil && us > 0 {
		published = time.UnixMicro(us)
	}
	return published, parent, state
}
