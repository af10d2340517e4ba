// Package auth defines the NATS permissions of each Weave role in one namespace, and renders
// them as a nats-server authorization block and as nsc commands for JWT users. The CLI (weave
// auth), the documentation and the permission integration test all use these functions, so they
// cannot drift apart.
//
// Every role gets a private inbox prefix (Permissions.InboxPrefix): replies to its requests, pull
// deliveries and publish acknowledgements come to subjects under it, and it may subscribe only
// there, so no user can read another user's replies (with the default _INBOX.> any user could
// read every pull delivery of every pool). Clients set it with nats.CustomInboxPrefix (the weave
// CLI: --inbox-prefix).
package auth

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/weavejobs/weave/internal/wire"
)

// Role is what a NATS user does in a namespace.
type Role string

// Roles.
const (
	// Coordinator schedules the namespace: it owns its streams and the lease, reads every
	// stream, releases work, writes outcomes, hands back orphaned pools' work, answers status and
	// inspection requests, and announces itself while it stands by.
	Coordinator Role = "coordinator"
	// Producer publishes groups and jobs, cancels them, waits for their outcomes, lists and
	// retries failed jobs.
	Producer Role = "producer"
	// Worker runs the jobs of one pool (one resource set), as one worker ID or any ID of the pool.
	Worker Role = "worker"
	// Observer reads: status, inspection, alarm events and the failed list. It publishes nothing
	// but status and inspection requests (and reads of the streams).
	Observer Role = "observer"
)

// Roles lists every role, in the order weave auth prints them.
var Roles = []Role{Coordinator, Producer, Worker, Observer}

// AnyWorker as User.WorkerID gives one user to every worker of a pool: they can then act as each
// other (within the pool, never for another pool).
const AnyWorker = "*"

// ErrBadUser reports a user that cannot be given permissions.
var ErrBadUser = errors.New("weave: invalid auth user")

// User is one NATS user of a role in a namespace.
type User struct {
	Role Role
	// Name is the user name; default "<namespace>-<role>", for a worker
	// "<namespace>-worker-<worker ID>" or "<namespace>-worker-<pool>" for AnyWorker.
	Name string
	// Resources a worker holds: they decide its pool. Worker only.
	Resources []string
	// WorkerID of a worker user: one ID, or AnyWorker. Worker only; required.
	WorkerID string
}

// Permissions are what a user may publish and subscribe to.
type Permissions struct {
	Publish   []string
	Subscribe []string
	// AllowResponses lets the user publish one reply to the reply subject of each message it
	// receives (nats-server allow_responses; nsc --allow-pub-response): the coordinator answers
	// status requests and joins in other users' private inboxes.
	AllowResponses bool
	// InboxPrefix is the prefix the user's client must set (nats.CustomInboxPrefix).
	InboxPrefix string
}

// Resolve validates u for namespace names and fills in its defaults.
func Resolve(names wire.Names, u User) (User, error) {
	switch u.Role {
	case Coordinator, Producer, Observer:
		if len(u.Resources) > 0 || u.WorkerID != "" {
			return User{}, fmt.Errorf("%w: only a worker holds resources and has a worker ID", ErrBadUser)
		}
		if u.Name == "" {
			u.Name = names.Namespace() + "-" + string(u.Role)
		}
	case Worker:
		if err := wire.ValidateResources("held", u.Resources); err != nil {
			return User{}, fmt.Errorf("%w: %v", ErrBadUser, err)
		}
		u.Resources = wire.NormalizeResources(u.Resources)
		if u.WorkerID == "" {
			return User{}, fmt.Errorf("%w: a worker user needs a worker ID, or %q for any worker of its pool", ErrBadUser, AnyWorker)
		}
		if u.WorkerID != AnyWorker {
			// NATS permissions match whole subject tokens, so a pattern inside an ID ("cpu-*")
			// cannot be granted; say what can be instead of only that the ID is invalid.
			if strings.Contains(u.WorkerID, AnyWorker) {
				return User{}, fmt.Errorf("%w: worker ID %q: a pattern within an ID cannot be expressed in NATS permissions; give each worker its own ID, or %q alone for every worker of the pool", ErrBadUser, u.WorkerID, AnyWorker)
			}
			if err := wire.ValidateWorkerID(u.WorkerID); err != nil {
				return User{}, fmt.Errorf("%w: %v", ErrBadUser, err)
			}
		}
		if u.Name == "" {
			who := u.WorkerID
			if who == AnyWorker {
				who = wire.PoolKey(u.Resources)
			}
			u.Name = names.Namespace() + "-worker-" + who
		}
	default:
		return User{}, fmt.Errorf("%w: unknown role %q (want coordinator, producer, worker or observer)", ErrBadUser, u.Role)
	}
	if !isSubjectToken(u.Name) {
		return User{}, fmt.Errorf("%w: user name %q must be 1-128 characters of [A-Za-z0-9_-]", ErrBadUser, u.Name)
	}
	return u, nil
}

// InboxPrefix is the private inbox prefix of a user.
func InboxPrefix(user string) string { return "_INBOX_" + user }

// For returns the permissions of u (resolved with Resolve) in namespace names.
//
// The JetStream API subjects are those nats.go (jetstream package) uses: stream info
// $JS.API.STREAM.INFO.<stream>; a consumer with one filter subject is created on
// $JS.API.CONSUMER.CREATE.<stream>.<consumer>.<filter>, so a worker may create exactly its own
// pool's consumer; pulls go to $JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>, acks to
// $JS.ACK.<stream>.<consumer>.>; direct gets to $JS.API.DIRECT.GET.<stream>[.<subject>].
func For(names wire.Names, u User) (Permissions, error) {
	u, err := Resolve(names, u)
	if err != nil {
		return Permissions{}, err
	}
	streams := []string{names.JobsStream(), names.WorkStream(), names.EventsStream(), names.ResultsStream(), names.RejectedStream()}
	p := Permissions{InboxPrefix: InboxPrefix(u.Name)}
	inbox := p.InboxPrefix + ".>"
	// Every client checks at start that the namespace's streams exist.
	var info []string
	for _, s := range streams {
		info = append(info, api("STREAM.INFO."+s))
	}
	switch u.Role {
	case Coordinator:
		// The namespace's owner: its streams (created here or by weave init), consumers on them
		// (the feed, replay, rescues of orphaned pools), the lease bucket, and the bucket of the
		// release key, which no other role may read (a worker that could would forge proofs).
		lease, keys := "KV_"+names.LeaseBucket(), "KV_"+names.KeyBucket()
		for _, s := range append(slices.Clone(streams), names.LimitsStream(), names.SchedulesStream(), lease, keys) {
			p.Publish = append(p.Publish,
				api("STREAM.INFO."+s), api("STREAM.CREATE."+s), api("STREAM.UPDATE."+s),
				api("STREAM.PURGE."+s), api("STREAM.MSG.GET."+s), api("STREAM.MSG.DELETE."+s),
				api("DIRECT.GET."+s), api("DIRECT.GET."+s+".>"),
				api("CONSUMER.CREATE."+s+".>"), api("CONSUMER.INFO."+s+".*"), api("CONSUMER.DELETE."+s+".*"),
				api("CONSUMER.MSG.NEXT."+s+".*"), "$JS.ACK."+s+".>")
		}
		p.Publish = append(p.Publish,
			api("INFO"), // account info: nats.go reads it when it creates the lease bucket
			"$KV."+names.LeaseBucket()+".>",
			"$KV."+names.KeyBucket()+".>",
			names.AllWork(),                             // work batches
			names.JournalSubject(),                      // the journal
			names.ReportSubject("*", wire.RescueWorker), // orphaned pools' jobs handed back
			names.AllOutcomes(),                         // outcomes and summaries
			names.RejectSubject(),                       // rejection records
			names.CancelSubject(),                       // running jobs to cancel
			names.RollCallSubject(),                     // workers, heartbeat now: a term starts
			names.AllReplies(),                          // answers to cancels and redrives (Weave-Reply)
			names.StandbySubject(),                      // a standby announcing itself
			names.AllAlarms(),                           // alarm events
			names.AllLimits(),                           // limits (weave limit set, run with the coordinator's credentials)
			names.StatusSubject(),                       // and its wait for the coordinator to apply one; weave limit list
			names.AllFired(),                            // the record of each schedule's last tick fired
			// A redrive's new incarnation (open, jobs, seal) and the seals of abandoned groups.
			names.AllGroups(), names.AllJobs(),
		)
		p.Subscribe = []string{names.AllHeartbeats(), names.AllJoins(), names.StatusSubject(), names.InspectSubject(), names.StandbySubject(), inbox}
		p.AllowResponses = true // status replies, join answers, heartbeat refusals
	case Producer:
		results, jobs := names.ResultsStream(), names.JobsStream()
		p.Publish = append(info,
			names.AllGroups(), names.AllJobs(), // open, jobs, seal, cancel, redrive
			names.StatusSubject(), names.InspectSubject(), names.HeldSubject("*"),
			// The waits (Wait, Outcomes, WaitSummary, WaitJob) and the failed list read the
			// outcomes with direct gets: no consumer.
			api("DIRECT.GET."+results), api("DIRECT.GET."+results+".>"),
			// Publish: the group's control messages, read before its open; and whether the
			// group's last incarnation is summarised, confirmed with the leader of RESULTS
			// before Publish says it runs (a replica may lag).
			api("DIRECT.GET."+jobs), api("DIRECT.GET."+jobs+".>"), api("STREAM.MSG.GET."+results),
			// Schedules: add and remove definitions; list them (and their last ticks fired).
			names.AllScheduleDefs(), api("DIRECT.GET."+names.SchedulesStream()),
		)
		// Outcomes for the waits; replies for the answers to its cancels and redrives (a token
		// it chose, on NS.reply.<token>); alarm events.
		p.Subscribe = []string{names.AllOutcomes(), names.AllReplies(), names.AllAlarms(), inbox}
	case Observer:
		results, jobs := names.ResultsStream(), names.JobsStream()
		p.Publish = append(info,
			names.StatusSubject(), names.InspectSubject(), names.HeldSubject("*"),
			// The failed list, lookups and the dashboard read the outcomes with direct gets.
			api("DIRECT.GET."+results), api("DIRECT.GET."+results+".>"),
			// Job inspection reads a job's stored message (group, key, when published).
			api("DIRECT.GET."+jobs), api("DIRECT.GET."+jobs+".>"),
			// weave schedule list.
			api("DIRECT.GET."+names.SchedulesStream()),
		)
		p.Subscribe = []string{names.AllAlarms(), inbox} // alarm events
	case Worker:
		pool := wire.PoolKey(u.Resources)
		work, cons := names.WorkStream(), names.WorkConsumer(pool)
		p.Publish = append(info,
			names.HeartbeatSubject(pool, u.WorkerID),
			names.JoinSubject(pool, u.WorkerID),
			names.ReportSubject(pool, u.WorkerID),
			// Its pool's consumer only: created with its filter, pulled, acked.
			api("CONSUMER.CREATE."+work+"."+cons+"."+names.WorkSubject(pool)),
			api("CONSUMER.MSG.NEXT."+work+"."+cons),
			"$JS.ACK."+work+"."+cons+".>",
		)
		// Inspection asks the pool's workers which one runs a job; that one answers. A
		// coordinator starting its term calls the roll.
		p.Subscribe = []string{names.CancelSubject(), names.HeldSubject(pool), names.RollCallSubject(), inbox}
		p.AllowResponses = true
	}
	return p, nil
}

func api(s string) string { return "$JS.API." + s }

func isSubjectToken(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	return strings.IndexFunc(s, func(c rune) bool {
		return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-')
	}) < 0
}
