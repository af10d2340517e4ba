package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/weavejobs/weave/coordinator"
)

func newInitCmd(g *globals) *cobra.Command {
	var (
		conn   connFlags
		opts   coordinator.StreamOptions
		memory bool
	)
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Create a namespace's streams",
		Long: `Init creates the namespace's streams that do not exist yet, as the coordinator does when it
starts, and prints what it created or found. Workers and producers (submit, failed, cancel) do
not create streams: on a namespace nobody initialised they fail at once, so a misspelt
namespace cannot collect jobs nothing will run, and their users need no stream-create rights.

Init is idempotent. It changes nothing in a stream that exists: if one differs from the flags
(replicas, dedup window, storage...), init says how and exits with status 1; change it with
'nats stream edit' or the server's tools. The lease bucket is created by the coordinator,
since its TTL is the coordinator's --lease-ttl. How long outcomes are kept (result retention)
is the coordinator's --result-retention, not a property of the streams.`,
		Example: `  weave init --namespace acme
  weave init --namespace acme --replicas 3`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The rule InitNamespace applies, checked before connecting.
			if err := opts.Validate(""); err != nil {
				return usageError{errors.New(inFlagWords(err.Error(), initFlags))}
			}
			opts.MemoryStorage = memory
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			s, err := conn.open(ctx, "init", g.log)
			if err != nil {
				return err
			}
			defer s.close()
			sts, err := coordinator.InitNamespace(s.ctx, s.nc, conn.namespace, opts)
			out := cmd.OutOrStdout()
			differ := 0
			for _, st := range sts {
				switch {
				case st.Created:
					fmt.Fprintf(out, "created %s\n", st.Name)
				case len(st.Differences) == 0:
					fmt.Fprintf(out, "found   %s\n", st.Name)
				default:
					differ++
					fmt.Fprintf(out, "found   %s, different: %s\n", st.Name, strings.Join(st.Differences, "; "))
				}
				if len(st.Upgraded) > 0 {
					fmt.Fprintf(out, "upgraded %s: added %s\n", st.Name, strings.Join(st.Upgraded, "; "))
				}
			}
			if err != nil {
				if errors.Is(err, coordinator.ErrInvalidConfig) {
					return usageError{errors.New(inFlagWords(err.Error(), initFlags))}
				}
				return s.explain(fmt.Errorf("init namespace %q: %w", conn.namespace, err))
			}
			if differ > 0 {
				return fmt.Errorf("namespace %q: %d streams exist with another configuration than asked for; they are used as they are", conn.namespace, differ)
			}
			fmt.Fprintf(out, "namespace %q is ready\n", conn.namespace)
			return nil
		},
	}
	f := cmd.Flags()
	conn.register(f)
	conn.registerTimeout(f, defaultTimeout)
	f.IntVar(&opts.Replicas, "replicas", 0, "replicas of every stream (3 on a cluster; 1 to 5; unset: 1 for a new stream, an existing one's left unchecked)")
	f.DurationVar(&opts.DedupWindow, "dedup-window", 0, "how long job keys are remembered for deduplication (0: 2m)")
	f.BoolVar(&memory, "memory", false, "keep the streams in memory: for tests and benchmarks, nothing survives a server restart")
	return cmd
}

// initFlags names the coordinator.StreamOptions fields that a flag of weave init sets, so that a
// validation error speaks of the flag the user typed.
var initFlags = map[string]string{"Replicas": "--replicas", "DedupWindow": "--dedup-window"}
