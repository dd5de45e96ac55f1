package server

import (
	"strings"
	"testing"
	"time"

	"dolly/dolly/probe"
)

func TestJoinStealNote(t *testing.T) {
	tests := []struct {
		name string
		cpu  probe.CPUTimes
		want string // "" for no note, else a part of it
	}{
		{"nothing measured", probe.CPUTimes{}, ""},
		{"no host", probe.CPUTimes{Busy: 3 * time.Second, Idle: time.Second}, ""},
		{"a host's usual share", probe.CPUTimes{Busy: 7 * time.Second, Steal: 200 * time.Millisecond, Idle: 2800 * time.Millisecond}, ""},
		{"a burst of the host", probe.CPUTimes{Busy: 7 * time.Second, Steal: 1100 * time.Millisecond, Idle: 1900 * time.Millisecond},
			"the VM's host took 11% of this machine's cores while the join's probes ran"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := joinStealNote(tt.cpu)
			if tt.want == "" && got != "" {
				t.Fatalf("note %q, want none", got)
			}
			if !strings.Contains(got, tt.want) {
				t.Fatalf("note %q, want one containing %q", got, tt.want)
			}
		})
	}
}
