package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/weavejobs/weave/internal/wire"
)

// version is set at release builds with -ldflags "-X main.version=v1.2.3"; otherwise the
// module version or VCS revision recorded by the Go toolchain is used.
var version = ""

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of weave",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), versionString())
			return err
		},
	}
}

func versionString() string {
	v, deps := buildVersion()
	s := fmt.Sprintf("weave %s (wire protocol v%d, %s %s/%s", v, wire.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	for _, path := range []string{"github.com/nats-io/nats.go", "github.com/nats-io/nats-server/v2"} {
		if dv, ok := deps[path]; ok {
			s += ", " + path + " " + dv
		}
	}
	return s + ")"
}

// buildVersion returns weave's version and the versions of its dependencies by module path.
func buildVersion() (string, map[string]string) {
	deps := map[string]string{}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return orDevel(version), deps
	}
	for _, d := range bi.Deps {
		deps[d.Path] = d.Version
	}
	if version != "" {
		return version, deps
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v, deps
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" {
		return "devel-" + rev + dirty, deps
	}
	return "devel", deps
}

func orDevel(v string) string {
	if v == "" {
		return "devel"
	}
	return v
}
