package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weavejobs/weave/internal/wire"
)

// natsHealth says what is wrong under the namespace's streams, from their stream infos: the NATS
// nodes whose replicas are offline (a node of the cluster down or cut off), replicas that are
// behind, and streams that do not answer (no leader: too many of their nodes are down). Nothing
// when all is well, or on a single server.
func natsHealth(ctx context.Context, nc *nats.Conn, names wire.Names) []string {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil
	}
	var (
		out     []string
		offline = map[string][]string{} // node → the streams whose replica it holds
		behind  = map[string][]string{}
	)
	for _, name := range []string{names.JobsStream(), names.WorkStream(), names.EventsStream(), names.ResultsStream()} {
		s, err := js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue // the namespace's check says so
		}
		if err != nil {
			out = append(out, fmt.Sprintf("stream %s does not answer (%v): a majority of its replicas' NATS nodes may be down", name, err))
			continue
		}
		c := s.CachedInfo().Cluster
		if c == nil {
			continue
		}
		for _, r := range c.Replicas {
			switch {
			case r.Offline:
				offline[r.Name] = append(offline[r.Name], name)
			case !r.Current:
				behind[r.Name] = append(behind[r.Name], name)
			}
		}
	}
	for _, node := range slices.Sorted(maps.Keys(offline)) {
		out = append(out, fmt.Sprintf("node %s is offline (down or cut off): its replicas of %s wait for it; the streams go on while a majority of each is up",
			node, strings.Join(offline[node], ", ")))
	}
	for _, node := range slices.Sorted(maps.Keys(behind)) {
		out = append(out, fmt.Sprintf("node %s is behind on %s (catching up, or cut off)", node, strings.Join(behind[node], ", ")))
	}
	return out
}

// printNATSHealth writes natsHealth's findings, one line each.
func printNATSHealth(w io.Writer, health []string) {
	for _, h := range health {
		fmt.Fprintf(w, "NATS: %s\n", h)
	}
}
