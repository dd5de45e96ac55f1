package cli

import (
	"runtime/debug"
	"testing"
)

func TestDescribeBuild(t *testing.T) {
	vcs := func(rev, when, modified string) *debug.BuildInfo {
		return &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: rev}, {Key: "vcs.time", Value: when}, {Key: "vcs.modified", Value: modified}}}
	}
	tests := []struct {
		release string
		info    *debug.BuildInfo
		want    string
	}{
		{"1.2.0", nil, "1.2.0"},
		{"", nil, "devel"},
		{"", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}, "devel (go1.26.8)"},
		{"", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.3.0"}}, "v1.3.0 (go1.26.8)"},
		{"1.2.0", vcs("0123456789abcdef0123", "2026-11-25T10:00:00Z", "false"), "1.2.0 (commit 0123456789ab, 2026-11-25T10:00:00Z, go1.26.8)"},
		{"", vcs("0123456789abcdef0123", "2026-11-25T10:00:00Z", "true"), "devel (commit 0123456789ab+changes, 2026-11-25T10:00:00Z, go1.26.8)"},
	}
	for _, tt := range tests {
		if got := describeBuild(tt.release, tt.info); got != tt.want {
			t.Errorf("describeBuild(%q, ...) = %q, want %q", tt.release, got, tt.want)
		}
	}
}
