package coordinator

import (
	"testing"
	"time"

	"github.com/weavejobs/weave/coordinator/internal/engine"
	"github.com/weavejobs/weave/internal/wire"
)

// testLoop drives an engine through the calls the run makes, without NATS: for tests of the
// run's side (metrics, releases, writes) that need an engine in a given state. The engine's own
// tests, in its package, drive it from inside.
type testLoop struct {
	t     *testing.T
	e     *engine.Engine
	cfg   Config
	names wire.Names
	seq   uint64 // last JOBS sequence
	now   time.Time
}

func newTestLoop(t *testing.T, cfg Config) *testLoop {
	t.Helper()
	tl := &testLoop{t: t, now: time.Unix(1_700_000_000, 0)}
	cfg.now = func() time.Time { return tl.now }
	cfg, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	tl.cfg = cfg
	tl.names, _ = wire.NewNames(cfg.Namespace)
	if tl.e, err = engine.New(cfg.engineConfig(), tl.names, 1); err != nil {
		t.Fatal(err)
	}
	tl.e.EndReplay(nil, tl.now)
	return tl
}

// run is a run of tl's engine, without a connection unless c has one.
func (tl *testLoop) run(c *Coordinator) *run {
	return &run{c: c, e: tl.e, cfg: tl.cfg, names: tl.names, log: tl.cfg.Logger}
}

func (tl *testLoop) open(g string) {
	tl.seq++
	tl.e.Feed(tl.names.GroupSubject(wire.GroupToken(g)), tl.seq, wire.GroupControl{Group: g, Op: wire.OpOpen}.Header(), nil, time.Time{})
}

// job feeds a job message stored at stored and returns its JOBS sequence, the job's ID.
func (tl *testLoop) job(m wire.JobMeta, stored time.Time) uint64 {
	tl.seq++
	tl.e.Feed(tl.names.JobSubject(wire.GroupToken(m.Group)), tl.seq, m.Header(), nil, stored)
	return tl.seq
}

func (tl *testLoop) worker(id string, conc int) {
	hb := wire.Heartbeat{Version: wire.Version, Worker: id, Pool: "any", Concurrency: conc, Sleeping: conc, IntervalMS: 1000, Run: "run-" + id}
	if ref := tl.e.Heartbeat(tl.names.HeartbeatSubject("any", id), hb, tl.now); ref.Reason != "" {
		tl.t.Fatalf("heartbeat of %s refused: %s", id, ref.Reason)
	}
}

// releases runs a release decision and returns the releases.
func (tl *testLoop) releases() []engine.Release {
	tl.e.ReleaseAll()
	return tl.e.TakeEffects(tl.now).Releases
}
