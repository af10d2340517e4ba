package main

import (
	"errors"
	"strings"

	"github.com/spf13/cobra"

	"github.com/weavejobs/weave/internal/auth"
	"github.com/weavejobs/weave/internal/wire"
)

func newAuthCmd() *cobra.Command {
	var (
		namespace string
		roles     []string
		workers   []string
		format    string
		account   string
	)
	cmd := &cobra.Command{
		Use:   "auth",
		Short: "Print the NATS permissions of each Weave role, for nats-server or nsc",
		Long: `Auth prints the least-privilege NATS permissions of Weave's roles in a namespace:

  coordinator  owns the namespace's streams and lease; schedules, records outcomes
  producer     publishes, cancels and waits for groups; lists and retries failed jobs
  worker       runs the jobs of one pool (a resource set), as one worker ID
  observer     reads status and the failed list

--format server (the default) prints a nats-server "authorization { users = [...] }" block with
one user per role; each reads its password from an environment variable named in the block
(nats-server resolves $NAME from the environment). --format nsc prints the nsc commands that
create the same users as JWT users of --account.

Each user may subscribe only to its own inbox prefix, printed beside it: give it to the client
with --inbox-prefix (Go: nats.CustomInboxPrefix). A worker user can heartbeat, report, and pull
and ack only as its own ID and pool: give each worker one with --worker, or use ID '*' for one
user shared by every worker of a pool (they can then act as each other, not as another pool).`,
		Example: `  weave auth --worker w1=eu,gpu --worker w2= > weave-auth.conf
  weave auth --role worker --worker '*=eu' --format nsc --account WEAVE`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			names, err := wire.NewNames(namespace)
			if err != nil {
				return usageError{err}
			}
			users, err := authUsers(roles, workers)
			if err != nil {
				return err
			}
			entries, err := auth.Entries(names, users)
			if errors.Is(err, auth.ErrBadUser) {
				return usageError{err}
			} else if err != nil {
				return err
			}
			switch format {
			case "server":
				return auth.WriteServerConfig(cmd.OutOrStdout(), names, entries)
			case "nsc":
				return auth.WriteNSC(cmd.OutOrStdout(), names, account, entries)
			}
			return usageErrorf("--format %q: want server or nsc", format)
		},
	}
	f := cmd.Flags()
	registerNamespace(f, &namespace)
	f.StringSliceVar(&roles, "role", nil, "roles to print: coordinator, producer, worker, observer (default all)")
	f.StringArrayVar(&workers, "worker", nil, "a worker user: ID=resources (comma-separated, may be empty); ID '*' for every worker of the pool; repeatable (default '*=', any worker of the pool without resources)")
	f.StringVar(&format, "format", "server", "server (a nats-server authorization block) or nsc (nsc commands for JWT users)")
	f.StringVar(&account, "account", "WEAVE", "the nsc account of the users (--format nsc)")
	return cmd
}

// authUsers turns the flags into users: every role asked for, a worker user per --worker.
func authUsers(roles, workers []string) ([]auth.User, error) {
	want := map[auth.Role]bool{}
	for _, r := range roles {
		role := auth.Role(strings.TrimSpace(r))
		if !containsRole(role) {
			return nil, usageErrorf("--role %q: want coordinator, producer, worker or observer", r)
		}
		want[role] = true
	}
	if len(want) == 0 {
		for _, r := range auth.Roles {
			want[r] = true
		}
	}
	if len(workers) == 0 {
		workers = []string{auth.AnyWorker + "="}
	}
	var users []auth.User
	for _, role := range auth.Roles {
		if !want[role] {
			continue
		}
		if role != auth.Worker {
			users = append(users, auth.User{Role: role})
			continue
		}
		for _, w := range workers {
			id, res, ok := strings.Cut(w, "=")
			if !ok {
				return nil, usageErrorf("--worker %q: want ID=resources, e.g. w1=eu,gpu or 'w1=' for none", w)
			}
			var resources []string
			if res != "" {
				resources = strings.Split(res, ",")
			}
			users = append(users, auth.User{Role: auth.Worker, WorkerID: id, Resources: resources})
		}
	}
	return users, nil
}

func containsRole(r auth.Role) bool {
	for _, x := range auth.Roles {
		if x == r {
			return true
		}
	}
	return false
}
