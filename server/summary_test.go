package server

import (
	"testing"
	"time"
)

// The summary says where the join went; parts too short to show at a
// tenth of a second are left out, and the plan has the rest.
func TestJoinPartsString(t *testing.T) {
	tests := []struct {
		name  string
		parts JoinParts
		total time.Duration
		want  string
	}{
		{"a lab on one machine", JoinParts{Probes: 1000 * time.Millisecond, Network: 830 * time.Millisecond, Shared: 700 * time.Millisecond}, 2540 * time.Millisecond,
			"probes 1.0s, network 0.8s, shared machine 0.7s, plan 0.0s"},
		{"one PC per node", JoinParts{Probes: 900 * time.Millisecond, Network: 800 * time.Millisecond}, 1800 * time.Millisecond,
			"probes 0.9s, network 0.8s, plan 0.1s"},
		{"the probing node was ready before the last joined", JoinParts{Probes: 3 * time.Millisecond}, 20 * time.Millisecond,
			"plan 0.0s"},
		{"loopback: no network probe", JoinParts{Probes: 700 * time.Millisecond, Shared: 900 * time.Millisecond}, 1700 * time.Millisecond,
			"probes 0.7s, shared machine 0.9s, plan 0.1s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.parts.String(tt.total); got != tt.want {
				t.Errorf("String(%v) = %q, want %q", tt.total, got, tt.want)
			}
		})
	}
}

// The report keeps every part that took any time, in seconds.
func TestJoinPartsInTheReport(t *testing.T) {
	r := NewReport(Summary{JoinPhase: 2 * time.Second, JoinParts: JoinParts{Probes: time.Second, Network: 500 * time.Millisecond}})
	if r.JoinSeconds != 2 || r.JoinParts["probes"] != 1 || r.JoinParts["network"] != 0.5 || len(r.JoinParts) != 2 {
		t.Errorf("report join = %v s, parts %v; want 2 s, probes 1 and network 0.5", r.JoinSeconds, r.JoinParts)
	}
	if r := NewReport(Summary{}); r.JoinParts != nil {
		t.Errorf("a cast that never planned reports join parts %v", r.JoinParts)
	}
}
