package dashboard

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
)

// ErrExposed is returned for a listener beyond loopback without ReadToken (or actions' Token) and
// HostNames: anyone on the network could read it, and any site could through DNS rebinding.
var ErrExposed = errors.New("dashboard: a listener beyond loopback needs read authentication and host names")

// CheckListener says whether a dashboard of c may serve on addr: a loopback address always; any
// other only with a read token (ReadToken, or the action token with AllowActions) and HostNames.
// Serve checks it; a caller may check it first, to fail before it connects.
func (c Config) CheckListener(addr net.Addr) error {
	a, ok := addr.(*net.TCPAddr)
	if ok && a.IP.IsLoopback() {
		return nil
	}
	var missing []string
	if c.ReadToken == "" && !c.AllowActions {
		missing = append(missing, "a read token (--read-token, or --allow-actions with its token)")
	}
	if len(c.HostNames) == 0 {
		missing = append(missing, "the host names it is reached by (--host-name)")
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s is not a loopback address, so give %s; or listen on 127.0.0.1 behind a reverse proxy that authenticates",
			ErrExposed, addr, strings.Join(missing, " and "))
	}
	return nil
}

// listening records where Serve listens: it decides the Host check and whether the action token
// also guards reads.
func (s *Server) listening(addr net.Addr) {
	a, ok := addr.(*net.TCPAddr)
	s.loopback = ok && a.IP.IsLoopback()
	s.exposed = !s.loopback
}

// readToken is the token every request needs, or "" when reads are open: ReadToken, else beyond
// loopback the action token.
func (s *Server) readToken() string {
	if s.cfg.ReadToken != "" {
		return s.cfg.ReadToken
	}
	if s.exposed && s.cfg.AllowActions {
		return s.cfg.Token
	}
	return ""
}

// allowed checks a request's Host and its read token, and answers a refusal itself.
func (s *Server) allowed(w http.ResponseWriter, r *http.Request) bool {
	// A page of another site whose name an attacker points at this address (DNS rebinding)
	// could otherwise read the dashboard as its own origin. The Host is not echoed: it is the
	// attacker's text.
	if !s.hostAllowed(r.Host) {
		writeError(w, http.StatusMisdirectedRequest, errors.New(s.hostRule()))
		return false
	}
	tok := s.readToken()
	if tok == "" {
		return true
	}
	got, ok := bearer(r)
	if !ok {
		_, got, ok = r.BasicAuth() // a browser asks for it: any user name, the token as password
	}
	if ok && subtle.ConstantTimeCompare([]byte(got), []byte(tok)) == 1 {
		return true
	}
	w.Header().Set("WWW-Authenticate", `Basic realm="weave dashboard", charset="UTF-8"`)
	writeError(w, http.StatusUnauthorized, errors.New("reading this dashboard needs its read token: as the password (any user name), or as Authorization: Bearer"))
	return false
}

func bearer(r *http.Request) (string, bool) {
	return strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
}

// hostAllowed: with HostNames, one of them (and loopback names on a loopback listener); without,
// loopback names on a loopback listener and anything otherwise (a handler not served by Serve).
func (s *Server) hostAllowed(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport // no port
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if slices.ContainsFunc(s.cfg.HostNames, func(n string) bool { return strings.EqualFold(strings.TrimSuffix(n, "."), host) }) {
		return true
	}
	if s.loopback {
		return loopbackHost(host)
	}
	return len(s.cfg.HostNames) == 0
}

func (s *Server) hostRule() string {
	if len(s.cfg.HostNames) == 0 {
		return "this dashboard listens on a loopback address and answers only for localhost or a loopback IP"
	}
	return "this dashboard answers only for the host names it is configured with (--host-name)"
}

// loopbackHost reports whether host names localhost or a loopback IP.
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}
