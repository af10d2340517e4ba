package main

import (
	"context"
	"flag"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/integration/chaos/internal/record"
	"github.com/weavejobs/weave/internal/wire"
)

// hostileID and hostileResources are the attacker's worker ID and the resources of its pool.
const hostileID = "intruder"

var hostileResources = []string{"hostile"}

func runHostile(ctx context.Context, args []string) error {
	var (
		c       common
		every   time.Duration
		reports int
	)
	fs := flag.NewFlagSet("hostile", flag.ContinueOnError)
	c.register(fs)
	fs.DurationVar(&every, "every", 100*time.Millisecond, "pause between two forged report messages")
	fs.IntVar(&reports, "reports", 8, "forged reports per message")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := newLogger(hostileID)
	names, err := wire.NewNames(c.namespace)
	if err != nil {
		return err
	}
	out, err := record.Create(c.records)
	if err != nil {
		return err
	}
	defer out.Close()
	nc, err := c.connect("chaos hostile", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	subject := names.ReportSubject(wire.PoolKey(hostileResources), hostileID)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		// Job IDs are JOBS sequences: the latest are the jobs pending or running now.
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		last, err := lastJob(rctx, js, names)
		if err == nil && last > 0 {
			err = forge(rctx, js, subject, last, reports, out)
		}
		cancel()
		if err != nil && ctx.Err() == nil {
			log.Debug().Err(err).Msg("forged report not stored") // a node or leader down: try again
		}
	}
}

func lastJob(ctx context.Context, js jetstream.JetStream, names wire.Names) (uint64, error) {
	s, err := js.Stream(ctx, names.JobsStream())
	if err != nil {
		return 0, err
	}
	return s.CachedInfo().State.LastSeq, nil
}

// forge stores one message of n forged reports about jobs guessed up to last, and records it.
func forge(ctx context.Context, js jetstream.JetStream, subject string, last uint64, n int, out *record.Writer) error {
	low := uint64(1)
	if last > 400 {
		low = last - 400
	}
	rs := make([]wire.Report, n)
	for i := range rs {
		st := wire.StatusOK
		if i%2 == 1 {
			st = wire.StatusPermanent
		}
		rs[i] = wire.Report{ID: low + rand.Uint64N(last-low+1), Attempt: 1 + rand.Uint32N(2), Status: st, Data: []byte(record.Forged)}
	}
	m := nats.NewMsg(subject)
	m.Data = wire.AppendReports(nil, hostileID, rs)
	if rand.N(2) == 0 {
		// A proof the attacker made up, as a worker would echo one.
		m.Header.Add(wire.HdrProof, strconv.FormatUint(rs[0].ID, 10)+" "+strconv.FormatUint(uint64(rs[0].Attempt), 10)+" 0.AAAAAAAAAAAAAAAAAAAAAA")
	}
	if _, err := js.PublishMsg(ctx, m); err != nil {
		return err
	}
	first, lastID := rs[0].ID, rs[0].ID
	for _, r := range rs {
		first, lastID = min(first, r.ID), max(lastID, r.ID)
	}
	return out.Write(record.Forgery{At: time.Now(), Reports: n, FirstJob: first, LastJob: lastID})
}
