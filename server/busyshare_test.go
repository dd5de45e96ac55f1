package server

import (
	"strings"
	"testing"

	"dolly/capacity"
	"dolly/dolly/control"
)

// A machine's cores are busy the part of the time its nodes saw, where
// the ring kept them busy; nowhere else is it known.
func TestBusyShares(t *testing.T) {
	node := func(name, machine string) *nodeState { return &nodeState{name: name, machine: machine} }
	busy := func(use float64) control.NetResult {
		return control.NetResult{Bytes: 30e6, CPU: 0.1, MachineCPU: 0.4 * use, MachineIdle: 0.4 * (1 - use)}
	}
	tests := []struct {
		name    string
		ready   []*nodeState
		results []control.NetResult
		want    map[string]float64
	}{
		{"four nodes on a busy machine",
			[]*nodeState{node("a1", "box"), node("a2", "box"), node("a3", "box"), node("a4", "box")},
			[]control.NetResult{busy(0.95), busy(0.96), busy(0.95), busy(0.97)},
			map[string]float64{"box": 0.96}},
		{"the median of what the nodes saw",
			[]*nodeState{node("a1", "box"), node("a2", "box"), node("a3", "box")},
			[]control.NetResult{busy(0.92), busy(0.99), busy(0.94)},
			map[string]float64{"box": 0.94}},
		{"a ring the links held back",
			[]*nodeState{node("a1", "box"), node("a2", "box")},
			[]control.NetResult{busy(0.5), busy(0.5)},
			map[string]float64{}},
		{"a node that did not report",
			[]*nodeState{node("a1", "box"), node("a2", "box")},
			[]control.NetResult{busy(0.95), {Error: "no report"}},
			map[string]float64{}},
		{"a node without the machine's time",
			[]*nodeState{node("a1", "box"), node("a2", "box")},
			[]control.NetResult{busy(0.95), {Bytes: 30e6, CPU: 0.1}},
			map[string]float64{}},
		{"one node on each machine",
			[]*nodeState{node("a1", "pc-a"), node("b1", "pc-b")},
			[]control.NetResult{busy(0.99), busy(0.99)},
			map[string]float64{}},
		{"machines not known",
			[]*nodeState{node("a1", ""), node("a2", "")},
			[]control.NetResult{busy(0.99), busy(0.99)},
			map[string]float64{}},
		{"two machines apart",
			[]*nodeState{node("a1", "box"), node("b1", "other"), node("a2", "box"), node("b2", "other")},
			[]control.NetResult{busy(0.93), busy(0.25), busy(0.93), busy(0.25)},
			map[string]float64{"box": 0.93}},
	}
	for _, tt := range tests {
		got := busyShares(tt.ready, tt.results)
		if len(got) != len(tt.want) {
			t.Errorf("%s: shares %v, want %v", tt.name, got, tt.want)
			continue
		}
		for m, w := range tt.want {
			if g := got[m]; g < w-1e-9 || g > w+1e-9 {
				t.Errorf("%s: machine %s: share %v, want %v", tt.name, m, g, w)
			}
		}
	}
}

// The share reaches the model's machine for every host on it, the
// source's too, and no other machine; the preview says what it took.
func TestMarkBusyShares(t *testing.T) {
	net := capacity.Network{Hosts: []capacity.Host{{Name: "src", Machine: "src"}, {Name: "pc1", Machine: "src"}, {Name: "pc2", Machine: "pc2"}, {Name: "pc3"}}}
	machineOf := []string{"key-a", "key-a", "key-b", "key-c"}
	markBusyShares(&net, machineOf, map[string]float64{"key-a": 0.85, "key-c": 0.5})
	if got := net.Machines["src"].BusyShare; got != 0.85 {
		t.Errorf("the source's machine: share %v, want 0.85", got)
	}
	if _, ok := net.Machines["pc2"]; ok {
		t.Errorf("a machine the ring gave no share: %+v", net.Machines["pc2"])
	}
	if len(net.Machines) != 1 {
		t.Errorf("machines %v, want the source's alone (a host on no shared machine has none)", net.Machines)
	}
	note := busyShareNote(4, 0.853)
	for _, want := range []string{"4 nodes", "85%", "idle", "kernel's threads"} {
		if !strings.Contains(note, want) {
			t.Errorf("note %q does not say %q", note, want)
		}
	}
}

// A machine keeps its share only where no node's ring came near the
// speed its link is known to take: there the links, not the CPU, held the
// ring back.
func TestHeldByCPU(t *testing.T) {
	node := func(name, machine string) *nodeState { return &nodeState{name: name, machine: machine} }
	ready := []*nodeState{node("a1", "box"), node("a2", "box"), node("b1", "other"), node("b2", "other")}
	tests := []struct {
		name  string
		ring  map[string]float64
		known map[string]float64
		want  []string
	}{
		{"links of unknown speed", map[string]float64{"a1": 900e6, "a2": 900e6, "b1": 900e6, "b2": 900e6}, nil, []string{"box", "other"}},
		{"links far faster than the ring", map[string]float64{"a1": 300e6, "a2": 300e6, "b1": 300e6, "b2": 300e6},
			map[string]float64{"a1": 1250e6, "a2": 1250e6, "b1": 1250e6, "b2": 1250e6}, []string{"box", "other"}},
		{"one link nearly full", map[string]float64{"a1": 117e6, "a2": 12e6, "b1": 30e6, "b2": 30e6},
			map[string]float64{"a1": 125e6, "a2": 125e6, "b1": 125e6, "b2": 125e6}, []string{"other"}},
		{"a link known on one node only", map[string]float64{"a1": 900e6, "a2": 900e6, "b1": 900e6, "b2": 900e6},
			map[string]float64{"b2": 1000e6}, []string{"box"}},
	}
	for _, tt := range tests {
		shares := map[string]float64{"box": 0.85, "other": 0.9}
		got := heldByCPU(shares, ready, func(n *nodeState) float64 { return tt.ring[n.name] }, func(n *nodeState) float64 { return tt.known[n.name] })
		if len(got) != len(tt.want) {
			t.Errorf("%s: shares %v, want for %v", tt.name, got, tt.want)
		}
		for _, m := range tt.want {
			if got[m] != shares[m] {
				t.Errorf("%s: machine %s: share %v, want %v", tt.name, m, got[m], shares[m])
			}
		}
		if len(shares) != 2 {
			t.Errorf("%s: the measured shares were changed: %v", tt.name, shares)
		}
	}
}

// Only a topology file's speeds tell a link held the ring back.
func TestFileLink(t *testing.T) {
	topo := &capacity.Topology{Network: capacity.Network{Hosts: []capacity.Host{{Name: "pc01", Link: 125e6}, {Name: "pc02"}}}}
	tests := []struct {
		topo *capacity.Topology
		node string
		want float64
	}{
		{topo, "pc01", 125e6},
		{topo, "pc02", 0},
		{topo, "pc03", 0},
		{nil, "pc01", 0},
	}
	for _, tt := range tests {
		s := &Server{cfg: Config{Topology: tt.topo}}
		n := &nodeState{name: tt.node, probe: &capacity.Probe{NICBytesPerSec: 1250e6}}
		if got := s.fileLink(n); got != tt.want {
			t.Errorf("%s (file %v): %v, want %v", tt.node, tt.topo != nil, got, tt.want)
		}
	}
}

// A topology file that names no machine for a node's host leaves its
// machine's share out: the model sees no machine there to give it to.
func TestSharesTaken(t *testing.T) {
	ready := []*nodeState{{name: "pc01", machine: "box"}, {name: "pc02", machine: "box"}, {name: "pc03", machine: "other"}, {name: "pc04", machine: "other"}}
	figs := netFigures{busyShares: map[string]float64{"box": 0.8, "other": 0.9}}
	hosts := []capacity.Host{{Name: "pc01", Machine: "lab"}, {Name: "pc02", Machine: "lab"}, {Name: "pc03"}, {Name: "pc04"}}
	tests := []struct {
		topo *capacity.Topology
		want map[string]float64
	}{
		{nil, map[string]float64{"box": 0.8, "other": 0.9}},
		{&capacity.Topology{Network: capacity.Network{Hosts: hosts}}, map[string]float64{"box": 0.8}},
	}
	for _, tt := range tests {
		s := &Server{cfg: Config{Topology: tt.topo}}
		got := s.sharesTaken(figs, ready)
		if len(got) != len(tt.want) || got["box"] != tt.want["box"] || got["other"] != tt.want["other"] {
			t.Errorf("file %v: shares %v, want %v", tt.topo != nil, got, tt.want)
		}
	}
	if len(figs.busyShares) != 2 {
		t.Errorf("the measured shares were changed: %v", figs.busyShares)
	}
}
