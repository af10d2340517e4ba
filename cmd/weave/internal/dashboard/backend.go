package dashboard

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
	"github.com/weavejobs/weave/internal/directget"
	"github.com/weavejobs/weave/internal/safetext"
	"github.com/weavejobs/weave/internal/wire"
)

// Backend is everything the dashboard reads and does, one method per need, so that the HTTP
// side does not depend on how each is answered. NewBackend answers them over NATS with what an
// observer may read (status, and the RESULTS stream by direct get) and, for the actions, what a
// producer may do.
type Backend interface {
	// Status asks the coordinator for its status.
	Status(ctx context.Context) (*Status, error)
	// Failed pages the failed jobs (dead letters) of group, or of every group for "", the most
	// recently recorded first: up to limit of them after the first offset, and how many there
	// are in all. Each job's error is cut to ListedErrorBytes, so that what a page costs does not
	// depend on what workers stored.
	Failed(ctx context.Context, group string, offset, limit int) ([]ListedJob, int, error)
	// Lookup describes one job, whatever its state (the inspection API: dispatcher.Job and
	// JobByKey). It returns an error wrapping dispatcher.ErrJobNotFound for an unknown job.
	Lookup(ctx context.Context, q Query) (*dispatcher.JobInfo, error)
	// Ended lists up to limit groups complete within the result retention (what weave groups
	// lists), the latest ended first.
	Ended(ctx context.Context, limit int) ([]EndedGroup, error)
	// Schedules lists the stored schedules, with their last and next ticks (weave schedule list).
	Schedules(ctx context.Context) ([]dispatcher.ScheduleInfo, error)
	// Retry publishes failed jobs of group again (all of its latest complete incarnation's with
	// no ids), like weave failed retry. It returns how many jobs were published.
	Retry(ctx context.Context, group string, ids []uint64) (int, error)
	// Cancel cancels group, or only the jobs ids of it, like weave cancel.
	Cancel(ctx context.Context, group string, ids []uint64) error
}

// Query names one job: by ID (Group may be empty), or by Group and Key.
type Query struct {
	Group string
	ID    uint64
	Key   string
}

// Status is the coordinator's status as the dashboard reads it (alarms and standby coordinators
// included), with the JSON it came as.
type Status struct {
	coordinator.Status

	// Raw is the status as the coordinator sent it, if the Backend has it: the page receives
	// it rather than this struct re-encoded, so that fields the dashboard does not know yet
	// reach it too.
	Raw json.RawMessage `json:"-"`
}

// ListedErrorBytes bounds the error a ListedJob keeps.
const ListedErrorBytes = 512

// ListedJob is a failed job as a list shows it: its last error cut to ListedErrorBytes (ErrBytes
// is the whole error's size when it was cut, else 0); the whole job is one Lookup away.
type ListedJob struct {
	Group    string
	ID       uint64
	Key      string
	Attempts int
	Err      string
	ErrBytes int
	FailedAt time.Time // its last failed attempt, when recorded
}

// listed keeps what a list shows of o, in new strings: a cut that shared o's would keep the whole
// error alive.
func listed(o *dispatcher.JobOutcome) ListedJob {
	j := ListedJob{Group: strings.Clone(o.Group), ID: o.ID, Key: strings.Clone(o.Key), Attempts: o.Attempts}
	head, left := safetext.Cut(o.Err, ListedErrorBytes)
	j.Err = strings.Clone(head)
	if left > 0 {
		j.ErrBytes = len(o.Err)
	}
	if n := len(o.History); n > 0 {
		j.FailedAt = o.History[n-1].At
	}
	return j
}

// EndedGroup is a group that ended: its summary.
type EndedGroup struct {
	ID        string    `json:"id"`
	EndedAt   time.Time `json:"ended_at"` // when the summary was stored
	Jobs      uint64    `json:"jobs"`
	Done      uint64    `json:"done"`
	Failed    uint64    `json:"failed"`
	Canceled  uint64    `json:"canceled"`
	Abandoned bool      `json:"abandoned,omitempty"`
}

// natsBackend is the Backend over a NATS connection.
type natsBackend struct {
	nc    *nats.Conn
	names wire.Names
	d     *dispatcher.Dispatcher
	js    jetstream.JetStream
}

// NewBackend returns the Backend of namespace over nc. It does no I/O.
func NewBackend(nc *nats.Conn, namespace string, d *dispatcher.Dispatcher) (Backend, error) {
	names, err := wire.NewNames(namespace)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	return &natsBackend{nc: nc, names: names, d: d, js: js}, nil
}

// Status is coordinator.QueryStatus, decoding the answer into the dashboard's Status.
func (b *natsBackend) Status(ctx context.Context) (*Status, error) {
	resp, err := b.nc.RequestWithContext(ctx, b.names.StatusSubject(), nil)
	if err != nil {
		return nil, fmt.Errorf("status of namespace %q (is a coordinator running?): %w", b.names.Namespace(), err)
	}
	return decodeStatus(resp.Data)
}

// decodeStatus decodes a status. The fields beside coordinator.Status's are read apart: one the
// dashboard cannot decode is left empty (the page still gets it, in Raw), so it cannot hide the
// rest.
func decodeStatus(data []byte) (*Status, error) {
	var s Status
	if err := json.Unmarshal(data, &s.Status); err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	s.Raw = data
	return &s, nil
}

func (b *natsBackend) Schedules(ctx context.Context) ([]dispatcher.ScheduleInfo, error) {
	return b.d.Schedules(ctx)
}

func (b *natsBackend) Failed(ctx context.Context, group string, offset, limit int) ([]ListedJob, int, error) {
	// The iterator yields the oldest first: keep the latest offset+limit in a ring.
	keep := offset + limit
	ring := make([]ListedJob, 0, min(keep, 1024))
	next, total := 0, 0
	for o, err := range b.d.Failed(ctx, group) {
		if err != nil {
			if errors.Is(err, dispatcher.ErrMalformedOutcome) {
				continue // one unreadable record does not hide the others
			}
			return nil, 0, err
		}
		total++
		if len(ring) < keep {
			ring = append(ring, listed(&o))
			continue
		}
		ring[next] = listed(&o)
		next = (next + 1) % keep
	}
	var page []ListedJob
	for i := offset; i < min(offset+limit, len(ring)); i++ {
		page = append(page, ring[(next+len(ring)-1-i)%len(ring)]) // the i-th latest
	}
	return page, total, nil
}

// lookupPage is how many outcome messages one direct get request of Lookup reads.
// Lookup asks the inspection API: dispatcher.JobByKey with a group and key, else dispatcher.Job
// (a job of another group than q.Group, when given, is not found). A pending or running job is
// described by the coordinator, which an observer may ask; one that ended, from its stored outcome.
func (b *natsBackend) Lookup(ctx context.Context, q Query) (*dispatcher.JobInfo, error) {
	if q.Key != "" {
		return b.d.JobByKey(ctx, q.Group, q.Key)
	}
	j, err := b.d.Job(ctx, q.ID)
	if err == nil && q.Group != "" && j.Group != q.Group {
		return nil, fmt.Errorf("%w: job %d is in group %q, not %q", dispatcher.ErrJobNotFound, q.ID, j.Group, q.Group)
	}
	return j, err
}

// Ended asks the inspection API, as weave groups does (dispatcher.Groups), for the groups
// complete within the retention; without a coordinator it reads the latest summaries from the
// stream instead.
func (b *natsBackend) Ended(ctx context.Context, limit int) ([]EndedGroup, error) {
	gs, err := b.d.Groups(ctx)
	if errors.Is(err, dispatcher.ErrNoCoordinator) {
		return b.endedFromStream(ctx, limit)
	}
	if err != nil {
		return nil, err
	}
	var out []EndedGroup
	for _, g := range gs {
		if g.State != dispatcher.GroupComplete || g.Summary == nil {
			continue
		}
		s := g.Summary
		out = append(out, EndedGroup{ID: g.ID, EndedAt: g.CompletedAt, Jobs: uint64(s.Jobs), Done: uint64(s.Done), Failed: uint64(s.Failed),
			Canceled: uint64(s.Canceled), Abandoned: s.Abandoned})
	}
	slices.SortStableFunc(out, func(a, b EndedGroup) int { return b.EndedAt.Compare(a.EndedAt) })
	return out[:min(len(out), limit)], nil
}

// endedScan is how many of the latest outcome records endedFromStream reads, and endedPage how
// many one direct get request reads.
const (
	endedScan = 512
	endedPage = 128
)

// endedFromStream reads the latest endedScan records of the RESULTS stream by direct get and
// keeps the summaries (the latest of each group ID).
func (b *natsBackend) endedFromStream(ctx context.Context, limit int) ([]EndedGroup, error) {
	st, err := b.js.Stream(ctx, b.names.ResultsStream())
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", b.names.ResultsStream(), err)
	}
	info := st.CachedInfo().State
	if info.Msgs == 0 {
		return nil, nil
	}
	from := info.FirstSeq
	if info.LastSeq > endedScan && info.LastSeq-endedScan+1 > from {
		from = info.LastSeq - endedScan + 1
	}
	get := directget.New(b.nc, b.names.ResultsStream())
	defer get.Close()
	prefix := b.names.OutcomeSubject("")
	latest := map[string]EndedGroup{}
	for from <= info.LastSeq {
		msgs, err := get.Next(ctx, b.names.AllOutcomes(), from, endedPage)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", b.names.ResultsStream(), err)
		}
		if len(msgs) == 0 {
			break
		}
		for _, m := range msgs {
			from = m.Seq + 1
			_, sum, err := wire.DecodeOutcomeMsg(m.Data)
			if err != nil || sum == nil {
				continue
			}
			id, err := wire.ParseGroupToken(strings.TrimPrefix(m.Subject, prefix))
			if err != nil {
				continue
			}
			at, _ := time.Parse(time.RFC3339Nano, m.Header.Get(nats.JSTimeStamp))
			latest[id] = EndedGroup{ID: id, EndedAt: at, Jobs: sum.Jobs, Done: sum.Done, Failed: sum.Failed, Canceled: sum.Canceled, Abandoned: sum.Abandoned}
		}
	}
	out := slices.Collect(maps.Values(latest))
	slices.SortFunc(out, func(a, b EndedGroup) int { return cmp.Or(b.EndedAt.Compare(a.EndedAt), cmp.Compare(a.ID, b.ID)) })
	return out[:min(len(out), limit)], nil
}

func (b *natsBackend) Retry(ctx context.Context, group string, ids []uint64) (int, error) {
	h, err := b.d.Redrive(ctx, group, ids...)
	if h == nil {
		return 0, err
	}
	return h.Accepted(), err
}

func (b *natsBackend) Cancel(ctx context.Context, group string, ids []uint64) error {
	h := b.d.Attach(group)
	if len(ids) > 0 {
		res, err := h.CancelJobs(ctx, ids...)
		if err == nil && res.Canceled+res.Stopping == 0 {
			err = fmt.Errorf("nothing canceled: %v", res)
		}
		return err
	}
	return h.Cancel(ctx)
}
