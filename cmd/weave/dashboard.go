package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/weavejobs/weave/cmd/weave/internal/dashboard"
	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/dispatcher"
)

// actionTokenEnv and readTokenEnv are where --action-token and --read-token default from, so
// that the tokens need not show in the process list.
const (
	actionTokenEnv = "WEAVE_DASHBOARD_TOKEN"
	readTokenEnv   = "WEAVE_DASHBOARD_READ_TOKEN"
)

func newDashboardCmd(g *globals) *cobra.Command {
	var (
		conn         connFlags
		listen       string
		allowActions bool
		actionToken  string
		readToken    string
		hostNames    []string
	)
	cmd := &cobra.Command{
		Use:   "dashboard",
		Short: "Serve a live web dashboard of a namespace",
		Long: `Dashboard serves a web app showing the namespace live: jobs per state and rates in and out,
alarms, the coordinator; groups with their progress and their share of the fleet over time;
resources, pools and workers; failed jobs with their attempts; job lookup by ID or group and key.
Pages update about once a second while they are visible.

It reads only what an observer may read (weave auth --role observer), so it can run anywhere.
Retry and cancel are off unless --allow-actions; then each request needs the action token
(--action-token, $` + actionTokenEnv + `, or one generated and printed at start), and the
NATS user needs a producer's permissions. Every action is logged.

On a loopback address (the default) it answers only for localhost and loopback IPs. To listen
beyond loopback, give the names it is reached by (--host-name, against DNS rebinding) and a
read token (--read-token, $` + readTokenEnv + `; or --allow-actions, whose
token then guards reads too): a browser asks for it as a password (any user name), a script
sends it as "Authorization: Bearer". Without both it refuses to start. Over an untrusted
network, put it behind a reverse proxy that serves TLS instead.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if actionToken != "" && !allowActions {
				return usageErrorf("--action-token needs --allow-actions")
			}
			// Refused before connecting: a dashboard that cannot start says so at once.
			exposure := dashboard.Config{AllowActions: allowActions, ReadToken: readToken, HostNames: hostNames}
			if err := exposure.CheckListener(listenAddr(listen)); err != nil {
				return usageErrorf("--listen %s: %v", listen, err)
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			nc, err := conn.connect(ctx, "dashboard", true, g.log)
			if err != nil {
				return err
			}
			defer closeConn(nc)
			// A refused request (an observer user with --allow-actions, say) is otherwise only a
			// timeout on the page: say which subject the server refused.
			nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
				g.log.Error().Err(err).Msg("NATS server error")
			})
			cctx, cancel := contextWithTimeout(ctx, defaultTimeout)
			err = checkNamespace(cctx, nc, conn.namespace)
			cancel()
			if errors.Is(err, coordinator.ErrNamespaceNotFound) {
				return err
			}
			d, err := dispatcher.New(nc, dispatcher.Config{Namespace: conn.namespace, Logger: g.log})
			if err != nil {
				return err
			}
			defer d.Close()
			backend, err := dashboard.NewBackend(nc, conn.namespace, d)
			if err != nil {
				return err
			}
			srv, err := dashboard.New(dashboard.Config{
				Backend: backend, Namespace: conn.namespace, Log: g.log,
				AllowActions: allowActions, Token: actionToken, ReadToken: readToken, HostNames: hostNames,
			})
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return usageErrorf("--listen %s: %v", listen, err)
			}
			if err := exposure.CheckListener(ln.Addr()); err != nil {
				ln.Close()
				return usageErrorf("--listen %s: %v", listen, err)
			}
			addr := ln.Addr().String()
			if len(hostNames) > 0 {
				_, port, _ := net.SplitHostPort(addr)
				addr = net.JoinHostPort(hostNames[0], port)
			}
			announce(cmd.OutOrStdout(), addr, conn.namespace, srv.Token())
			g.log.Info().Str("listen", ln.Addr().String()).Bool("actions", allowActions).Msg("dashboard serving")
			return srv.Serve(ctx, ln)
		},
	}
	f := cmd.Flags()
	conn.register(f)
	f.StringVar(&listen, "listen", "127.0.0.1:8080", "address to serve the dashboard on (host:port)")
	f.BoolVar(&allowActions, "allow-actions", false, "allow retry and cancel from the dashboard (each request needs the action token)")
	f.StringVar(&actionToken, "action-token", os.Getenv(actionTokenEnv), "token the dashboard's actions need ($"+actionTokenEnv+"; default: generated and printed at start)")
	f.StringVar(&readToken, "read-token", os.Getenv(readTokenEnv), "token every request needs, as the password of basic authentication or a bearer token ($"+readTokenEnv+"; needed beyond loopback unless --allow-actions)")
	f.StringSliceVar(&hostNames, "host-name", nil, "a name the dashboard is reached by (repeat or comma-separate); requests for other Host names are refused (needed beyond loopback)")
	return cmd
}

// listenAddr resolves --listen as far as CheckListener needs: its IP ("" or a name: not loopback
// unless "localhost").
func listenAddr(listen string) net.Addr {
	host, _, _ := net.SplitHostPort(listen)
	if host == "localhost" {
		return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}
	}
	return &net.TCPAddr{IP: net.ParseIP(host)}
}

// announce prints where the dashboard is, with the token in the URL's fragment (which browsers
// never send to a server) when actions are on.
func announce(w io.Writer, addr, namespace, token string) {
	url := "http://" + addr + "/"
	fmt.Fprintf(w, "Weave dashboard of namespace %s: %s\n", namespace, url)
	if token != "" {
		fmt.Fprintf(w, "Actions are on. Token: %s\nOpen with the token filled in: %s#token=%s\n", token, url, token)
	}
}
