package cli

import (
	"fmt"
	"runtime/debug"
	"strings"
)

// version is the release this binary was built as, set by the Makefile
// (-ldflags "-X dolly/internal/cli.version=..."); empty in a plain go build,
// which still records the commit it was built from.
var version string

// Version says which build of dolly this is: the release set at link time
// or the module's version, then the commit, its date and whether the tree
// had changes, as the Go toolchain recorded them.
func Version() string {
	return describeBuild(version, readBuildInfo())
}

func readBuildInfo() *debug.BuildInfo {
	info, _ := debug.ReadBuildInfo()
	return info
}

func describeBuild(release string, info *debug.BuildInfo) string {
	v := release
	if v == "" && info != nil && info.Main.Version != "" && info.Main.Version != "(devel)" {
		v = info.Main.Version
	}
	if v == "" {
		v = "devel"
	}
	if info == nil {
		return v
	}
	var commit, when, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			commit = s.Value
		case "vcs.time":
			when = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	var extra []string
	if commit != "" {
		if len(commit) > 12 {
			commit = commit[:12]
		}
		if modified == "true" {
			commit += "+changes"
		}
		extra = append(extra, "commit "+commit)
	}
	if when != "" {
		extra = append(extra, when)
	}
	extra = append(extra, info.GoVersion)
	return fmt.Sprintf("%s (%s)", v, strings.Join(extra, ", "))
}
