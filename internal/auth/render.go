package auth

import (
	"fmt"
	"io"
	"strings"
	"unicode"

	"github.com/weavejobs/weave/internal/wire"
)

// Entry is a user with its permissions, ready to render.
type Entry struct {
	User
	Permissions
	// Identity is how the user authenticates in a nats-server block: the lines before its
	// permissions, e.g. `user: "x"` and `password: $X_PASSWORD` (see PasswordIdentity), or
	// `nkey: "U..."`.
	Identity []string
}

// PasswordVar is the name of the variable the rendered server block reads a user's password
// from: nats-server resolves `$NAME` from the environment when the configuration does not set it.
func PasswordVar(user string) string {
	return strings.Map(func(c rune) rune {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			return unicode.ToUpper(c)
		}
		return '_'
	}, user) + "_PASSWORD"
}

// PasswordIdentity authenticates a user by name and a password read from PasswordVar.
func PasswordIdentity(user string) []string {
	return []string{fmt.Sprintf("user: %q", user), "password: $" + PasswordVar(user)}
}

// Entries resolves users and returns them with their permissions and password identities.
func Entries(names wire.Names, users []User) ([]Entry, error) {
	out := make([]Entry, 0, len(users))
	for _, u := range users {
		ru, err := Resolve(names, u)
		if err != nil {
			return nil, err
		}
		p, err := For(names, ru)
		if err != nil {
			return nil, err
		}
		out = append(out, Entry{User: ru, Permissions: p, Identity: PasswordIdentity(ru.Name)})
	}
	return out, nil
}

// WriteServerConfig writes a nats-server `authorization { users = [...] }` block.
func WriteServerConfig(w io.Writer, names wire.Names, entries []Entry) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Weave namespace %q: one user per role (see docs/security.md).\n", names.Namespace())
	b.WriteString("authorization {\n  users = [\n")
	for _, e := range entries {
		fmt.Fprintf(&b, "    # %s; client inbox prefix %q\n", describe(e.User), e.InboxPrefix)
		b.WriteString("    {\n")
		for _, l := range e.Identity {
			fmt.Fprintf(&b, "      %s\n", l)
		}
		b.WriteString("      permissions: {\n")
		writeList(&b, "publish", e.Publish)
		writeList(&b, "subscribe", e.Subscribe)
		if e.AllowResponses {
			b.WriteString("        allow_responses: true\n")
		}
		b.WriteString("      }\n    }\n")
	}
	b.WriteString("  ]\n}\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func writeList(b *strings.Builder, what string, subjects []string) {
	fmt.Fprintf(b, "        %s: { allow: [\n", what)
	for _, s := range subjects {
		fmt.Fprintf(b, "          %q\n", s)
	}
	b.WriteString("        ] }\n")
}

// WriteNSC writes the nsc commands that create the users as JWT users of account.
func WriteNSC(w io.Writer, names wire.Names, account string, entries []Entry) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Weave namespace %q: one JWT user per role in account %s (see docs/security.md).\n", names.Namespace(), account)
	for _, e := range entries {
		fmt.Fprintf(&b, "\n# %s; client inbox prefix %q\n", describe(e.User), e.InboxPrefix)
		fmt.Fprintf(&b, "nsc add user --account %s --name %s\n", shellQuote(account), shellQuote(e.Name))
		fmt.Fprintf(&b, "nsc edit user --account %s --name %s \\\n", shellQuote(account), shellQuote(e.Name))
		fmt.Fprintf(&b, "  --allow-pub %s \\\n", shellQuote(strings.Join(e.Publish, ",")))
		fmt.Fprintf(&b, "  --allow-sub %s", shellQuote(strings.Join(e.Subscribe, ",")))
		if e.AllowResponses {
			b.WriteString(" \\\n  --allow-pub-response=1")
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func describe(u User) string {
	switch u.Role {
	case Worker:
		who := "worker " + u.WorkerID
		if u.WorkerID == AnyWorker {
			who = "any worker"
		}
		rs := "no resources"
		if len(u.Resources) > 0 {
			rs = "resources " + strings.Join(u.Resources, ",")
		}
		return fmt.Sprintf("%s of pool %s (%s)", who, wire.PoolKey(u.Resources), rs)
	default:
		return string(u.Role)
	}
}

// shellQuote quotes s for a POSIX shell: subjects hold $ and *.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
