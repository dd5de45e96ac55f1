package server

import (
	"maps"
	"testing"

	"dolly/capacity"
	"dolly/dolly/control"
)

// A node's link is the faster of its ring directions: a slow neighbour
// holds back one of them, not the node itself. Without a ring, its share
// of the star is all that is known.
func TestNetFiguresLink(t *testing.T) {
	f := netFigures{
		star:   map[string]float64{"pc1": 4e6, "pc2": 4e6, "pc3": 4e6, "solo": 3e6},
		ringIn: map[string]float64{"pc1": 1.2e6, "pc2": 11e6, "pc3": 1.2e6},
		ringUp: map[string]float64{"pc1": 11e6, "pc2": 1.2e6, "pc3": 1.2e6},
	}
	for _, tt := range []struct {
		name string
		want float64
	}{
		{"pc1", 11e6}, // its upstream neighbour pc3 is slow
		{"pc2", 11e6}, // its downstream neighbour pc3 is slow
		{"pc3", 1.2e6},
		{"solo", 3e6},
		{"absent", 0},
	} {
		if got := f.link(tt.name); got != tt.want {
			t.Errorf("link(%s) = %.0f, want %.0f", tt.name, got, tt.want)
		}
	}
	if got := f.sourceLink(); got != 15e6 {
		t.Errorf("sourceLink = %.0f, want the star's sum 15e6", got)
	}
}

// The source's link is what it wrote in one window when that is less than
// the sum of what each node received over its own stream's time, which
// overstates a link the streams took turns on.
func TestSourceLinkTakesTheWindow(t *testing.T) {
	star := map[string]float64{"pc1": 7e6, "pc2": 7e6}
	for _, tt := range []struct {
		name string
		f    netFigures
		want float64
	}{
		{"the window counted less", netFigures{star: star, starSent: 11.8e6}, 11.8e6},
		{"the window counted more", netFigures{star: star, starSent: 15e6}, 14e6},
		{"no window", netFigures{star: star}, 14e6},
		{"no star reports", netFigures{star: map[string]float64{}, starSent: 11.8e6}, 11.8e6},
	} {
		if got := tt.f.sourceLink(); got != tt.want {
			t.Errorf("%s: sourceLink = %.0f, want %.0f", tt.name, got, tt.want)
		}
	}
}

// A measured rate lowers a link the NIC reports faster, never raises one,
// and fills in one the NIC does not report; the model gets the line rate
// whose TCP payload is the measured rate.
func TestWithMeasuredLink(t *testing.T) {
	eff := capacity.TCPEthernetEfficiency
	for _, tt := range []struct {
		name          string
		nic, measured float64
		want          float64
	}{
		{"shaped below the NIC", 125e6, 11.8e6, 11.8e6 / eff},
		{"the NIC is the ceiling", 12.5e6, 100e6, 12.5e6},
		{"no NIC speed", 0, 11.8e6, 11.8e6 / eff},
		{"nothing measured", 125e6, 0, 125e6},
	} {
		p := capacity.Probe{NICBytesPerSec: tt.nic}
		withMeasuredLink(&p, tt.measured)
		if p.NICBytesPerSec != tt.want {
			t.Errorf("%s: link %.0f, want %.0f", tt.name, p.NICBytesPerSec, tt.want)
		}
	}
}

// Links of one kind measured with noise settle on their median, so the
// planner does not order a chain by noise; a link clearly apart keeps its
// rate.
func TestNetFiguresSettle(t *testing.T) {
	ready := []*nodeState{{name: "pc1"}, {name: "pc2"}, {name: "pc3"}, {name: "pc4"}}
	f := netFigures{
		star: map[string]float64{},
		// pc4 is slow: what it sends and what pc3 sends it crawl.
		ringUp: map[string]float64{"pc1": 10e6, "pc2": 11e6, "pc3": 1.2e6, "pc4": 1.2e6},
		ringIn: map[string]float64{"pc2": 10e6, "pc3": 11e6, "pc4": 1.2e6, "pc1": 1.2e6},
	}
	f.settle(ready)
	for _, tt := range []struct {
		name string
		want float64
	}{{"pc1", 11e6}, {"pc2", 11e6}, {"pc3", 11e6}, {"pc4", 1.2e6}} {
		if got := f.link(tt.name); got != tt.want {
			t.Errorf("link(%s) = %.0f after settling, want %.0f", tt.name, got, tt.want)
		}
	}
}

// Nodes on one kernel are one machine whatever their network namespaces
// (the emulated lab, the demo); without the kernel's word, the same NICs
// seen at the same address are.
func TestMachineKey(t *testing.T) {
	macs := []string{"52:54:00:00:00:01"}
	for _, tt := range []struct {
		id, ip, want string
	}{
		{"9f86d081884c7d65", "198.18.0.2", "9f86d081884c7d65"},
		{"9f86d081884c7d65", "198.18.0.3", "9f86d081884c7d65"},
		{"", "198.18.0.2", "52:54:00:00:00:01@198.18.0.2"},
	} {
		if got := machineKey(tt.id, macs, tt.ip); got != tt.want {
			t.Errorf("machineKey(%q, %v, %s) = %q, want %q", tt.id, macs, tt.ip, got, tt.want)
		}
	}
}

// A node whose data comes over loopback has no link to measure.
func TestNodeOnLoopback(t *testing.T) {
	for _, tt := range []struct {
		addr string
		want bool
	}{
		{"127.0.0.1:7001", true},
		{"[::1]:7001", true},
		{"198.18.0.12:7001", false},
		{"pc01:7001", false},
		{"nonsense", false},
	} {
		if got := (&nodeState{dataAddr: tt.addr}).loopback(); got != tt.want {
			t.Errorf("loopback(%s) = %v, want %v", tt.addr, got, tt.want)
		}
	}
}

// A machine's busy time in the ring is shared out over the bytes all its
// nodes received: three nodes on one box each saw it busy about 0.3 s while
// 100 MB passed in all. A machine with a node whose report is missing, or
// too few bytes in all, has no cost but still its busy share; one that
// nobody saw the time of has neither; a node of unknown machine is one of
// its own.
func TestMachineRing(t *testing.T) {
	node := func(name, machine string) *nodeState { return &nodeState{name: name, machine: machine} }
	ready := []*nodeState{node("a1", "box"), node("a2", "box"), node("a3", "box"), node("b1", "pc-b"), node("c1", "pc-c"),
		node("d1", ""), node("e1", ""), node("f1", "two"), node("f2", "two")}
	results := []control.NetResult{
		{Bytes: 30e6, MachineCPU: 0.29, MachineIdle: 0.11},
		{Bytes: 40e6, MachineCPU: 0.30, MachineIdle: 0.10},
		{Bytes: 30e6, MachineCPU: 0.35, MachineIdle: 0.05},
		{Bytes: 50e6, MachineCPU: 0.1, MachineIdle: 0.3},
		{Bytes: 50e6}, // no machine time reported (an older node)
		{Bytes: 20e6, MachineCPU: 0.04, MachineIdle: 0.36},
		{Bytes: ringCPUBytes - 1, MachineCPU: 0.39, MachineIdle: 0.01}, // too few bytes to tell a cost
		{Bytes: 20e6, MachineCPU: 0.2, MachineIdle: 0.2},
		{Error: "no report"},
	}
	cost, busy := machineRing(ready, results)
	wantCost := map[string]float64{"a1": 3e-9, "a2": 3e-9, "a3": 3e-9, "b1": 2e-9, "d1": 2e-9}
	if len(cost) != len(wantCost) {
		t.Errorf("costs for %v, want for %v", cost, wantCost)
	}
	for name, w := range wantCost {
		if g := cost[name]; g < w*0.999 || g > w*1.001 {
			t.Errorf("%s: %.3g s a byte, want %.3g", name, g, w)
		}
	}
	wantBusy := map[string]float64{"a1": 0.75, "a2": 0.75, "a3": 0.75, "b1": 0.25, "d1": 0.1, "e1": 0.975, "f1": 0.5, "f2": 0.5}
	if len(busy) != len(wantBusy) {
		t.Errorf("busy shares for %v, want for %v", busy, wantBusy)
	}
	for name, w := range wantBusy {
		if g := busy[name]; g < w*0.999 || g > w*1.001 {
			t.Errorf("%s: its machine busy %.3f of the time, want %.3f", name, g, w)
		}
	}
}

// A stream's cost is the node's own time or, where more, its share of its
// machine's; a crowded machine's share is divided by the slowdown the model
// applies to its figures anyway.
func TestLinkCPU(t *testing.T) {
	pc := &nodeState{name: "pc1", machine: "box"}
	for _, tt := range []struct {
		name                      string
		own, machine, slow, share float64
		busy                      bool // the ring kept pc1's machine busy
		want                      float64
	}{
		{"kernel threads add to the process", 1e-9, 3e-9, 0, 0, false, 3e-9},
		{"the process alone costs more", 2e-9, 1e-9, 0, 0, false, 2e-9},
		{"no machine figure", 2e-9, 0, 0, 0, false, 2e-9},
		{"not measured", 0, 3e-9, 0, 0, false, 0},
		{"a crowd's slowdown counted once", 1e-9, 3e-9, 1.5, 0, false, 2e-9},
		{"the kernel's threads by the byte on a machine busy in part", 1e-9, 3e-9, 0, 0.95, false, 3e-9},
		{"a busy machine: its share, though the process's own cost more", 1.8e-9, 1.2e-9, 0, 0, true, 1.2e-9},
		{"a busy machine: its share, with a crowd's slowdown", 1e-9, 3e-9, 1.5, 0, true, 2e-9},
		{"a busy machine without a figure: the process's own", 1.8e-9, 0, 0, 0, true, 1.8e-9},
	} {
		f := netFigures{ringCPU: map[string]float64{"pc1": tt.own}, ringMachine: map[string]float64{"pc1": tt.machine}, ringBusy: map[string]float64{}}
		if tt.busy {
			f.ringBusy["pc1"] = busyShare
		}
		if tt.share > 0 {
			f.busyShares = map[string]float64{"box": tt.share}
		}
		if tt.slow > 0 {
			// Two cores for 1 s against a lone cost of 1 ns a byte: the
			// crowd moved 2e9/slowdown bytes.
			f.crowds = map[string]crowd{"box": {nodes: 3, cores: 2, rate: 2e9 / tt.slow, alone: 1e-9}}
		}
		if got := f.linkCPU(pc); got < tt.want*0.999 || got > tt.want*1.001 {
			t.Errorf("%s: %.3g, want %.3g", tt.name, got, tt.want)
		}
	}
}

// Where the ring kept a machine's CPUs busy, its nodes' links carried what
// the scheduler gave each, and all carried at least what the best did:
// rates from a quarter of the median up count as the best, so that no node
// is served apart, or made a tree's inner node, for turns it did or did
// not get, and the links are not taken for slower than they are; a
// link a tenth of the others' still stands out. Elsewhere the band stays
// narrow.
func TestNetFiguresSettleOnABusyMachine(t *testing.T) {
	// Each node's ring rates in and up; its link is the faster. pc2 got
	// few turns; pc5's link carries a tenth of the others'.
	in := map[string]float64{"pc1": 30e6, "pc2": 10e6, "pc3": 17e6, "pc4": 70e6, "pc5": 3e6}
	up := map[string]float64{"pc1": 30e6, "pc2": 10e6, "pc3": 30e6, "pc4": 28e6, "pc5": 3e6}
	for _, tt := range []struct {
		busy float64
		want map[string]float64
	}{
		{0.97, map[string]float64{"pc1": 70e6, "pc2": 70e6, "pc3": 70e6, "pc4": 70e6, "pc5": 3e6}},
		{0.6, map[string]float64{"pc1": 30e6, "pc2": 10e6, "pc3": 30e6, "pc4": 70e6, "pc5": 3e6}},
	} {
		ready := []*nodeState{{name: "pc1"}, {name: "pc2"}, {name: "pc3"}, {name: "pc4"}, {name: "pc5"}}
		f := netFigures{star: map[string]float64{}, ringIn: maps.Clone(in), ringUp: maps.Clone(up), ringBusy: map[string]float64{}}
		for _, n := range ready {
			f.ringBusy[n.name] = tt.busy
		}
		f.settle(ready)
		for name, want := range tt.want {
			if got := f.link(name); got != want {
				t.Errorf("CPUs busy %.0f%%: link(%s) = %.0f after settling, want %.0f", 100*tt.busy, name, got, want)
			}
		}
	}
}
